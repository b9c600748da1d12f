"""Row-wise softmax of a 2-D tensor in Triton, for long rows and for many short rows.

Same interface as ``softmax.py``, with a different kernel:

* each program handles a tile of ``ROWS_PER_PROGRAM`` rows x ``BLOCK_N`` columns, so short rows
  do not leave most of a program idle;
* a row that fits in one column block is read once and normalised in registers;
* a longer row is walked in column blocks with an online softmax: a first pass keeps a running
  row maximum and a running sum of ``exp(x - max)``, rescaling the sum whenever the maximum
  grows; a second pass writes ``exp(x - max) / sum``. The row never has to fit in registers,
  so any row length works and long rows do not spill.

Arithmetic is in fp32; the output has the input's dtype.
"""

import torch
import triton
import triton.language as tl

# Elements one program holds at a time (ROWS_PER_PROGRAM * BLOCK_N), and the widest column block.
TILE_ELEMENTS = 8192
MAX_BLOCK_N = 8192


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                   ROWS_PER_PROGRAM: tl.constexpr, BLOCK_N: tl.constexpr,
                   SINGLE_PASS: tl.constexpr):
    pid = tl.program_id(axis=0)
    rows = pid * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_mask = rows < n_rows
    # Rows past the end re-read the last row, so every row of the tile sees real data and the
    # running statistics stay finite; those rows are never stored.
    safe_rows = tl.minimum(rows, n_rows - 1)
    in_rows = in_ptr + safe_rows[:, None] * in_row_stride
    out_rows = out_ptr + rows[:, None] * out_row_stride
    cols = tl.arange(0, BLOCK_N)

    if SINGLE_PASS:
        # The whole row fits in one block (n_cols <= BLOCK_N): one read, one write.
        col_mask = cols < n_cols
        x = tl.load(in_rows + cols[None, :], mask=col_mask[None, :],
                    other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=1)[:, None]
        numerator = tl.exp(x)
        y = numerator / tl.sum(numerator, axis=1)[:, None]
        tl.store(out_rows + cols[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])
    else:
        # Pass 1: running max and running sum of exp(x - max) for each row.
        row_max = tl.full((ROWS_PER_PROGRAM,), -float("inf"), dtype=tl.float32)
        row_sum = tl.zeros((ROWS_PER_PROGRAM,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            col_mask = (start + cols) < n_cols
            x = tl.load(in_rows + start + cols[None, :], mask=col_mask[None, :],
                        other=-float("inf")).to(tl.float32)
            new_max = tl.maximum(row_max, tl.max(x, axis=1))
            # Rescale what has been summed so far to the new maximum, then add this block.
            row_sum = row_sum * tl.exp(row_max - new_max) + \
                tl.sum(tl.exp(x - new_max[:, None]), axis=1)
            row_max = new_max

        # Pass 2: normalise and store.
        inv_sum = 1.0 / row_sum
        for start in range(0, n_cols, BLOCK_N):
            col_mask = (start + cols) < n_cols
            x = tl.load(in_rows + start + cols[None, :], mask=col_mask[None, :],
                        other=-float("inf")).to(tl.float32)
            y = tl.exp(x - row_max[:, None]) * inv_sum[:, None]
            tl.store(out_rows + start + cols[None, :], y.to(out_ptr.dtype.element_ty),
                     mask=row_mask[:, None] & col_mask[None, :])


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor whose rows are contiguous."""
    assert x.ndim == 2, "softmax expects a 2-D tensor"
    assert x.stride(1) == 1, "rows must be contiguous"
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK_N = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
    ROWS_PER_PROGRAM = min(TILE_ELEMENTS // BLOCK_N, triton.next_power_of_2(n_rows))
    grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS_PER_PROGRAM"]),)
    softmax_kernel[grid](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                         ROWS_PER_PROGRAM=ROWS_PER_PROGRAM, BLOCK_N=BLOCK_N,
                         SINGLE_PASS=n_cols <= BLOCK_N, num_warps=8)
    return out


# --------------------------------------------------------------------------- inputs


def get_inputs(n_rows=64, n_cols=128, dtype=torch.float32):
    return [torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)]


INPUT_CASES = [
    # Small: run in well under a second on the CPU interpreter.
    dict(n_rows=64, n_cols=128, dtype=torch.float32),
    dict(n_rows=40, n_cols=300, dtype=torch.float16),  # row length not a power of two
    dict(n_rows=1, n_cols=12000, dtype=torch.float32),  # longer than one column block
    # GPU-sized: memory bound, tens of microseconds on a modern GPU.
    dict(n_rows=4096, n_cols=4096, dtype=torch.float32),
    dict(n_rows=16384, n_cols=2048, dtype=torch.float16),
    dict(n_rows=1024, n_cols=32768, dtype=torch.float32),  # long rows
    dict(n_rows=65536, n_cols=256, dtype=torch.float16),  # many short rows
    dict(n_rows=256, n_cols=131072, dtype=torch.float32),  # rows far longer than a block
]


# --------------------------------------------------------------------------- check


def test_softmax():
    torch.manual_seed(0)
    x = torch.randn(2, 9000, device="cuda", dtype=torch.float32)
    out = softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
