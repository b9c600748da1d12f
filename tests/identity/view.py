import os

import torch
import triton
import triton.language as tl


class View:
    """A view that keeps its own data pointer, as TritonBench-G's StridedBuffer does: the base
    tensor's data_ptr() plus an offset in bytes."""

    def __init__(self, base, offset):
        self._base = base
        self.offset = offset
        self._data_ptr = base.data_ptr() + offset * base.element_size()

    def data_ptr(self):
        return self._data_ptr


@triton.jit
def shifted_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def shifted_copy(view, n):
    out = torch.empty(n, device=view._base.device)
    shifted_copy_kernel[(triton.cdiv(n, 128),)](view._base[view.offset:], out, n, BLOCK=128)
    return out



##################################################################################################################################################


def test_shifted_copy():
    # Something of a size that differs run to run is allocated first, so the base tensor lands
    # at another address in each run, as allocations do on a GPU.
    pad = torch.empty((1 << 16) + int.from_bytes(os.urandom(2), "little") * 2, device="cuda")
    x = torch.randn(1000, device="cuda")
    results = {"test_case_1": shifted_copy(View(x, 10), 500)}
    del pad
    return results


result_gold = test_shifted_copy()
