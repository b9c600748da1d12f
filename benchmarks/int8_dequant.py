"""Dequantisation of int8 values with one fp32 scale per row: ``q * scale[row]``, in Triton.

A first version: one program per row, the whole row in one block; the output dtype is an
argument (fp32, fp16 or bf16).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def int8_dequant_kernel(q_ptr, scale_ptr, out_ptr, n_cols, stride_q, stride_out, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    q = tl.load(q_ptr + row * stride_q + cols, mask=mask, other=0).to(tl.float32)
    s = tl.load(scale_ptr + row)
    tl.store(out_ptr + row * stride_out + cols, (q * s).to(out_ptr.dtype.element_ty), mask=mask)


def int8_dequant(q: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    assert q.ndim == 2 and q.dtype == torch.int8 and q.stride(1) == 1 and scale.shape == (q.shape[0],)
    M, N = q.shape
    out = torch.empty((M, N), device=q.device, dtype=out_dtype)
    int8_dequant_kernel[(M,)](q, scale, out, N, q.stride(0), out.stride(0), BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def int8_dequant_reference(q, scale, out_dtype: torch.dtype = torch.float32):
    return (q.float() * scale.float()[:, None]).to(out_dtype)


def get_inputs(M=64, N=256, out_dtype=torch.float32):
    q = torch.randint(-127, 128, (M, N), device="cuda", dtype=torch.int8)
    scale = torch.rand(M, device="cuda", dtype=torch.float32) / 64 + 1e-3
    return [q, scale, out_dtype]


INPUT_CASES = [
    dict(M=64, N=256, out_dtype=torch.float32),
    dict(M=30, N=1000, out_dtype=torch.float16),
    dict(M=8192, N=4096, out_dtype=torch.float16),
    dict(M=16384, N=8192, out_dtype=torch.float32),
    dict(M=8192, N=8192, out_dtype=torch.bfloat16),
]


def test_int8_dequant():
    torch.manual_seed(0)
    q, s, dt = get_inputs(M=10, N=100)
    torch.testing.assert_close(int8_dequant(q, s, dt), int8_dequant_reference(q, s, dt))
