"""Symmetric int8 quantisation with one scale per row, in Triton.

``scale = max|x| / 127`` per row and ``q = round(x / scale)`` clamped to [-127, 127]; returns
``(q int8, scale fp32)``. A first version: one program per row, the whole row in one block.
Rounding is half away from zero (``floor(|v| + 0.5)`` with the sign put back); the divisions
are correctly rounded so that the int8 values match PyTorch's exactly.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def int8_quant_kernel(x_ptr, q_ptr, scale_ptr, n_cols, stride_x, stride_q, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    # Correctly rounded divisions (div_rn), as PyTorch's: the fast default division of fp32 on a
    # GPU can land on the other side of a .5 and change an int8 value by one.
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=0), 1e-8), 127.0)
    v = tl.math.div_rn(x, scale)
    r = tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(-v + 0.5))
    r = tl.minimum(tl.maximum(r, -127.0), 127.0)
    tl.store(q_ptr + row * stride_q + cols, r.to(tl.int8), mask=mask)
    tl.store(scale_ptr + row, scale)


def int8_quant(x: torch.Tensor):
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    q = torch.empty((M, N), device=x.device, dtype=torch.int8)
    scale = torch.empty(M, device=x.device, dtype=torch.float32)
    int8_quant_kernel[(M,)](x, q, scale, N, x.stride(0), q.stride(0), BLOCK_SIZE=triton.next_power_of_2(N))
    return q, scale


def int8_quant_reference(x):
    xf = x.float()
    amax = xf.abs().amax(dim=-1).clamp_min(1e-8)
    # Divided by a tensor, not the Python number 127.0: on a GPU PyTorch turns a division by a
    # CPU scalar into a multiplication by its reciprocal, which can be one ulp off the correctly
    # rounded quotient (and move an int8 value by one); a tensor divisor divides exactly, as the
    # kernel (and PyTorch on the CPU) do.
    scale = amax / torch.full_like(amax, 127.0)
    v = xf / scale[:, None]
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(-127, 127).to(torch.int8)
    return q, scale


def get_inputs(M=64, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=30, N=1000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float16),
    dict(M=16384, N=4096, dtype=torch.float32),
    dict(M=4096, N=8192, dtype=torch.bfloat16),
]


def test_int8_quant():
    torch.manual_seed(0)
    x = torch.randn(20, 300, device="cuda")
    q, s = int8_quant(x)
    rq, rs = int8_quant_reference(x)
    torch.testing.assert_close(s, rs)
    assert (q.int() - rq.int()).abs().max() <= 1  # x / scale may round differently at .5
