"""GELU (exact, erf form) of a tensor of any shape, in Triton.

A first version: the tensor is treated as flat, one program per block of 1024 elements,
``num_warps=4``; arithmetic in fp32, output in the input's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU of a contiguous tensor."""
    assert x.is_contiguous(), "gelu expects a contiguous tensor"
    out = torch.empty_like(x)
    n = x.numel()
    gelu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024, num_warps=4)
    return out


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float()).to(x.dtype)


def get_inputs(shape=(64, 512), dtype=torch.float32):
    return [torch.randn(*shape, device="cuda", dtype=dtype)]


INPUT_CASES = [
    # Small: run in well under a second on the CPU interpreter.
    dict(shape=(64, 512), dtype=torch.float32),
    dict(shape=(3, 1000), dtype=torch.float16),  # not a multiple of the block
    # GPU-sized: memory bound.
    dict(shape=(8192, 8192), dtype=torch.float32),
    dict(shape=(16384, 4096), dtype=torch.float16),
    dict(shape=(4096, 11008), dtype=torch.bfloat16),
]


def test_gelu():
    torch.manual_seed(0)
    x = torch.randn(33, 257, device="cuda")
    torch.testing.assert_close(gelu(x), gelu_reference(x))
