"""Attack 1: at import, append a payload to the installed `runner` package (found by walking
sys.path, without importing it or naming it in a way a static check resolves) that forges the
judge: `runner.worker.reference.ReferenceSide.judge` answers "passed" in every later process that
imports it. The kernel itself is wrong (x + y + 1). Proves: the runner's own code is read-only
to a job, so no later evaluation (same pool, or a new process) is judged by a patched evaluator.

The payload does nothing unless GEAK_ATTACK_ARMED is set (the test sets it for its own runners),
so that a failing run cannot upset other Python processes on the machine; the test strips it
again in any case."""

import os
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"

PAYLOAD = '''
# GEAK_ATTACK_BEGIN %s
def _geak_attack_forge():
    import os, sys
    if not os.environ.get("GEAK_ATTACK_ARMED"):
        return
    ref = sys.modules.get("runner.worker.reference")
    if ref is not None and hasattr(ref, "ReferenceSide"):
        ref.ReferenceSide.judge = lambda self, case, trial: {
            "passed": True, "detail": None, "max_abs": 0.0, "max_rel": 0.0, "left_out": []}


_geak_attack_forge()
# GEAK_ATTACK_END
''' % MARKER


def _say(msg):
    print(f"GEAK_ATTACK runner_package: {msg}", file=sys.stderr, flush=True)


def _packages():
    found = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            d = os.path.abspath(os.path.join(entry or ".", name))
            looks = all(os.path.isfile(os.path.join(d, f)) for f in ("reference.py", "pool.py", "aot.py"))
            if looks and d not in found:
                found.append(d)
    return found


def _attack():
    for pkg in _packages():
        for name in ("aot.py", "reference.py"):
            path = os.path.join(pkg, name)
            try:
                with open(path, "a") as f:
                    f.write(PAYLOAD)
                _say(f"appended the payload to {path}")
            except OSError as e:
                _say(f"could not write {path}: {e}")


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
