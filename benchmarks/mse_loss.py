"""Mean squared error between two tensors (a full reduction to one fp32 number), in Triton.

A first version: one program per block of 1024 elements adds its partial sum into the result
with an atomic add (so the order of additions varies from run to run).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def mse_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    d = a - b
    tl.atomic_add(out_ptr, tl.sum(d * d, axis=0) / n_elements)


def mse_loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.shape == b.shape and a.is_contiguous() and b.is_contiguous()
    n = a.numel()
    out = torch.zeros((), device=a.device, dtype=torch.float32)
    mse_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK_SIZE=1024)
    return out


def mse_loss_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(a.float(), b.float())


def get_inputs(n=4096, dtype=torch.float32):
    return [torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(n=4096, dtype=torch.float32),
    dict(n=10000, dtype=torch.float16),
    dict(n=1 << 26, dtype=torch.float32),
    dict(n=1 << 27, dtype=torch.float16),
    dict(n=1 << 26, dtype=torch.bfloat16),
]


def test_mse_loss():
    torch.manual_seed(0)
    a, b = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
    torch.testing.assert_close(mse_loss(a, b), mse_loss_reference(a, b))
