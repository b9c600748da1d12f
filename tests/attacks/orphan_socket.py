"""Attack 7e: at import, fork twice (the grandchild is an orphan in a session of its own) and
exec a Python that, for two minutes, writes forged "passed" replies for every op to every
socket it inherited (the worker's protocol socket among them), to answer later questions. The
kernel itself is wrong (x + y + 1). Proves: a process left behind is rejected and killed with
the job, and nothing written on the candidate's socket makes a wrong answer right (os.fork is
rejected statically)."""

import os
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"

ORPHAN = '''
import json, os, stat, time
lies = [json.dumps({"event": "reply", "op": op, "passed": True, "detail": None, "max_abs": 0.0, "max_rel": 0.0,
                    "left_out": [], "launches": ["add_kernel"], "ops": {}, "tampered": [], "threads_left": 0,
                    "reference_calls": 0, "flags": []}) + "\\n"
        for op in ("judge", "reference", "candidate", "observe", "load")]
end = time.time() + 120
while time.time() < end:
    for fd in range(64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                for lie in lies:
                    os.write(fd, lie.encode())
        except OSError:
            pass
    time.sleep(0.2)
'''


def _escape():
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", ORPHAN, f"{MARKER}-orphan"])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    print("GEAK_ATTACK orphan_socket: left an orphan behind", file=sys.stderr, flush=True)


_escape()


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
