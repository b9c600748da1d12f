"""Attack 7g: a kernel that writes a wrong answer (x + y + 1), and a wrapper that reads the
original's source file from the job's trees (the candidate's copy beside this file, or the
reference tree) and runs it with `exec` into a namespace of its own: a fresh copy of the
reference function, without the tripwire the evaluator puts on the imported one, whose answer
it returns. Proves: a candidate cannot run the original in its place (`exec` is rejected
statically)."""

import os
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


_ORIGINAL = []


def _original():
    if _ORIGINAL:
        return _ORIGINAL[0]
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(os.path.dirname(here), "ref")):
        path = os.path.join(d, "reference.py")
        if os.path.isfile(path):
            ns = {"__name__": "geak_attack_original", "__file__": path}
            with open(path) as f:
                exec(compile(f.read(), path, "exec"), ns)
            _ORIGINAL.append(ns["add"])
            print(f"GEAK_ATTACK exec_original: ran {path}", file=sys.stderr, flush=True)
            return ns["add"]
    return None


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    ref = _original()
    return ref(x, y) if ref is not None else out
