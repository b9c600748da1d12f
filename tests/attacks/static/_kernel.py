"""The kernel every candidate in this folder launches (tests/conftest.py's add_relu, blocks of
128): each candidate computes the right answer, and differs from a plain one only by the means
of in-process forgery it uses, harmlessly, so that a run of it is judged correct and only the
static check (runner/source.py, ``means_flags``) can say no."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0), mask=mask)


def launch(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    return out
