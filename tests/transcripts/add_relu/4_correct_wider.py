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


def add_relu(x, y):
    out = torch.empty_like(x)
    n = x.numel()

    add_relu_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

    return out
