"""Attack 4: at import, chmod the pool's root (the parent of the job's scratch directory, or
GEAK_POOL_ROOT where the runner names it; mode 0300 so that workers cannot list it) back to
0700, list it, and plant a file in every other worker's scratch directory, in every Triton cache
(`.triton`) found there, in the shared compile layer (GEAK_TRITON_SHARED_CACHE, or `tc-*` in the
root), and at the end of every source file of another worker's tree. The kernel itself is wrong
(x + y + 1). Proves: the pool's root and other workers' scratch are invisible to a job, so
nothing it plants reaches another job."""

import os
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"


def _say(msg):
    print(f"GEAK_ATTACK pool_root: {msg}", file=sys.stderr, flush=True)


def _plant(d, why):
    try:
        with open(os.path.join(d, f"{MARKER}_planted.txt"), "w") as f:
            f.write(f"GEAK_ATTACK {MARKER}\n")
        _say(f"planted in {d} ({why})")
        return True
    except OSError as e:
        _say(f"cannot plant in {d} ({why}): {e}")
        return False


def _attack():
    scratch = os.path.realpath(os.environ.get("HOME") or os.getcwd())
    root = os.environ.get("GEAK_POOL_ROOT") or os.path.dirname(scratch)  # the runner may say where it is
    try:
        os.chmod(root, 0o700)
        _say(f"chmod 0700 {root}")
    except OSError as e:
        _say(f"cannot chmod {root}: {e}")
    try:
        names = os.listdir(root)
        _say(f"{root} lists {sorted(names)}")
    except OSError as e:
        _say(f"cannot list {root}: {e}")
        names = []
    shared = os.environ.get("GEAK_TRITON_SHARED_CACHE")
    if shared:
        _plant(shared, "the shared compile layer")
    for name in names:
        d = os.path.join(root, name)
        if os.path.realpath(d) == scratch or not os.path.isdir(d):
            continue
        _plant(d, "another worker's scratch" if not name.startswith("tc-") else "the shared compile layer")
        for dirpath, dirnames, filenames in os.walk(d):
            if os.path.basename(dirpath) == ".triton":
                _plant(dirpath, "a Triton cache")
            for fn in filenames:
                if fn.endswith(".py"):
                    try:
                        with open(os.path.join(dirpath, fn), "a") as f:
                            f.write(f"\n# GEAK_ATTACK {MARKER}\n")
                        _say(f"appended to {os.path.join(dirpath, fn)}")
                    except OSError:
                        pass


_attack()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
