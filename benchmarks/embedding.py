"""Embedding lookup: gather rows of a (vocab, dim) table by int64 ids, in Triton.

A first version: one program per id, the whole row in one block.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_kernel(ids_ptr, weight_ptr, out_ptr, dim, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    idx = tl.load(ids_ptr + pid)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < dim
    row = tl.load(weight_ptr + idx * dim + cols, mask=mask)
    tl.store(out_ptr + pid * dim + cols, row, mask=mask)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    assert weight.ndim == 2 and weight.is_contiguous() and ids.dtype == torch.int64
    flat = ids.reshape(-1).contiguous()
    V, D = weight.shape
    out = torch.empty((flat.numel(), D), device=weight.device, dtype=weight.dtype)
    embedding_kernel[(flat.numel(),)](flat, weight, out, D, BLOCK_SIZE=triton.next_power_of_2(D))
    return out.reshape(*ids.shape, D)


def embedding_reference(ids, weight):
    return torch.nn.functional.embedding(ids, weight)


def get_bytes(ids, weight):
    """The fewest bytes one call moves: the ids, each table row used (once), the output. The
    whole table is an input, but a gather reads only the rows it is asked for."""
    rows = torch.unique(ids).numel()
    return ids.numel() * ids.element_size() + (rows + ids.numel()) * weight.shape[1] * weight.element_size()


def get_inputs(batch=4, seq=16, vocab=1000, dim=64, dtype=torch.float32):
    ids = torch.randint(0, vocab, (batch, seq), device="cuda", dtype=torch.int64)
    return [ids, torch.randn(vocab, dim, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(batch=4, seq=16, vocab=1000, dim=64, dtype=torch.float32),
    dict(batch=2, seq=7, vocab=300, dim=100, dtype=torch.float16),
    dict(batch=8, seq=4096, vocab=32000, dim=4096, dtype=torch.float16),
    dict(batch=16, seq=2048, vocab=50257, dim=1024, dtype=torch.float32),
    dict(batch=4, seq=8192, vocab=128256, dim=2048, dtype=torch.bfloat16),
]


def test_embedding():
    torch.manual_seed(0)
    ids, w = get_inputs(batch=2, seq=5, vocab=50, dim=24)
    torch.testing.assert_close(embedding(ids, w), embedding_reference(ids, w))
