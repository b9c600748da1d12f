"""Failures of user code, said in the user's terms (inside the worker).

``classify`` turns an exception raised by the reference or the candidate into a ``Failure``:
the status, what kind of failure, whose it was, one line a person can read, a hint, and the
traceback trimmed to the user's own frames with scratch paths replaced by project paths.
A failure that leaves the process untrustworthy (a CUDA fault is sticky; out of memory) says
``retire``: the worker ends after it and nothing else runs in that process.
"""

from __future__ import annotations

import traceback
from typing import Optional

from .trees import Trees


class Failure(Exception):
    def __init__(self, status: str, kind: str, side: str, message: str, *, hint: Optional[str] = None,
                 tb: Optional[str] = None, file: Optional[str] = None, line: Optional[int] = None,
                 retire: bool = False):
        super().__init__(message)
        self.message = message
        self.status, self.kind, self.side, self.hint = status, kind, side, hint
        self.tb, self.file, self.line, self.retire = tb, file, line, retire

    def to_dict(self) -> dict:
        return {"status": self.status, "kind": self.kind, "side": self.side, "message": self.message,
                "hint": self.hint, "traceback": self.tb, "file": self.file, "line": self.line,
                "retire": self.retire}


_GPU_FAULTS = ("illegal memory access", "misaligned address", "unspecified launch failure",
               "device-side assert", "illegal instruction", "operation not supported on global/shared",
               "an illegal", "cuda error", "hip error", "acceleratorerror")


def gpu_fault(text: str) -> bool:
    """A message that says the GPU context is broken (CUDA errors are sticky)."""
    low = text.lower()
    return any(k in low for k in _GPU_FAULTS)


def trimmed_tb(exc: BaseException, trees: Trees) -> tuple[str, Optional[str], Optional[int]]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if trees.is_user_file(f.filename)]
    lines, file, line = [], None, None
    for f in frames:
        p = trees.user_path(f.filename)
        lines.append(f'  File "{p}", line {f.lineno}, in {f.name}')
        if f.line:
            lines.append(f"    {f.line.strip()}")
        file, line = p.replace(" (candidate)", ""), f.lineno
    msg = trees.scrub(f"{type(exc).__name__}: {exc}")
    return ("Traceback (user code):\n" + "\n".join(lines) + "\n" + msg if lines else msg), file, line


def out_of_device_memory(exc: BaseException) -> bool:
    """PyTorch's allocator out of GPU memory. It then asks NVML who holds the memory; where NVML
    cannot start (inside the sandbox), that question fails instead ("NVML_SUCCESS == ...
    INTERNAL ASSERT FAILED" in CUDACachingAllocator)."""
    import torch
    low = f"{type(exc).__name__}: {exc}".lower()
    nvml_oom = "nvml_success" in low and "cudacachingallocator" in low
    return isinstance(exc, getattr(torch, "OutOfMemoryError", ())) or "out of memory" in low or nvml_oom


def classify(exc: BaseException, side: str, where: str, trees: Trees) -> Failure:
    if isinstance(exc, Failure):
        return exc
    tb, file, line = trimmed_tb(exc, trees)
    text = f"{type(exc).__name__}: {exc}"
    name = type(exc).__name__
    first = trees.scrub(str(exc)).strip().splitlines()
    if isinstance(exc, MemoryError):
        return Failure("crashed", "host_oom", side, f"{where}: out of host memory", tb=tb,
                       file=file, line=line, retire=True)
    if out_of_device_memory(exc):
        return Failure("runtime_error", "out_of_memory", side, f"{where}: GPU out of memory",
                       hint="use smaller INPUT_CASES or free GPU memory on the runner",
                       tb=tb, file=file, line=line, retire=True)
    if name == "AcceleratorError" or gpu_fault(text):
        hint = "check the masks and offsets of every tl.load / tl.store"
        if side == "reference":  # nothing the candidate does reaches the original's process
            hint = ("the original itself faults here. A plain run can survive a read or write outside a "
                    "tensor when the memory beside it happens to be mapped; the evaluator places every "
                    "tensor between guard bands, so it does not: " + hint)
        return Failure("crashed", "illegal_memory_access", side,
                       f"{where}: the GPU reported a fault{' in the original' if side == 'reference' else ''} "
                       f"({(first[0] if first else name)[:200]})",
                       hint=hint, tb=tb, file=file, line=line, retire=True)
    if name in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct") \
            or "triton.compiler" in type(exc).__module__:
        return Failure("compile_error", "compile_error", side,
                       f"{where}: Triton could not compile a kernel: {first[-1] if first else name}",
                       tb=tb, file=file, line=line)
    if isinstance(exc, SyntaxError):
        f = trees.user_path(exc.filename or "")
        return Failure("compile_error", "syntax_error", side, f"{f}:{exc.lineno}: syntax error: {exc.msg}",
                       file=f, line=exc.lineno)
    if isinstance(exc, ImportError):
        return Failure("compile_error", "import_error", side, f"{where}: {trees.scrub(str(exc))}",
                       hint="install the missing package on the runner, or ship the module with the project",
                       tb=tb, file=file, line=line)
    if "only 0-dimensional arrays can be converted" in text:
        import numpy
        return Failure("runtime_error", "runtime_error", side,
                       f"{where}: the Triton interpreter failed on a loop with a run-time bound",
                       hint=f"numpy {numpy.__version__} breaks Triton's CPU interpreter here; install "
                            "numpy<2.4 where the runner runs (pip install 'numpy<2.4')",
                       tb=tb, file=file, line=line)
    return Failure("runtime_error", "runtime_error", side,
                   f"{where}: {name}: {first[0][:300] if first else ''}".rstrip(": "),
                   tb=tb, file=file, line=line)
