"""Layer normalisation over the last dimension with weight and bias, in Triton.

A first version: one program per row, the whole row in one block; mean and variance in fp32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride_x, stride_out, n_cols, eps,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = d * rstd * w + b
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty_like(x)
    layernorm_kernel[(M,)](x, weight, bias, out, x.stride(0), out.stride(0), N, eps,
                           BLOCK_SIZE=triton.next_power_of_2(N), num_warps=4)
    return out


def layernorm_reference(x, weight, bias, eps: float = 1e-5):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(),
                                          eps).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    w = torch.randn(N, device="cuda", dtype=dtype)
    b = torch.randn(N, device="cuda", dtype=dtype)
    return [x, w, b]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=24, N=1000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float32),
    dict(M=16384, N=8192, dtype=torch.float16),
    dict(M=4096, N=12288, dtype=torch.bfloat16),
]


def test_layernorm():
    torch.manual_seed(0)
    x, w, b = torch.randn(20, 130, device="cuda"), torch.randn(130, device="cuda"), torch.randn(130, device="cuda")
    torch.testing.assert_close(layernorm(x, w, b), layernorm_reference(x, w, b), atol=1e-5, rtol=1e-4)
