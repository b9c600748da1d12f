"""Attack 7b: replace `runner.worker.exchange.Guarded.breach` in the candidate's worker so that no
guard band ever reads as written, with a kernel that stores one element past the end of `out`
(into the guard band behind it); its values are otherwise right. Unpatched, that is a mismatch
("writes outside its tensors"). Proves: patching the evaluator's checks in the candidate's
process is caught (importing the runner is rejected statically), so the write is not hidden."""

import sys

import runner.worker.exchange
import torch
import triton
import triton.language as tl

runner.worker.exchange.Guarded.breach = lambda self: None
print("GEAK_ATTACK guard_breach: runner.worker.exchange.Guarded.breach replaced", file=sys.stderr, flush=True)


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
    add_kernel[(triton.cdiv(n + 1, 64),)](x, y, out, n, BLOCK=64)
    return out
