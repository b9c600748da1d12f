"""A kernel whose constexpr is a Triton dtype (``OUT_DTYPE=tl.float16``), as attention kernels
pass their output type."""

import torch
import triton
import triton.language as tl


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, (x * 2.0).to(OUT_DTYPE), mask=offs < n)


def cast_to(x):
    out = torch.empty_like(x, dtype=torch.float16)
    n = x.numel()
    cast_kernel[(triton.cdiv(n, 256),)](x, out, n, OUT_DTYPE=tl.float16, BLOCK=256)
    return out


def get_inputs():
    return [torch.randn(1000, device="cuda")]
