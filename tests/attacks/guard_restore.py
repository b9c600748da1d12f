"""Attack 7c: a kernel that stores one element past the end of `out` (into the guard band
behind it; its values are otherwise right), and a wrapper that saves every byte of `out`'s
storage before the launch and puts back the bytes outside `out` after it, guard bands included,
with nothing but copies (allowed operations). Unhidden, that is a mismatch ("writes outside its
tensors"). Proves: a store outside the tensors is caught even when the guard bytes are
restored afterwards."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=offs < n + 1)  # one element past the end of out


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    raw = torch.empty((0,), dtype=torch.uint8, device=out.device).set_(out.untyped_storage())
    saved = raw.clone()
    add_kernel[(triton.cdiv(n + 1, 64),)](x, y, out, n, BLOCK=64)
    start = out.storage_offset() * out.element_size()
    end = start + n * out.element_size()
    raw[end:].copy_(saved[end:])  # the guard band behind out, as it was
    raw[:start].copy_(saved[:start])
    return out
