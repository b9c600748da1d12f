"""Attack 7d: a kernel that writes a wrong answer (x + y + 1), and a thread started with
`_thread.start_new_thread` (not a `threading.Thread`, so `threading.enumerate()` does not list
it) that keeps overwriting `out` with x + y computed by PyTorch, where the evaluator's
dispatch mode (per thread) does not see it. Proves: work done by a background thread cannot
make a wrong kernel right (`_thread` is rejected statically; a thread left running is a
rejection)."""

import _thread
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def _keep_working(x, y, out):
    while True:
        try:
            out.copy_(x + y)
        except Exception:
            pass
        time.sleep(0.001)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    _thread.start_new_thread(_keep_working, (x, y, out))
    print("GEAK_ATTACK thread_worker: started a _thread", file=sys.stderr, flush=True)
    time.sleep(0.3)
    return out
