"""Sum over the last dimension of a 2-D tensor, in Triton.

A first version: one program per row, the row read in one block of
``next_power_of_2(n_cols)`` elements; fp32 accumulation, fp32 output.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride_x, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def row_sum(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=torch.float32)
    row_sum_kernel[(M,)](x, out, N, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(N), num_warps=4)
    return out


def row_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(dim=-1)


def get_inputs(M=64, N=512, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=512, dtype=torch.float32),
    dict(M=50, N=777, dtype=torch.float16),
    dict(M=16384, N=4096, dtype=torch.float32),
    dict(M=32768, N=1024, dtype=torch.float16),
    dict(M=4096, N=16384, dtype=torch.bfloat16),
]


def test_row_sum():
    torch.manual_seed(0)
    x = torch.randn(31, 300, device="cuda")
    torch.testing.assert_close(row_sum(x), row_sum_reference(x))
