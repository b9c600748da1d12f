"""L2 normalisation of each row of a 2-D tensor: ``x / max(||x||, eps)``, in Triton.

A first version: one program per row, the whole row in one block.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def l2_normalize_kernel(x_ptr, out_ptr, stride_x, stride_out, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    norm = tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), eps)
    tl.store(out_ptr + row * stride_out + cols, (x / norm).to(out_ptr.dtype.element_ty), mask=mask)


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    assert x.ndim == 2 and x.stride(1) == 1
    M, N = x.shape
    out = torch.empty_like(x)
    l2_normalize_kernel[(M,)](x, out, x.stride(0), out.stride(0), N, eps,
                              BLOCK_SIZE=triton.next_power_of_2(N))
    return out


def l2_normalize_reference(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    return torch.nn.functional.normalize(x.float(), p=2.0, dim=-1, eps=eps).to(x.dtype)


def get_inputs(M=64, N=256, dtype=torch.float32):
    return [torch.randn(M, N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=256, dtype=torch.float32),
    dict(M=10, N=3000, dtype=torch.float16),
    dict(M=16384, N=1024, dtype=torch.float32),
    dict(M=65536, N=768, dtype=torch.float16),
    dict(M=8192, N=4096, dtype=torch.bfloat16),
]


def test_l2_normalize():
    torch.manual_seed(0)
    x = torch.randn(20, 130, device="cuda")
    torch.testing.assert_close(l2_normalize(x), l2_normalize_reference(x))
