"""``leaky_relu(x + bias)`` for x of shape (M, N) and a bias of shape (N,), in Triton.

A first version: one program per row, the whole row in one block, fixed ``num_warps=4``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def leaky_relu_bias_kernel(x_ptr, b_ptr, out_ptr, n_cols, stride_x, stride_out, slope,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x + b
    y = tl.where(y >= 0, y, y * slope)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def leaky_relu_bias(x: torch.Tensor, bias: torch.Tensor, slope: float = 0.01) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1 and bias.shape == (x.shape[1],)
    M, N = x.shape
    out = torch.empty_like(x)
    leaky_relu_bias_kernel[(M,)](x, bias, out, N, x.stride(0), out.stride(0), slope,
                                 BLOCK_SIZE=triton.next_power_of_2(N), num_warps=4)
    return out


def leaky_relu_bias_reference(x: torch.Tensor, bias: torch.Tensor, slope: float = 0.01) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x.float() + bias.float(), slope).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32, slope=0.01):
    return [torch.randn(M, N, device="cuda", dtype=dtype), torch.randn(N, device="cuda", dtype=dtype), slope]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=30, N=1000, dtype=torch.float16, slope=0.2),
    dict(M=8192, N=4096, dtype=torch.float16),
    dict(M=16384, N=1024, dtype=torch.float32),
    dict(M=4096, N=8192, dtype=torch.bfloat16),
]


def test_leaky_relu_bias():
    torch.manual_seed(0)
    x, b = torch.randn(20, 77, device="cuda"), torch.randn(77, device="cuda")
    torch.testing.assert_close(leaky_relu_bias(x, b, 0.1), leaky_relu_bias_reference(x, b, 0.1))
