"""RMS normalisation over the last dimension with a weight, in Triton.

A first version: one program per row, the whole row in one block; fp32 arithmetic.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty_like(x)
    rmsnorm_kernel[(M,)](x, weight, out, x.stride(0), out.stride(0), N, eps,
                         BLOCK_SIZE=triton.next_power_of_2(N), num_warps=4)
    return out


def rmsnorm_reference(x, weight, eps: float = 1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype), torch.randn(N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=24, N=1000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float32),
    dict(M=16384, N=8192, dtype=torch.float16),
    dict(M=4096, N=5120, dtype=torch.bfloat16),
]


def test_rmsnorm():
    torch.manual_seed(0)
    x, w = torch.randn(20, 130, device="cuda"), torch.randn(130, device="cuda")
    torch.testing.assert_close(rmsnorm(x, w), rmsnorm_reference(x, w))
