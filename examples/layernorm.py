"""LayerNorm forward over the last dimension, with weight and bias, in Triton.

``y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias``

A first version: one program per row and the whole row in one block
(``BLOCK_SIZE = next_power_of_2(n_cols)``). Mean and variance are accumulated in fp32 and the
result is stored in the input's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, eps,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols

    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # Zero the padding lanes again: after subtracting the mean they would be -mean.
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)

    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = diff * rstd * w + b
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of ``x`` (any number of leading dimensions) over its last dimension."""
    n_cols = x.shape[-1]
    assert weight.shape == (n_cols,) and bias.shape == (n_cols,), \
        "weight and bias must have one entry per column"
    x2d = x.reshape(-1, n_cols)
    assert x2d.stride(-1) == 1, "rows must be contiguous"
    out = torch.empty((x2d.shape[0], n_cols), device=x.device, dtype=x.dtype)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    layernorm_kernel[(x2d.shape[0],)](x2d, weight, bias, out, x2d.stride(0), out.stride(0),
                                      n_cols, eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out.view(x.shape)


# --------------------------------------------------------------------------- inputs


def get_inputs(n_rows=32, n_cols=256, dtype=torch.float32):
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
    weight = torch.rand(n_cols, device="cuda", dtype=dtype) + 0.5
    bias = torch.randn(n_cols, device="cuda", dtype=dtype)
    return [x, weight, bias]


INPUT_CASES = [
    # Small: run in well under a second on the CPU interpreter.
    dict(n_rows=32, n_cols=256, dtype=torch.float32),
    dict(n_rows=50, n_cols=200, dtype=torch.float16),  # row length not a power of two
    # GPU-sized: memory bound, tens of microseconds on a modern GPU.
    dict(n_rows=8192, n_cols=4096, dtype=torch.float16),
    dict(n_rows=4096, n_cols=8192, dtype=torch.float32),
    dict(n_rows=16384, n_cols=4096, dtype=torch.bfloat16),
]


# --------------------------------------------------------------------------- check


def test_layernorm():
    torch.manual_seed(0)
    x = torch.randn(2, 24, 160, device="cuda", dtype=torch.float32)
    weight = torch.rand(160, device="cuda", dtype=torch.float32) + 0.5
    bias = torch.randn(160, device="cuda", dtype=torch.float32)
    out = layernorm(x, weight, bias, eps=1e-5)
    expected = torch.nn.functional.layer_norm(x, (160,), weight, bias, eps=1e-5)
    torch.testing.assert_close(out, expected)
