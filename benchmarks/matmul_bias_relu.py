"""``relu(A @ B + bias)``: a tiled matmul with the bias and ReLU fused into the epilogue, in Triton.

A first version: one 64x64 tile of C per program on a 2-D grid, K in chunks of 32 with
``tl.dot`` (fp32 accumulator, ``input_precision="ieee"`` so fp32 inputs are exact), fixed
``num_warps=4, num_stages=2``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
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
        rem = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < rem), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < rem) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0] and bias.shape == (b.shape[1],)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    matmul_bias_relu_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
                                  num_warps=4, num_stages=2)
    return c


def matmul_bias_relu_reference(a, b, bias):
    return torch.relu(a.float() @ b.float() + bias.float()).to(a.dtype)


def get_flops(a, b, bias):
    (M, K), N = a.shape, b.shape[1]
    return 2 * M * N * K


def get_inputs(M=64, N=64, K=64, dtype=torch.float16):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype) / K ** 0.5
    return [a, b, torch.randn(N, device="cuda", dtype=dtype)]


INPUT_CASES = [
    dict(M=64, N=64, K=64, dtype=torch.float16),
    dict(M=100, N=72, K=48, dtype=torch.float32),  # ragged edges
    dict(M=4096, N=4096, K=4096, dtype=torch.float16),
    dict(M=8192, N=8192, K=1024, dtype=torch.bfloat16),
    dict(M=2048, N=11008, K=4096, dtype=torch.float16),
]


def test_matmul_bias_relu():
    torch.manual_seed(0)
    a, b, bias = torch.randn(70, 40, device="cuda"), torch.randn(40, 90, device="cuda"), torch.randn(90, device="cuda")
    torch.testing.assert_close(matmul_bias_relu(a, b, bias), matmul_bias_relu_reference(a, b, bias), atol=1e-4, rtol=1e-4)
