"""Attention forward ``softmax(Q K^T * scale [+ causal mask]) V``, in Triton.

A first version of a flash-style kernel: one program per (block of 32 queries, batch*head),
keys and values walked in blocks of 32 with an online softmax in fp32; ``tl.dot`` with
``input_precision="ieee"``. Head dims 16–128; ``causal`` masks keys after the query.
Shapes: q, k, v are (batch, heads, seq, head_dim), contiguous.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    bh = tl.program_id(axis=1)
    base = bh * seq_len * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < seq_len
        k = tl.load(k_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        valid = offs_n[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # Rows with nothing valid yet keep m = -inf: use 0 there so exp() gives 0, not NaN.
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    assert q.shape == k.shape == v.shape and q.ndim == 4
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128), "head_dim must be 16, 32, 64 or 128"
    o = torch.empty_like(q)
    grid = (triton.cdiv(S, 32), B * H)
    attention_kernel[grid](q, k, v, o, S, D ** -0.5, HEAD_DIM=D, BLOCK_M=32, BLOCK_N=32,
                           CAUSAL=causal, num_warps=4)
    return o


def attention_reference(q, k, v, causal: bool = False):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                            is_causal=causal).to(q.dtype)


def get_flops(q, k, v, causal=False):
    B, H, S, D = q.shape
    return 4 * B * H * S * S * D // (2 if causal else 1)


def get_inputs(B=1, H=2, S=64, D=32, causal=False, dtype=torch.float32):
    return [torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3)] + [causal]


INPUT_CASES = [
    dict(B=1, H=2, S=64, D=32, causal=False, dtype=torch.float32),
    dict(B=2, H=1, S=50, D=16, causal=True, dtype=torch.float16),
    dict(B=4, H=16, S=2048, D=64, causal=False, dtype=torch.float16),
    dict(B=4, H=16, S=2048, D=64, causal=True, dtype=torch.float16),
    dict(B=2, H=32, S=4096, D=128, causal=True, dtype=torch.bfloat16),
]


def test_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 32, device="cuda") for _ in range(3))
    for causal in (False, True):
        torch.testing.assert_close(attention(q, k, v, causal), attention_reference(q, k, v, causal),
                                   atol=1e-4, rtol=1e-4)
