"""Attack 7f: a kernel that writes a wrong answer (x + y + 1), and a wrapper that looks through
`gc.get_objects()` for the evaluator's objects in its own process (the candidate side holds the
reference function, imported to time it, without a tripwire) and returns the reference's answer
instead. Proves: a candidate cannot borrow the original's answer through the garbage collector
(`gc` is rejected statically; a call into the reference is a rejection)."""

import gc
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def _original():
    for o in gc.get_objects():
        try:
            if type(o).__name__ in ("CandidateSide", "ReferenceSide"):
                fn = getattr(o, "ref_obj", None) or getattr(o, "obj", None)
                if callable(fn) and fn is not add:
                    return fn
        except Exception:
            continue
    return None


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    ref = _original()
    print(f"GEAK_ATTACK gc_reference: found {ref!r}", file=sys.stderr, flush=True)
    return ref(x, y) if ref is not None else out
