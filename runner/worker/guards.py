"""Run-time observation of what user code does, inside the worker.

* ``LaunchRecorder``: every Triton kernel launch (compiled or interpreted), with its stream.
* ``OpRecorder``: every aten op the code calls outside Triton launches (a TorchDispatchMode).
* ``Tripwire``: a stand-in for the reference symbol that records calls from a candidate.
* ``IntegritySnapshot``: identities of timers and library functions; any replacement is caught.
* ``InterpreterDevice``: under the CPU interpreter, ``device="cuda"`` in user code means the CPU.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .channel import step as _step  # the op's step timings (diagnostics), bound before any user code

_NULL = contextlib.nullcontext()

# Saved before any user code is imported: the harness times and synchronises through these.
perf_counter = time.perf_counter

# aten ops that allocate, view, copy or describe tensors: a wrapper may call these freely.
BENIGN_OPS = {
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "fill_", "zero_", "arange", "scalar_tensor", "lift_fresh", "lift_fresh_copy",
    "copy_", "clone", "_to_copy", "to", "contiguous", "detach", "detach_", "alias", "view",
    "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "permute", "transpose", "t",
    "expand", "expand_as", "squeeze", "unsqueeze", "select", "slice", "split", "split_with_sizes",
    "chunk", "unbind", "narrow", "flatten", "unflatten", "view_as", "view_as_real",
    "view_as_complex", "diagonal", "movedim", "set_", "resize_", "_local_scalar_dense", "item",
    "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "record_stream",
    "_has_compatible_shallow_copy_type", "unfold", "_copy_from", "_copy_from_and_resize",
    "resolve_conj", "resolve_neg", "_conj", "real", "imag", "stride", "size", "numel", "dim",
    "is_contiguous", "is_same_size", "equal",
}


def op_base(func: Any) -> str:
    """aten.empty_like.default -> empty_like."""
    name = getattr(func, "__name__", str(func))
    packet = getattr(func, "_overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "__name__", name)
    return name.split(".")[0]


def op_qualname(func: Any) -> str:
    packet = getattr(func, "_overloadpacket", None)
    return f"aten.{packet.__name__}" if packet is not None else str(func)


# --------------------------------------------------------------------------- Triton launches


@dataclass
class Launch:
    kernel: str
    file: str
    side_stream: bool = False


MAX_SIGNATURES = 8  # distinct launch configurations kept per kernel and side, for AOT compiles


class LaunchRecorder:
    """Wraps ``JITFunction.run`` and ``InterpretedFunction.run`` at class level.

    Only real launches are recorded (``warmup=True`` compiles without launching). A launch on a
    stream other than the one the harness set is marked ``side_stream``.
    """

    def __init__(self):
        self.side: Optional[str] = None  # "reference" | "candidate" | None (not recording)
        self.launches: dict[str, list[Launch]] = {"reference": [], "candidate": []}
        # (side, kernel name) -> (the Python function behind it, {signature key: signature})
        self.signatures: dict[tuple[str, str], tuple[Any, dict]] = {}
        self.depth = 0
        self.expected_stream: Optional[int] = None
        self.installed: list[tuple[type, Callable, Callable]] = []
        # Under the CPU interpreter, while an ``exchange.Allocations`` is active: its map from a
        # storage to the bytes that are the tensor's own (guard bands left out), and the reads
        # that fell outside every tensor a launch was given ((kernel, elements, bytes past)).
        self.own_bytes: Optional[Callable[[int, int], Optional[tuple[int, int]]]] = None
        self.outside_reads: list[tuple[str, int, int]] = []
        self._regions: Optional[tuple[Any, Any, str]] = None
        # While an ``exchange.Allocations`` is active: called with each launch's arguments right
        # after it returns, to check the guard bands of the tensors it was given before the
        # code that launched it can put them back.
        self.after_launch: Optional[Callable[[tuple, dict, str], None]] = None

    def install(self) -> None:
        classes = []
        try:
            from triton.runtime.jit import JITFunction
            classes.append(JITFunction)
        except Exception:
            pass
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except Exception:
            pass
        for cls in classes:
            orig = cls.run
            wrapped = self._wrap(orig)
            cls.run = wrapped
            self.installed.append((cls, orig, wrapped))
        try:
            from triton.runtime.interpreter import InterpreterBuilder
            InterpreterBuilder.create_masked_load = self._wrap_load(InterpreterBuilder.create_masked_load)
        except Exception:
            pass

    def note_signature(self, side: str, name: str, raw_fn: Any, args: tuple, kwargs: dict,
                       no_specialize: frozenset = frozenset()) -> None:
        if raw_fn is None:
            return
        _, sigs = self.signatures.setdefault((side, name), (raw_fn, {}))
        if len(sigs) >= MAX_SIGNATURES:
            return
        try:
            from ..aot import describe_launch
            sig = describe_launch(raw_fn, args, kwargs, no_specialize)
        except Exception:
            sig = None
        if sig is not None:
            sigs.setdefault(sig.key(), sig)

    def reset(self) -> None:
        for k in self.launches:
            self.launches[k] = []
        self.signatures = {}

    def intact(self) -> bool:
        return all(cls.__dict__.get("run") is wrapped for cls, _, wrapped in self.installed)

    def _wrap(self, orig: Callable) -> Callable:
        recorder = self

        @functools.wraps(orig)
        def run(fn_self, *args, **kwargs):
            if recorder.side is not None and not kwargs.get("warmup", False) and recorder.depth == 0:
                inner = getattr(fn_self, "fn", None)
                code = getattr(inner, "__code__", None)
                side_stream = False
                if recorder.expected_stream is not None:
                    try:
                        side_stream = torch.cuda.current_stream().cuda_stream != recorder.expected_stream
                    except Exception:
                        side_stream = False
                name = getattr(inner, "__name__", type(fn_self).__name__)
                recorder.launches[recorder.side].append(Launch(
                    kernel=name, file=code.co_filename if code else "?", side_stream=side_stream))
                recorder.note_signature(recorder.side, name, inner, args, kwargs, _not_specialized(fn_self))
            if recorder.depth == 0 and recorder.own_bytes is not None and \
                    type(fn_self).__name__ == "InterpretedFunction":
                inner = getattr(fn_self, "fn", None)
                recorder._regions = _regions(args, kwargs, recorder.own_bytes,
                                             getattr(inner, "__name__", type(fn_self).__name__))
            recorder.depth += 1
            try:
                if recorder.depth == 1:
                    # Inside a launch nothing is the user's own PyTorch work: leave the dispatch
                    # modes (the CPU interpreter runs many torch ops per launch).
                    # A recorded call's launches are timed as a step (compiling included); the
                    # timing loops' are not (no cost added to the launches being measured).
                    with _no_dispatch_modes(), (_step("launch") if recorder.side is not None else _NULL):
                        return orig(fn_self, *args, **kwargs)
                return orig(fn_self, *args, **kwargs)
            finally:
                recorder.depth -= 1
                if recorder.depth == 0:
                    recorder._regions = None
                    if recorder.after_launch is not None:
                        inner = getattr(fn_self, "fn", None)
                        try:
                            with _no_dispatch_modes(), _step("launch_bands"):  # nobody's work
                                recorder.after_launch(args, kwargs, getattr(inner, "__name__", "a kernel"))
                        except Exception:
                            pass

        return run

    def _wrap_load(self, orig: Callable) -> Callable:
        """The interpreter's loads (plain, masked and block-pointer loads all come here): the
        addresses a launch reads that lie in none of the tensors it was given."""
        recorder = self

        @functools.wraps(orig)
        def load(builder, ptrs, mask, *args, **kwargs):
            regions = recorder._regions
            if regions is not None:
                try:
                    _check_reads(recorder, regions, ptrs, mask)
                except Exception:
                    pass
            return orig(builder, ptrs, mask, *args, **kwargs)

        return load


def launch_tensors(obj: Any, out: list) -> bool:
    """The tensors among a launch's arguments (in tuples, tensor wrappers and descriptors too);
    False when an argument holds memory of a kind not known here (then nothing is checked)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return True
    if isinstance(obj, (tuple, list)):
        return all(launch_tensors(o, out) for o in obj)
    base = getattr(obj, "base", None)
    if isinstance(base, torch.Tensor):
        out.append(base)
        return True
    return not hasattr(obj, "data_ptr")


