"""Residual add followed by RMS normalisation (no dropout), in Triton.

``h = x + residual``; returns ``(rmsnorm(h) * weight, h)`` — the normalised activations and
the new residual stream, as transformer blocks use them. A first version: one program per row,
the whole row in one block; fp32 arithmetic.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    base = row * n_cols
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + r
    tl.store(h_ptr + base + cols, h.to(h_ptr.dtype.element_ty), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + base + cols, (h * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    assert x.ndim == 2 and x.is_contiguous() and residual.is_contiguous() and x.shape == residual.shape
    M, N = x.shape
    out = torch.empty_like(x)
    h = torch.empty_like(x)
    add_rmsnorm_kernel[(M,)](x, residual, weight, out, h, N, eps, BLOCK_SIZE=triton.next_power_of_2(N))
    return out, h


def add_rmsnorm_reference(x, residual, weight, eps: float = 1e-6):
    h = x.float() + residual.float()
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return out.to(x.dtype), h.to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    r = torch.randn(M, N, device="cuda", dtype=dtype)
    return [x, r, torch.randn(N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=12, N=1000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float16),
    dict(M=16384, N=4096, dtype=torch.float32),
    dict(M=4096, N=8192, dtype=torch.bfloat16),
]


def test_add_rmsnorm():
    torch.manual_seed(0)
    x, r, w = torch.randn(20, 130, device="cuda"), torch.randn(20, 130, device="cuda"), torch.randn(130, device="cuda")
    torch.testing.assert_close(add_rmsnorm(x, r, w), add_rmsnorm_reference(x, r, w))
