"""Transpose of a 2-D tensor into a new contiguous tensor, in Triton.

A first version: 32x32 tiles, each program loads a tile and stores it transposed.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, stride_x, stride_out, BLOCK: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask)
    tl.store(out_ptr + cols[None, :] * stride_out + rows[:, None], tile, mask=mask)


def transpose(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty((N, M), device=x.device, dtype=x.dtype)
    transpose_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, out, M, N, x.stride(0), out.stride(0),
                                                               BLOCK=32, num_warps=4)
    return out


def transpose_reference(x):
    return x.t().contiguous()


def get_inputs(M=128, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=128, N=256, dtype=torch.float32),
    dict(M=70, N=130, dtype=torch.float16),
    dict(M=8192, N=8192, dtype=torch.float32),
    dict(M=16384, N=4096, dtype=torch.float16),
    dict(M=4096, N=12288, dtype=torch.bfloat16),
]


def test_transpose():
    torch.manual_seed(0)
    x = torch.randn(45, 67, device="cuda")
    torch.testing.assert_close(transpose(x), transpose_reference(x))