def _regions(args: tuple, kwargs: dict, own_bytes: Callable, kernel: str):
    """Sorted, merged [start, end) byte ranges of the tensors a launch was given, as numpy arrays,
    and the kernel's name; None when they cannot all be known."""
    import numpy as np
    found: list = []
    if not all(launch_tensors(a, found) for a in list(args) + list(kwargs.values())):
        return None
    spans = []
    for t in found:
        if t.layout != torch.strided or t.device.type != "cpu":
            return None
        st = t.untyped_storage()
        base, n = st.data_ptr(), st.nbytes()
        spans.append(own_bytes(base, n) or (base, base + n))
    spans.sort()
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    los = np.array([m[0] for m in merged], dtype=np.uint64)
    his = np.array([m[1] for m in merged], dtype=np.uint64)
    return los, his, kernel


def _check_reads(recorder: "LaunchRecorder", regions, ptrs, mask) -> None:
    import numpy as np
    los, his, kernel = regions
    p = np.asarray(ptrs.data)
    m = np.broadcast_to(np.asarray(mask.data, dtype=bool), p.shape) if mask is not None else None
    p = (p[m] if m is not None else p.reshape(-1)).astype(np.uint64)
    if p.size == 0:
        return
    item = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    if not len(los):
        recorder.outside_reads.append((kernel, int(p.size), 0))
        return
    idx = np.searchsorted(los, p, side="right").astype(np.int64) - 1
    inside = (idx >= 0) & (p + np.uint64(item) <= his[np.maximum(idx, 0)])
    if bool(inside.all()):
        return
    bad, where = p[~inside], idx[~inside]
    past = np.where(where >= 0, bad.astype(np.int64) + item - his[np.maximum(where, 0)].astype(np.int64), 0)
    recorder.outside_reads.append((kernel, int(bad.size), int(past.max()) if past.size else 0))


