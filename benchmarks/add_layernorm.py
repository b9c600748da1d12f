"""Residual add followed by layer normalisation (no dropout), in Triton.

``layernorm(x + residual) * weight + bias``. A first version: one program per row, the whole
row in one block, mean and variance in fp32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_layernorm_kernel(x_ptr, res_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    base = row * n_cols
    h = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32) + \
        tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(h, axis=0) / n_cols
    d = tl.where(mask, h - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + base + cols, (d * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def add_layernorm(x, residual, weight, bias, eps: float = 1e-5):
    assert x.ndim == 2 and x.is_contiguous() and residual.is_contiguous() and x.shape == residual.shape
    M, N = x.shape
    out = torch.empty_like(x)
    add_layernorm_kernel[(M,)](x, residual, weight, bias, out, N, eps, BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def add_layernorm_reference(x, residual, weight, bias, eps: float = 1e-5):
    h = x.float() + residual.float()
    return torch.nn.functional.layer_norm(h, (h.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    r = torch.randn(M, N, device="cuda", dtype=dtype)
    return [x, r, torch.randn(N, device="cuda", dtype=dtype), torch.randn(N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=12, N=1000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float16),
    dict(M=16384, N=2048, dtype=torch.float32),
    dict(M=4096, N=8192, dtype=torch.bfloat16),
]


def test_add_layernorm():
    torch.manual_seed(0)
    x, r = torch.randn(20, 130, device="cuda"), torch.randn(20, 130, device="cuda")
    w, b = torch.randn(130, device="cuda"), torch.randn(130, device="cuda")
    torch.testing.assert_close(add_layernorm(x, r, w, b), add_layernorm_reference(x, r, w, b), atol=1e-5, rtol=1e-4)
