"""The same softmax with eight warps per row: 32 floats per thread, no spills."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n + cols, e / tl.sum(e, axis=0), mask=cols < n)


def softmax(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=8192, num_warps=8)
    return out


def get_inputs():
    return [torch.randn(2, 8192, device="cuda")]
