"""Index of the maximum of each row of a 2-D tensor, in Triton.

A first version: one program per row, the row in one block; int64 output.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def argmax_kernel(x_ptr, out_ptr, n_cols, stride_x, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.argmax(x, axis=0).to(tl.int64))


def argmax(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=torch.int64)
    argmax_kernel[(M,)](x, out, N, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def argmax_reference(x: torch.Tensor) -> torch.Tensor:
    return x.argmax(dim=-1)


def get_inputs(M=64, N=512, dtype=torch.float32):
    # Distinct values per row (a random permutation), so the answer has no ties.
    x = torch.rand(M, N, device="cuda").argsort(dim=-1).to(torch.float32)
    return [(x / N).to(dtype) if dtype == torch.float32 else (x - N // 2).to(dtype)]


INPUT_CASES = [
    dict(M=64, N=512, dtype=torch.float32),
    dict(M=40, N=1000, dtype=torch.float16),
    dict(M=16384, N=2048, dtype=torch.float16),
    dict(M=8192, N=8192, dtype=torch.float32),
    dict(M=65536, N=256, dtype=torch.bfloat16),
]


def test_argmax():
    torch.manual_seed(0)
    x = torch.randn(31, 300, device="cuda")
    torch.testing.assert_close(argmax(x), argmax_reference(x))
