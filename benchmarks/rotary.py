"""Rotary position embedding (RoPE, halves rotated, as in GPT-NeoX / Llama), in Triton.

``x`` is (batch, seq, heads, head_dim), ``cos`` and ``sin`` are (seq, head_dim // 2).
The first half of each head is rotated against the second. A first version: one program per
(batch, position, head), one block of ``head_dim // 2``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, seq_len, n_heads, HALF: tl.constexpr,
                  BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    pos = (pid // n_heads) % seq_len
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    base = pid * 2 * HALF
    x1 = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + pos * HALF + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * HALF + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + base + offs, (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + base + HALF + offs, (x2 * c + x1 * s).to(out_ptr.dtype.element_ty), mask=mask)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 4 and x.is_contiguous() and x.shape[-1] % 2 == 0
    B, S, H, D = x.shape
    assert cos.shape == sin.shape == (S, D // 2) and cos.is_contiguous() and sin.is_contiguous()
    out = torch.empty_like(x)
    rotary_kernel[(B * S * H,)](x, cos, sin, out, S, H, HALF=D // 2, BLOCK=triton.next_power_of_2(D // 2))
    return out


def rotary_reference(x, cos, sin):
    xf = x.float()
    half = x.shape[-1] // 2
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def get_inputs(B=2, S=32, H=4, D=64, dtype=torch.float32):
    x = torch.randn(B, S, H, D, device="cuda", dtype=dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    angles = torch.arange(S, device="cuda", dtype=torch.float32)[:, None] * inv_freq[None, :]
    return [x, angles.cos().to(dtype), angles.sin().to(dtype)]


INPUT_CASES = [
    dict(B=2, S=32, H=4, D=64, dtype=torch.float32),
    dict(B=1, S=20, H=3, D=80, dtype=torch.float16),  # half = 40: not a power of two
    dict(B=8, S=4096, H=32, D=128, dtype=torch.float16),
    dict(B=4, S=8192, H=8, D=128, dtype=torch.bfloat16),
    dict(B=16, S=2048, H=16, D=64, dtype=torch.float32),
]


def test_rotary():
    torch.manual_seed(0)
    x, c, s = get_inputs(B=1, S=10, H=2, D=32)
    torch.testing.assert_close(rotary(x, c, s), rotary_reference(x, c, s))
