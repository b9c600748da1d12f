import torch
import triton
import triton.language as tl


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, alpha, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + alpha * y, mask=mask)


def scaled_add(x, y, alpha=1.0):
    out = torch.empty_like(x)
    n = out.numel()
    scaled_add_kernel[(triton.cdiv(n, 128),)](x, y, out, alpha, n, BLOCK_SIZE=128)
    return out


##################################################################################################################################################
import torch


def test_scaled_add():
    results = {}
    x = torch.randn(1000, device='cuda')
    y = torch.randn(1000, device='cuda')
    results['test_case_1'] = scaled_add(x, y)
    results['test_case_2'] = scaled_add(x, y, alpha=0.5)
    a = torch.randn(7, 33, device='cuda', dtype=torch.float16)
    results['test_case_3'] = scaled_add(a, a, alpha=2.0)
    return results


result_gold = test_scaled_add()
