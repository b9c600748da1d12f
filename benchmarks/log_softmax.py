"""Row-wise log-softmax of a 2-D tensor, in Triton.

A first version: one program per row, the whole row in one block:
``x - max - log(sum(exp(x - max)))`` in fp32; output in the input's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(out_ptr, in_ptr, stride_in, stride_out, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride_in + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    lse = tl.log(tl.sum(tl.exp(x), axis=0))
    tl.store(out_ptr + row * stride_out + cols, (x - lse).to(out_ptr.dtype.element_ty), mask=mask)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty_like(x)
    log_softmax_kernel[(M,)](out, x, x.stride(0), out.stride(0), N,
                             BLOCK_SIZE=triton.next_power_of_2(N), num_warps=4)
    return out


def log_softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x.float(), dim=-1).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=16, N=3000, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.float32),
    dict(M=16384, N=2048, dtype=torch.float16),
    dict(M=4096, N=32000, dtype=torch.bfloat16),
]


def test_log_softmax():
    torch.manual_seed(0)
    x = torch.randn(48, 200, device="cuda")
    torch.testing.assert_close(log_softmax(x), log_softmax_reference(x))
