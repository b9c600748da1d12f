import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                   BLOCK: tl.constexpr):
    # Three passes over the row in column blocks: max, then sum of exp, then the output.
    # Any row length works, but every input element is read three times.
    row = tl.program_id(axis=0)
    base = in_ptr + row * in_row_stride
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(base + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(base + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        s += tl.exp(x - row_max)
    inv = 1.0 / tl.sum(s, axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(base + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(out_ptr + row * out_row_stride + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=256, num_warps=2)
    return out
