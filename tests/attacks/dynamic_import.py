"""Attack 11 (found reading runner/source.py): the heap walk of gc_reference.py with the means
named only at run time, so that the static check cannot tell what they are: the module through
`importlib.import_module` of a computed name (a dynamic import is a warning, not a rejection),
the function through `getattr` of a computed name. A kernel that writes a wrong answer
(x + y + 1), and a wrapper that finds the evaluator's candidate side among the interpreter's
objects and returns the reference's answer (the reference function it holds to time it, which
carries no tripwire). Proves: a candidate cannot borrow the original's answer even where the
static check is blind (the runtime checks or the sandbox must catch it)."""

import importlib
import sys

import torch
import triton
import triton.language as tl


def _name(*codes):
    return "".join(chr(c) for c in codes)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def _original():
    heap = importlib.import_module(_name(103, 99))  # computed at run time
    objects = getattr(heap, _name(103, 101, 116, 95, 111, 98, 106, 101, 99, 116, 115))()
    for o in objects:
        try:
            if type(o).__name__.endswith(_name(83, 105, 100, 101)):
                fn = getattr(o, _name(114, 101, 102, 95, 111, 98, 106), None)
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
    print(f"GEAK_ATTACK dynamic_import: found {ref!r}", file=sys.stderr, flush=True)
    return ref(x, y) if ref is not None else out
