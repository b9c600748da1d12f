"""Kernels of the kinds the suite lacks, for ``run_kernels.py``: a user helper called from a
kernel, a module that reaches ``triton.language.core`` directly, an associative scan with a
user combine function, ``tl.math`` calls, nested helpers that call helpers."""

import torch
import triton
import triton.language as tl
from triton.language import core


@triton.jit
def _combine(a, b):
    return a + b


@triton.jit
def _scaled(x, s):
    return tl.sigmoid(x) * s


@triton.jit
def _twice(x):
    return _scaled(x, 2.0) + tl.math.rsqrt(tl.abs(x) + 1.0)


@triton.jit
def helpers_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = _twice(x)
    s = tl.associative_scan(y, 0, _combine)
    tl.store(out_ptr + offs, s + tl.max(y, 0), mask=mask)


@triton.jit
def core_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = core.program_id(0)
    offs = pid * BLOCK + core.arange(0, BLOCK)
    mask = offs < n
    x = core.load(x_ptr + offs, mask=mask, other=0.0)
    core.store(out_ptr + offs, tl.exp(x) - tl.sum(x, 0), mask=mask)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.where(c > 0, c, 0.0))


def _helpers():
    x = torch.randn(300)
    out = torch.empty_like(x)
    helpers_kernel[(triton.cdiv(300, 64),)](x, out, 300, BLOCK=64)
    return out


def _core():
    x = torch.randn(200)
    out = torch.empty_like(x)
    core_kernel[(4,)](x, out, 200, BLOCK=64)
    return out


def _dot():
    a, b = torch.randn(16, 32), torch.randn(32, 16)
    c = torch.empty(16, 16)
    dot_kernel[(1,)](a, b, c, 16, 16, 32)
    return c


# Each twice: the second launch runs on what the first left patched.
RUNS = {"helpers": _helpers, "core": _core, "dot": _dot, "helpers_again": _helpers, "core_again": _core}
