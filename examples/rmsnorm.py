"""RMSNorm over the last dimension, with a learned weight, in Triton.

``y = x / sqrt(mean(x ** 2) + eps) * weight``

A first version: one program per row and the whole row in one block
(``BLOCK_SIZE = next_power_of_2(n_cols)``). Statistics are accumulated in fp32 and the result is
stored in the input's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, eps,
                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols

    # Padding lanes read 0 so that they add nothing to the sum of squares.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)

    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of ``x`` (any number of leading dimensions) over its last dimension."""
    n_cols = x.shape[-1]
    assert weight.shape == (n_cols,), "weight must have one entry per column"
    x2d = x.reshape(-1, n_cols)
    assert x2d.stride(-1) == 1, "rows must be contiguous"
    out = torch.empty((x2d.shape[0], n_cols), device=x.device, dtype=x.dtype)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    rmsnorm_kernel[(x2d.shape[0],)](x2d, weight, out, x2d.stride(0), out.stride(0), n_cols, eps,
                                    BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out.view(x.shape)


# --------------------------------------------------------------------------- inputs


def get_inputs(n_rows=32, n_cols=256, dtype=torch.float32):
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
    weight = torch.rand(n_cols, device="cuda", dtype=dtype) + 0.5
    return [x, weight]


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


def test_rmsnorm():
    torch.manual_seed(0)
    x = torch.randn(2, 24, 160, device="cuda", dtype=torch.float32)
    weight = torch.rand(160, device="cuda", dtype=torch.float32) + 0.5
    out = rmsnorm(x, weight, eps=1e-6)
    expected = torch.nn.functional.rms_norm(x, (160,), weight, eps=1e-6)
    torch.testing.assert_close(out, expected)
