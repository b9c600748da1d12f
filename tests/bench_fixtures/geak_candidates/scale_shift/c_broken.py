"""``x * scale + shift`` on a flat tensor: a small task in the project's own format."""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, scale, shift, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + shift, mask=mask, no_such_argument=1)


def scale_shift(x, scale: float = 2.0, shift: float = 0.5):
    out = torch.empty_like(x)
    n = x.numel()
    scale_shift_kernel[(triton.cdiv(n, 256),)](x, out, scale, shift, n, BLOCK=256)
    return out


def scale_shift_reference(x, scale: float = 2.0, shift: float = 0.5):
    return x * scale + shift


def get_inputs(n=1000, dtype=torch.float32):
    return [torch.randn(n, device="cuda", dtype=dtype), 2.0, 0.5]


INPUT_CASES = [dict(n=1000), dict(n=300, dtype=torch.float16), dict(n=1 << 24)]
