"""Inclusive prefix sum along each row of a 2-D tensor, in Triton.

A first version: one program per row, the whole row in one block with ``tl.cumsum``;
fp32 accumulation, output in fp32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, tl.cumsum(x, axis=0), mask=mask)


def cumsum(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=torch.float32)
    cumsum_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def cumsum_reference(x):
    return x.float().cumsum(dim=-1)


def get_inputs(M=64, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=20, N=1000, dtype=torch.float16),
    dict(M=16384, N=1024, dtype=torch.float32),
    dict(M=4096, N=4096, dtype=torch.float16),
    dict(M=8192, N=2048, dtype=torch.bfloat16),
]


def test_cumsum():
    torch.manual_seed(0)
    x = torch.randn(10, 300, device="cuda")
    torch.testing.assert_close(cumsum(x), cumsum_reference(x), atol=1e-4, rtol=1e-4)
