"""Sum over the first dimension of a 2-D tensor (a column reduction), in Triton.

A first version: one program per block of 64 columns walks all rows, 32 at a time; fp32
accumulation and output.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(axis=0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + cols, acc, mask=cols < n_cols)


def col_sum(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty(N, device=x.device, dtype=torch.float32)
    col_sum_kernel[(triton.cdiv(N, 64),)](x, out, M, N, x.stride(0), BLOCK_M=32, BLOCK_N=64)
    return out


def col_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(dim=0)


def get_inputs(M=256, N=128, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=256, N=128, dtype=torch.float32),
    dict(M=100, N=300, dtype=torch.float16),
    dict(M=16384, N=4096, dtype=torch.float32),
    dict(M=65536, N=1024, dtype=torch.float16),
    dict(M=8192, N=8192, dtype=torch.bfloat16),
]


def test_col_sum():
    torch.manual_seed(0)
    x = torch.randn(77, 130, device="cuda")
    torch.testing.assert_close(col_sum(x), col_sum_reference(x))
