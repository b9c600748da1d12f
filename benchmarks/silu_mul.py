"""SwiGLU gate: ``silu(gate) * up`` for two tensors of the same shape, in Triton.

A first version: flat view, one program per 1024 elements, fp32 arithmetic.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def silu_mul_kernel(gate_ptr, up_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    assert gate.shape == up.shape and gate.is_contiguous() and up.is_contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    silu_mul_kernel[(triton.cdiv(n, 1024),)](gate, up, out, n, BLOCK_SIZE=1024)
    return out


def silu_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def get_inputs(tokens=32, hidden=512, dtype=torch.float32):
    gate = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
    up = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
    return [gate, up]


INPUT_CASES = [
    dict(tokens=32, hidden=512, dtype=torch.float32),
    dict(tokens=7, hidden=1100, dtype=torch.float16),
    dict(tokens=4096, hidden=11008, dtype=torch.float16),
    dict(tokens=8192, hidden=14336, dtype=torch.bfloat16),
    dict(tokens=2048, hidden=8192, dtype=torch.float32),
]


def test_silu_mul():
    torch.manual_seed(0)
    g, u = torch.randn(2, 17, 300, device="cuda").unbind(0)
    torch.testing.assert_close(silu_mul(g.contiguous(), u.contiguous()), silu_mul_reference(g, u))