def _no_dispatch_modes():
    try:
        from torch.utils._python_dispatch import _disable_current_modes
        return _disable_current_modes()
    except Exception:  # older torch: keep the modes
        import contextlib
        return contextlib.nullcontext()


def _not_specialized(fn_self) -> frozenset:
    """Parameter names a kernel declared ``do_not_specialize`` (a JITFunction keeps it on its
    params; the interpreter's function in its decorator kwargs, as names or indices)."""
    params = getattr(fn_self, "params", None)
    if params:
        return frozenset(p.name for p in params if getattr(p, "do_not_specialize", False))
    names = list(getattr(fn_self, "arg_names", None) or [])
    given = (getattr(fn_self, "kwargs", None) or {}).get("do_not_specialize") or ()
    return frozenset(names[g] if isinstance(g, int) and 0 <= g < len(names) else str(g) for g in given)


# --------------------------------------------------------------------------- aten ops


class OpRecorder(TorchDispatchMode):
    """Records aten ops called by user code, outside Triton launches (whose interpreter uses
    torch internally)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False: torch then leaves ``__torch_dispatch__`` unwrapped by ``torch._disable_dynamo``,
        # whose first call imports ``torch._dynamo`` (1.2 s of a CPU core, which the fork server
        # paid for every pool before). The wrap only keeps Dynamo from tracing into the mode, and
        # Dynamo compiles nothing while a mode like this one is active. (exchange.Allocations too.)
        return False

    def __init__(self, launches: LaunchRecorder):
        super().__init__()
        self.launches = launches
        self.ops: dict[str, int] = {}
        self.side_stream_ops: set[str] = set()
        self.expected_stream: Optional[int] = None
        self.active = True  # unit "tests": only inside the calls a test makes into the code

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.launches.depth == 0 and self.active:
            name = op_qualname(func)
            self.ops[name] = self.ops.get(name, 0) + 1
            if self.expected_stream is not None and op_base(func) not in BENIGN_OPS:
                try:
                    if torch.cuda.current_stream().cuda_stream != self.expected_stream:
                        self.side_stream_ops.add(name)
                except Exception:
                    pass
        return func(*args, **(kwargs or {}))

    def compute_ops(self) -> list[str]:
        return sorted(n for n in self.ops if n.split(".")[-1] not in BENIGN_OPS)

    def compute_counts(self) -> dict[str, int]:
        return {n: self.ops[n] for n in self.compute_ops()}


# --------------------------------------------------------------------------- reference tripwire


class Tripwire:
    """Stands in for the reference symbol where a candidate could reach it; records calls."""

    def __init__(self, real: Any, name: str):
        self.real, self.name, self.calls = real, name, 0
        functools.update_wrapper(self, real, updated=())

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)

    def __getattr__(self, item):
        return getattr(self.real, item)


def trip_class(cls: type, counter: list) -> None:
    """Make calls to ``cls.forward`` / ``cls.__call__`` (inherited by a candidate) countable."""
    for attr in ("forward",):
        real = cls.__dict__.get(attr)
        if real is None:
            continue

        def make(real):
            @functools.wraps(real)
            def tripped(*a, **k):
                counter[0] += 1
                return real(*a, **k)
            return tripped

        setattr(cls, attr, make(real))


# --------------------------------------------------------------------------- integrity


def _watched() -> list[tuple[str, Any]]:
    import triton
    mods: list[tuple[str, Any]] = [
        ("time", time), ("builtins", builtins), ("torch", torch), ("torch.Tensor", torch.Tensor),
        ("torch.cuda", torch.cuda), ("torch.cuda.Event", torch.cuda.Event),
        ("torch.nn.functional", torch.nn.functional), ("torch.testing", torch.testing),
        ("threading", threading),
    ]
    try:
        import triton.testing
        mods.append(("triton.testing", triton.testing))
    except Exception:
        pass
    try:
        import numpy
        mods.append(("numpy", numpy))
    except Exception:
        pass
    return mods


def _dynamo_wrapper_code():
    """The code of the wrapper ``torch._disable_dynamo`` makes (one for every function it wraps;
    making one imports nothing), or None where torch has no such function."""
    try:
        return torch._disable_dynamo(lambda: None).__code__
    except Exception:
        return None


class IntegritySnapshot:
    """The identity of every function and class in the namespaces that timing and comparison
    rely on. ``changed()`` lists what user code replaced or deleted since.

    One rebinding is torch's own: importing ``torch._dynamo`` (user code's ``torch.compile``)
    replaces ``torch.manual_seed`` with ``torch._disable_dynamo(torch.manual_seed)``, which
    behaves as the original. A value that is that wrapper, around the very function that was
    there, is not a change; a wrapper around anything else is."""

    def __init__(self):
        self.objects: dict[tuple[str, str], Any] = {}
        self.wrapper_code = _dynamo_wrapper_code()
        for label, ns in _watched():
            for k, v in list(vars(ns).items()):
                if callable(v) or isinstance(v, (property, staticmethod, classmethod)):
                    self.objects[(label, k)] = v

    def _torch_rewrap(self, was: Any, now: Any) -> bool:
        """``now`` is torch's ``_disable_dynamo`` wrapper, and the function it calls is ``was``."""
        return (self.wrapper_code is not None and getattr(now, "__code__", None) is self.wrapper_code
                and any(_cell_set(c) and c.cell_contents is was for c in now.__closure__ or ()))

    def changed(self) -> list[str]:
        now: dict[tuple[str, str], Any] = {}
        for label, ns in _watched():
            for k, v in list(vars(ns).items()):
                now[(label, k)] = v
        missing = object()
        return sorted(f"{label}.{k}" for (label, k), was in self.objects.items()
                      if (v := now.get((label, k), missing)) is not was and not self._torch_rewrap(was, v))


