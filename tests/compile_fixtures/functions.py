"""PyTorch functions for the compile strategy: a fused chain with a reduction, two outputs,
a data-dependent branch (a graph break), and a lone matmul (nothing for Triton)."""

import torch


def gelu_sum(x, y):
    return torch.nn.functional.gelu(x * y + 1).sum(-1)


def norm_and_max(x, y):
    n = x / (x.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    return n, (n * y).amax(-1)


def branchy(x, y):
    if x.sum() > 0:
        return x * y
    return x - y


def only_matmul(a, b):
    return a @ b.T


def get_inputs(n=16, m=40):
    return [torch.randn(n, m, device="cuda"), torch.randn(n, m, device="cuda")]


INPUT_CASES = [dict(n=16, m=40), dict(n=7, m=130)]
