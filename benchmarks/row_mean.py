"""Mean over the last dimension of a 2-D tensor, in Triton.

A first version: one program per row, walking the row in chunks of 256 (so any row length
fits), fp32 accumulation; the output has the input's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, n_cols, stride_x, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    tl.store(out_ptr + row, mean.to(out_ptr.dtype.element_ty))


def row_mean(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=x.dtype)
    row_mean_kernel[(M,)](x, out, N, x.stride(0), BLOCK_SIZE=256, num_warps=4, num_stages=2)
    return out


def row_mean_reference(x: torch.Tensor) -> torch.Tensor:
    return x.float().mean(dim=-1).to(x.dtype)


def get_inputs(M=64, N=512, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=512, dtype=torch.float32),
    dict(M=16, N=2000, dtype=torch.float16),
    dict(M=16384, N=4096, dtype=torch.float32),
    dict(M=8192, N=8192, dtype=torch.float16),
    dict(M=4096, N=16384, dtype=torch.bfloat16),
]


def test_row_mean():
    torch.manual_seed(0)
    x = torch.randn(31, 700, device="cuda")
    torch.testing.assert_close(row_mean(x), row_mean_reference(x))
