"""Batched add with broadcasting: ``x (B, M, N) + y`` where y is (B, M, N), (1, M, N), (B, 1, N) or (N,).

A first version: the broadcast is expressed through strides (0 along broadcast dims), one
program per (batch, row), one block per row.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def broadcast_add_kernel(x_ptr, y_ptr, out_ptr, M, N, sxb, sxm, syb, sym, syn,
                         BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    b = pid // M
    m = pid % M
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + b * sxb + m * sxm + cols, mask=mask, other=0.0)
    y = tl.load(y_ptr + b * syb + m * sym + cols * syn, mask=mask, other=0.0)
    tl.store(out_ptr + pid * N + cols, x + y, mask=mask)


def broadcast_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 3 and x.stride(2) == 1 and x.dtype == y.dtype
    B, M, N = x.shape
    yb = y.expand(B, M, N)  # a view: strides are 0 where y is broadcast
    out = torch.empty((B, M, N), device=x.device, dtype=x.dtype)
    broadcast_add_kernel[(B * M,)](x, yb, out, M, N, x.stride(0), x.stride(1),
                                   yb.stride(0), yb.stride(1), yb.stride(2),
                                   BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def broadcast_add_reference(x, y):
    return x + y


def get_inputs(B=4, M=16, N=256, y_shape="row", dtype=torch.float32):
    x = torch.randn(B, M, N, device="cuda", dtype=dtype)
    shape = {"full": (B, M, N), "batch": (1, M, N), "row": (B, 1, N), "vector": (N,)}[y_shape]
    return [x, torch.randn(*shape, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(B=4, M=16, N=256, y_shape="row", dtype=torch.float32),
    dict(B=2, M=10, N=300, y_shape="vector", dtype=torch.float16),
    dict(B=3, M=8, N=128, y_shape="batch", dtype=torch.float32),
    dict(B=64, M=512, N=1024, y_shape="row", dtype=torch.float16),
    dict(B=32, M=1024, N=1024, y_shape="full", dtype=torch.float32),
    dict(B=16, M=2048, N=2048, y_shape="vector", dtype=torch.bfloat16),
]


def test_broadcast_add():
    torch.manual_seed(0)
    for kind in ("full", "batch", "row", "vector"):
        x, y = get_inputs(B=2, M=3, N=50, y_shape=kind)
        torch.testing.assert_close(broadcast_add(x, y), broadcast_add_reference(x, y))
