"""The reference every attack in this folder is a candidate for: an elementwise add kernel and
its wrapper, with tiny inputs (the CPU interpreter runs it)."""

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
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out


INPUT_CASES = [dict(n=100)]


def get_inputs(n=100):
    return [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]
