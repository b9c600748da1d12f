"""Cross-entropy loss forward, per row: ``logsumexp(logits) - logits[target]``, in Triton.

A first version: one program per row (one token), the whole vocabulary row in one block;
fp32 arithmetic and an fp32 loss per row (no reduction).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def cross_entropy_kernel(logits_ptr, target_ptr, loss_ptr, stride_l, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(logits_ptr + row * stride_l + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
    t = tl.load(target_ptr + row)
    x_t = tl.load(logits_ptr + row * stride_l + t).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_t)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    assert logits.ndim == 2 and logits.stride(1) == 1 and target.shape == (logits.shape[0],)
    M, V = logits.shape
    loss = torch.empty(M, device=logits.device, dtype=torch.float32)
    cross_entropy_kernel[(M,)](logits, target, loss, logits.stride(0), V,
                               BLOCK_SIZE=triton.next_power_of_2(V), num_warps=4)
    return loss


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")


def get_inputs(tokens=32, vocab=1000, dtype=torch.float32):
    logits = torch.randn(tokens, vocab, device="cuda", dtype=dtype)
    target = torch.randint(0, vocab, (tokens,), device="cuda", dtype=torch.int64)
    return [logits, target]


INPUT_CASES = [
    dict(tokens=32, vocab=1000, dtype=torch.float32),
    dict(tokens=8, vocab=5000, dtype=torch.float16),
    dict(tokens=4096, vocab=32000, dtype=torch.float32),
    dict(tokens=8192, vocab=32000, dtype=torch.float16),
    dict(tokens=2048, vocab=50257, dtype=torch.bfloat16),
]


def test_cross_entropy():
    torch.manual_seed(0)
    logits, target = torch.randn(16, 300, device="cuda"), torch.randint(0, 300, (16,), device="cuda")
    torch.testing.assert_close(cross_entropy(logits, target), cross_entropy_reference(logits, target))
