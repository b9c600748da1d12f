"""Tiled matrix multiplication ``C = A @ B`` in Triton.

A first version: each program computes one ``BLOCK_M x BLOCK_N`` tile of C on a 2-D grid,
stepping through K in chunks of ``BLOCK_K`` with ``tl.dot``. Edges are masked, so any M, N and
K work. The accumulator is fp32; C has the inputs' dtype. Launch settings are fixed
(64 / 64 / 32, ``num_warps=4``, ``num_stages=2``).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        # Out-of-range rows, columns and the K tail read 0, which adds nothing to the dot.
        k_remaining = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining),
                    other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_remaining) & (offs_n[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D tensors ``a`` (M x K) and ``b`` (K x N) of the same dtype."""
    assert a.ndim == 2 and b.ndim == 2, "matmul expects 2-D tensors"
    assert a.shape[1] == b.shape[0], "inner dimensions must match"
    assert a.dtype == b.dtype, "a and b must have the same dtype"
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    matmul_kernel[grid](a, b, c, M, N, K,
                        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1),
                        BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    return c


# --------------------------------------------------------------------------- inputs


def get_flops(a, b):
    """Work of C = A @ B: one multiply and one add per (m, n, k). The evaluator reports TFLOP/s
    and % of the GPU's peak from it."""
    (M, K), N = a.shape, b.shape[1]
    return 2 * M * N * K


def get_inputs(M=64, N=64, K=64, dtype=torch.float16):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    return [a, b]


INPUT_CASES = [
    # Small: run in well under a second on the CPU interpreter.
    dict(M=64, N=64, K=64, dtype=torch.float16),
    dict(M=100, N=72, K=48, dtype=torch.float32),  # ragged edges in M, N and K
    # GPU-sized: compute bound, tens of microseconds or more on a modern GPU.
    dict(M=2048, N=2048, K=2048, dtype=torch.float16),
    dict(M=4096, N=4096, K=4096, dtype=torch.float16),
    dict(M=8192, N=4096, K=1024, dtype=torch.bfloat16),
]


# --------------------------------------------------------------------------- check


def test_matmul():
    torch.manual_seed(0)
    a = torch.randn(96, 80, device="cuda", dtype=torch.float16)
    b = torch.randn(80, 72, device="cuda", dtype=torch.float16)
    out = matmul(a, b)
    expected = (a.float() @ b.float()).to(torch.float16)
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)
