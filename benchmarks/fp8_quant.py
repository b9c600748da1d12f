"""Quantisation to fp8 (e4m3 or e5m2) with one fp32 scale per row, in Triton.

``scale = max|x| / FP8_MAX`` per row, ``q = (x / scale)`` cast to the fp8 dtype; returns
``(q, scale)``. A first version: one program per row, the whole row in one block.

Cases for an fp8 dtype that this torch does not have are left out. The interpreter case uses
values that the fp8 format holds exactly (a power-of-two scale times fp8 values, each row
reaching the format's maximum): the Triton CPU interpreter rounds some float→fp8 conversions
wrongly (where rounding carries into the next exponent). The GPU cases use random normal
inputs, so rounding is checked there.
"""

import torch
import triton
import triton.language as tl

FP8_DTYPES = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]


@triton.jit
def fp8_quant_kernel(x_ptr, q_ptr, scale_ptr, n_cols, stride_x, stride_q, fp8_max,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12) / fp8_max
    y = tl.minimum(tl.maximum(x / scale, -fp8_max), fp8_max)
    tl.store(q_ptr + row * stride_q + cols, y.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + row, scale)


def fp8_quant(x: torch.Tensor, fp8_dtype: torch.dtype):
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    q = torch.empty((M, N), device=x.device, dtype=fp8_dtype)
    scale = torch.empty(M, device=x.device, dtype=torch.float32)
    fp8_quant_kernel[(M,)](x, q, scale, N, x.stride(0), q.stride(0), float(torch.finfo(fp8_dtype).max),
                           BLOCK_SIZE=triton.next_power_of_2(N))
    return q, scale


def fp8_quant_reference(x, fp8_dtype):
    fmax = torch.finfo(fp8_dtype).max
    xf = x.float()
    amax = xf.abs().amax(dim=-1).clamp_min(1e-12)
    scale = amax / torch.full_like(amax, fmax)  # a tensor divisor divides exactly (see int8_quant.py)
    return (xf / scale[:, None]).clamp(-fmax, fmax).to(fp8_dtype), scale


def get_inputs(M=32, N=256, dtype=torch.float32, fp8_dtype=None, exact=False):
    fp8_dtype = fp8_dtype or FP8_DTYPES[0]
    if not exact:
        return [torch.randn(M, N, device="cuda", dtype=dtype), fp8_dtype]
    # Values fp8 holds exactly: fp8 numbers times a power-of-two scale per row, each row
    # holding +max once so that the row's scale is exactly that power of two.
    fmax = torch.finfo(fp8_dtype).max
    v = (torch.randn(M, N, device="cuda") * fmax / 4).clamp(-fmax, fmax).to(fp8_dtype).float()
    v[:, 0] = fmax
    scale = 2.0 ** torch.randint(-6, 2, (M, 1), device="cuda").float()
    return [(v * scale).to(dtype), fp8_dtype]


INPUT_CASES = [c for fp8 in FP8_DTYPES for c in (
    dict(M=32, N=256, dtype=torch.float32, fp8_dtype=fp8, exact=True),
    dict(M=8192, N=4096, dtype=torch.float16, fp8_dtype=fp8),
    dict(M=16384, N=8192, dtype=torch.bfloat16, fp8_dtype=fp8),
)] + [dict(M=16384, N=4096, dtype=torch.float32)]


def test_fp8_quant():
    torch.manual_seed(0)
    x, fp8 = get_inputs(M=8, N=100, exact=True)
    q, s = fp8_quant(x, fp8)
    rq, rs = fp8_quant_reference(x, fp8)
    torch.testing.assert_close(s, rs)
    torch.testing.assert_close(q.float(), rq.float())
