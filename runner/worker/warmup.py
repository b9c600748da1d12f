"""Work done once in the fork server so that every forked worker starts warm.

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


def _hand_over_and_back(obj) -> None:
    """``obj`` handed over (``exchange.save``) and read back (``load``) in this process, as if
    from the other side; nothing stays handed or received."""
    from . import channel
    from .exchange import load, save
    save("warm.pt", obj)
    channel.loop_back()
    load("warm.pt")
    channel.forget_received()


def warm(interpreter: bool) -> None:
    import torch

    _hand_over_and_back({"y": torch.zeros(4), "n": [1, 2.0, None]})
    if interpreter:
        _touch[(1,)](torch.zeros(64), 64, BLOCK=64)


@triton.jit
def _salted(x_ptr, n, SALT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + SALT, mask=mask)


def compile_pipeline(both: bool = False) -> None:
    """In the fork server on a GPU box: one whole Triton compile, ahead of time, of a kernel no
    cache holds. A process's first compile costs about a second more than later ones (the
    compiler's backends, LLVM, ptxas's version); done here, once, before any fork, no worker
    pays it with its first candidate. The target is the backend's usual one (the GPU itself may
    not be asked: that would start its driver here); what is warmed does not depend on it.
    Starts no thread and touches no GPU. Best effort: a failure here changes nothing else.
    ``both``: warm the NVIDIA and the AMD backend (a compile worker's fork server compiles for
    either)."""
    import random

    import torch
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        targets = [GPUTarget("hip", "gfx942", 64) if torch.version.hip else GPUTarget("cuda", 90, 32)]
        if both:
            targets = [GPUTarget("cuda", 90, 32), GPUTarget("hip", "gfx942", 64)]
        salt = random.randint(1, 1 << 30)  # a kernel of its own: a cache hit would warm nothing
        src = ASTSource(_salted, signature={"x_ptr": "*fp32", "n": "i32", "SALT": "constexpr", "BLOCK": "constexpr"},
                        constexprs={"SALT": salt, "BLOCK": 128})
    except Exception:
        return
    old = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="geak-warm-") as d:
        os.environ["TRITON_CACHE_DIR"] = d  # nothing of it stays in any cache
        try:
            for target in targets:
                try:
                    triton.compile(src, target=target)
                except Exception:
                    pass
        finally:
            if old is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old


_WARM_DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool")

# A GPU worker's warm-up, in parts: the pool asks for one part per op after the worker's hello,
# each holding the device lock for reading (``runner.judge.pool.WorkerPool._warm``).
GPU_PARTS = ("ops", "launch", *_WARM_DTYPES, "record")


def gpu_part(index: int, device: str = "cuda") -> bool:
    """Part ``index`` of ``GPU_PARTS`` of a GPU worker's warm-up; whether another part follows.

    In each GPU worker, once it has said hello and before any job (so while it waits as a
    spare, not while an evaluation waits for it): the first use of each CUDA operation in a
    process costs far more than later ones (PyTorch loads its kernels' modules lazily; events,
    streams, graphs and the spin used by timing set themselves up; the first Triton launch loads
    the driver's helpers). Run the operations every evaluation uses once, on throwaway tensors,
    then give back all they held: nothing of it stays for the job but warm code.

    These are kernels on the GPU that another evaluation may be timing. The pool sends each part
    as an op of its own holding the device lock for reading, so no part runs while a timing
    holds the lock alone, and a timing waits for one part at most, not for the whole warm-up.
    Best effort: an error here is left for the job's own first use to report."""
    import torch

    name = GPU_PARTS[index] if 0 <= index < len(GPU_PARTS) else None
    try:
        if name == "ops":
            _cuda_ops(torch)
        elif name == "launch":
            from . import timing
            x = torch.zeros(1 << 12, device=device)
            _touch[(4,)](x, x.numel(), BLOCK=1024)
            if device == "cuda":
                timing._spin_cycles_per_us()
        elif name in _WARM_DTYPES:
            _harness_dtype(torch, name, device)
        elif name == "record":
            _harness_record(torch, device)
    except Exception:
        pass
    finally:
        if device == "cuda":
            try:
                torch.cuda.synchronize()
                if name == GPU_PARTS[-1]:
                    torch.cuda.empty_cache()
            except Exception:
                pass
    return index + 1 < len(GPU_PARTS)


def _cuda_ops(torch) -> None:
    """PyTorch's own CUDA operations that every evaluation uses: random and fill kernels,
    copies, comparisons, dtype casts, a side stream, a small CUDA graph."""
    x = torch.randn(1 << 12, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    y.fill_(0.5)
    torch.rand(16, device="cuda")
    torch.randint(0, 8, (16,), device="cuda")
    torch.zeros(16, device="cuda", dtype=torch.int32).cpu()
    z = (x - y).abs()
    torch.isfinite(z).all().item()
    torch.isclose(x, y).sum().item()
    z.max().item()
    for dt in (torch.float16, torch.bfloat16):
        x.to(dt).float()
    x.cpu()
    torch.ones(16).to("cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y.add_(1.0)
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y.add_(1.0)
    g.replay()


def _harness_dtype(torch, name: str, device: str) -> None:
    """The evaluator's own work around each recorded call, on small throwaway tensors of dtype
    ``name`` (a part of ``gpu_part``): guard bands made and checked (``guarded_empty``,
    ``Guarded.breach``, ``guard_inputs``, ``input_breaches``), the inputs' copies and the check
    that a call left them alone (``given_copies``, ``unchanged_inputs``), the record
    (``to_plain``) and the judge's comparison (``compare``, ``bitwise_equal``). Each runs PyTorch
    kernels of its own whose first use in a process loads them; a candidate's worker is used
    once, so without this every evaluation paid for it."""
    from .compare import bitwise_equal, compare
    from .exchange import (PATTERN_A, given_copies, guard_inputs, guarded_empty, input_breaches, to_plain,
                           unchanged_inputs)
    dt = getattr(torch, name)
    t = torch.ones(4096, device=device, dtype=dt)
    out, band = guarded_empty(t, PATTERN_A if dt.is_floating_point else None)
    band.breach()
    flat = [guard_inputs(t)]
    input_breaches(flat)
    copies = given_copies(flat)
    unchanged_inputs(flat, copies)
    plain = to_plain(out)
    compare(t, plain)  # the pattern: a mismatch, described
    compare(t, t.clone())
    bitwise_equal(t, plain)


def _harness_record(torch, device: str) -> None:
    """A device tensor handed over (``save`` through host memory) and read back (``load`` onto
    the device), as each record is, then one large enough to cross as device memory
    (``runner.worker.devmem``: the driver's export, import and read-only mapping) (the last
    part of ``gpu_part``)."""
    from .exchange import DEVICE_PART_MIN_BYTES, OFF_DEVICE_MIN_BYTES
    big = torch.zeros(OFF_DEVICE_MIN_BYTES // 4 + 1024, device=device)
    _hand_over_and_back({"output": big, "inputs_after": [None], "grads": None})
    del big
    from . import devmem
    if devmem.available(device):  # else the same host path as above
        part = torch.zeros(DEVICE_PART_MIN_BYTES // 4, device=device)
        _hand_over_and_back({"output": part, "inputs_after": [None], "grads": None})
