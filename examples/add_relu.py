"""Elementwise ``relu(x + y)`` in Triton.

A first version: one program handles one contiguous block of ``BLOCK_SIZE`` elements, and the
last block is masked. Launch settings are fixed (``BLOCK_SIZE=1024``, ``num_warps=4``).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # The last block may run past the end of the tensors.
    mask = offsets < n_elements

    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    out = tl.maximum(x + y, 0.0)
    tl.store(out_ptr + offsets, out, mask=mask)


def add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``relu(x + y)`` for two contiguous tensors of the same shape and dtype."""
    assert x.shape == y.shape and x.dtype == y.dtype, "x and y must match in shape and dtype"
    assert x.is_contiguous() and y.is_contiguous(), "x and y must be contiguous"
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_relu_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=4)
    return out


# --------------------------------------------------------------------------- inputs


def get_inputs(n=4096, dtype=torch.float32):
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.randn(n, device="cuda", dtype=dtype)
    return [x, y]


INPUT_CASES = [
    # Small: run in well under a second on the CPU interpreter.
    dict(n=4096, dtype=torch.float32),
    dict(n=5000, dtype=torch.float16),  # not a multiple of the block: exercises the mask
    # GPU-sized: memory bound, tens of microseconds on a modern GPU.
    dict(n=2 ** 24, dtype=torch.float32),
    dict(n=2 ** 26, dtype=torch.float16),
    dict(n=2 ** 25, dtype=torch.bfloat16),
]


# --------------------------------------------------------------------------- check


def test_add_relu():
    torch.manual_seed(0)
    x = torch.randn(3000, device="cuda", dtype=torch.float32)
    y = torch.randn(3000, device="cuda", dtype=torch.float32)
    out = add_relu(x, y)
    torch.testing.assert_close(out, torch.relu(x + y))
