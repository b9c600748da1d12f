"""Batched matrix multiplication ``C[i] = A[i] @ B[i]``, in Triton.

A first version: a 3-D grid (tile of M, tile of N, batch), 32x32 tiles, K in chunks of 32,
fp32 accumulator with ``input_precision="ieee"``, fixed launch settings.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
               stride_cb, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    batch = tl.program_id(axis=2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        rem = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < rem), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < rem) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
    B, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((B, M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32), B)
    bmm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1),
                     b.stride(2), c.stride(0), c.stride(1), c.stride(2),
                     BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4)
    return c


def bmm_reference(a, b):
    return torch.bmm(a.float(), b.float()).to(a.dtype)


def get_flops(a, b):
    B, M, K = a.shape
    return 2 * B * M * b.shape[2] * K


def get_inputs(B=4, M=32, N=32, K=64, dtype=torch.float16):
    a = torch.randn(B, M, K, device="cuda", dtype=dtype)
    b = torch.randn(B, K, N, device="cuda", dtype=dtype) / K ** 0.5
    return [a, b]


INPUT_CASES = [
    dict(B=4, M=32, N=32, K=64, dtype=torch.float16),
    dict(B=3, M=40, N=24, K=50, dtype=torch.float32),
    dict(B=64, M=512, N=512, K=512, dtype=torch.float16),
    dict(B=32, M=1024, N=1024, K=128, dtype=torch.bfloat16),
    dict(B=16, M=2048, N=2048, K=64, dtype=torch.float32),
]


def test_bmm():
    torch.manual_seed(0)
    a, b = torch.randn(2, 40, 30, device="cuda"), torch.randn(2, 30, 50, device="cuda")
    torch.testing.assert_close(bmm(a, b), bmm_reference(a, b), atol=1e-4, rtol=1e-4)
