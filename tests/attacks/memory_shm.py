"""Attack 6: at import, hold host memory where a per-process count may miss it: a memfd
(os.memfd_create, written, never mapped) and a file in /dev/shm, HINTS["mb"] MB
each (300 in the test; a red-team run used 1.5 GB and 1 GB). The kernel itself is wrong
(x + y + 1). Proves: the job ends not correct (wrong, or killed for memory), and what it held
is gone with it: no file is left in the host's /dev/shm and the host's shared memory is back."""

import os
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ..., "mb": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"
MB = int(HINTS.get("mb", 300)) if isinstance(HINTS, dict) else 300
_HELD = []


def _say(msg):
    print(f"GEAK_ATTACK memory_shm: {msg}", file=sys.stderr, flush=True)


def _fill(fd, mb):
    chunk = b"\x5a" * (1 << 20)
    with open(fd, "wb", closefd=False) as f:
        for _ in range(mb):
            f.write(chunk)


def _attack():
    try:
        fd = os.memfd_create(f"{MARKER}_memfd")
        _fill(fd, MB)
        _HELD.append(fd)
        _say(f"holds {MB} MB in a memfd")
    except OSError as e:
        _say(f"memfd refused: {e}")
    path = f"/dev/shm/{MARKER}_held"
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        _fill(fd, MB)
        _HELD.append(fd)
        _say(f"holds {MB} MB in {path}")
    except OSError as e:
        _say(f"/dev/shm refused: {e}")


_attack()


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
