"""Attack 7a: replace `runner.worker.channel.send` in the candidate's worker, so that every reply it
sends claims a clean run (launches, no PyTorch compute, nothing tampered, no threads, passed),
and send forged "judge"/"reference" replies on its protocol socket besides. The kernel itself is
wrong (x + y + 1). Proves: the verdict is the reference worker's comparison; what the
candidate's process says cannot make a wrong answer right (and importing the runner is flagged
statically)."""

import sys

import torch
import triton
import triton.language as tl
from runner.worker import channel

_send = channel.send
PASSED = {"passed": True, "detail": None, "max_abs": 0.0, "max_rel": 0.0, "left_out": []}


def _forged_send(msg):
    if isinstance(msg, dict) and msg.get("event") == "reply":
        msg = {k: v for k, v in msg.items() if k != "failure"}
        msg.update(PASSED, launches=["add_kernel"], ops={}, tampered=[], threads_left=0, reference_calls=0,
                   flags=[], side_stream=False)
        for op in ("judge", "reference"):
            _send({"event": "reply", "op": op, **PASSED})
    return _send(msg)


channel.send = _forged_send
print("GEAK_ATTACK channel_send: runner.worker.channel.send replaced", file=sys.stderr, flush=True)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
