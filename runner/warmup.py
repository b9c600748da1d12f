"""Work done once in the fork server so that every forked worker starts warm (CPU interpreter).

The first interpreted Triton launch in a process costs about 40 ms more than later ones (the
interpreter sets itself up); the first ``torch.save``/``torch.load`` import what they need.
Done here, before any fork, each single-use worker skips that. Nothing here may start a thread
(PyTorch's CPU thread pool would not survive the fork: the workers would hang), and on a GPU
nothing is launched: the fork server must not create a GPU context.
"""

from __future__ import annotations

import os
import tempfile

import triton
import triton.language as tl


@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def warm(interpreter: bool) -> None:
    import torch

    from .exchange import load, save
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.pt")
        save(path, {"y": torch.zeros(4), "n": [1, 2.0, None]})
        load(path)
    if interpreter:
        _touch[(1,)](torch.zeros(64), 64, BLOCK=64)