def _cell_set(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- interpreter device


def _is_cuda(d: Any) -> bool:
    try:
        return d is not None and not isinstance(d, bool) and torch.device(d).type == "cuda"
    except (RuntimeError, TypeError):
        return False


class InterpreterDevice(TorchFunctionMode):
    """Under the CPU interpreter, run code written for ``device="cuda"`` on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        name = getattr(func, "__name__", "")
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            return args[0]
        if name == "to":  # x.to("cuda"), x.to(0): a positional device (new_empty's positional
            # arguments are sizes, and on a machine with a GPU torch.device(100) is cuda:100)
            args = tuple("cpu" if _is_cuda(a) else a for a in args)
        if name == "__get__" and getattr(getattr(func, "__self__", None), "__name__", "") == "is_cuda":
            return True
        return func(*args, **kwargs)


class _AnyDevice:
    """``with torch.cuda.device(x.device):`` (and ``torch.cuda._DeviceGuard``) around a launch: on
    a CPU build the real one refuses the CPU tensor's device, and the test would raise before any
    kernel ran."""

    def __init__(self, device: Any = None) -> None:
        self.device = device

    def __enter__(self) -> "_AnyDevice":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def patch_cuda_for_interpreter() -> None:
    """torch.cuda calls that user code makes around kernels, made harmless on a CPU build."""
    for name in ("synchronize", "empty_cache", "set_device", "reset_peak_memory_stats"):
        setattr(torch.cuda, name, lambda *a, **k: None)
    torch.cuda.current_device = lambda: 0
    torch.cuda.device = _AnyDevice
    torch.cuda._DeviceGuard = _AnyDevice


def patch_autotune_for_interpreter() -> None:
    """@triton.autotune benchmarks its configs through the GPU driver, which the CPU interpreter
    lacks. There every config "takes" the same time, so the first config runs."""
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:
        return
    Autotuner.do_bench = property(lambda self: (lambda fn, quantiles=None, **kw: [0.0, 0.0, 0.0]))


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive()}

