"""The wire format: ``EvalRequest`` in, ``EvalResult`` out.

Local and remote runners take and return exactly these records, as JSON. A request is
self-contained: it carries the text of the target file and of every project-local module it
imports, so a runner needs no checkout and evaluates the editor's unsaved text.

Standard library only: this module is imported by the worker, the CLI and the language server.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Union

SCHEMA = "geak.eval/1"
"""Schema id. The part after the slash is the major version: a runner refuses other majors."""

STATUSES = ("ok", "compile_error", "runtime_error", "mismatch", "timeout", "crashed", "rejected")
"""``EvalResult.status``: what happened, one word. Read by ``from_dict``: no other word is accepted."""
DID_NOT_RUN = ("compile_error", "runtime_error", "timeout", "crashed")
"""The statuses in which the code did not run to the end (a wrong answer or a rejection ran)."""
BACKENDS = ("cuda", "rocm", "interpreter")
"""``DeviceInfo.backend``: CUDA, ROCm (HIP, told by ``torch.version.hip``), or Triton's CPU interpreter."""
BYTES_BASES = ("get_bytes", "tensors")
"""``CaseTiming.bytes_basis``: the task's ``get_bytes``, or the sizes of inputs and outputs."""
MIN_GAIN = 0.01
"""The least gain that counts as faster, whatever the spread: 1%."""


def beats(speedup: Optional[float], spread_pct: Optional[float], baseline: float = 1.0,
          min_gain: float = MIN_GAIN) -> bool:
    """The one rule for "faster": ``speedup`` beats ``baseline`` by more than max(``min_gain``,
    the timing spread). A missing or unmeasured (NaN) speedup beats nothing."""
    if speedup is None or speedup != speedup:
        return False
    return speedup > baseline * (1.0 + max(min_gain, (spread_pct or 0.0) / 100.0))


class SchemaError(ValueError):
    """A JSON document that is not a valid record of this schema."""


# --------------------------------------------------------------------------- request


@dataclass
class Target:
    """``path::symbol``: a project-relative POSIX path and a top-level name in that file."""

    path: str
    symbol: str

    def __str__(self) -> str:
        return f"{self.path}::{self.symbol}"


@dataclass
class Tolerance:
    atol: float
    rtol: float


@dataclass
class Limits:
    """Per-phase wall-clock limits (seconds) and the worker's host-memory ceiling."""

    import_s: float = 120.0  # import both trees and build inputs (includes first JIT compiles)
    run_s: float = 300.0  # correctness trials
    timing_s: float = 300.0  # GPU timing, measured from when the device lock is granted
    memory_mb: int = 16384  # resident host memory; the worker is killed above it
    wait_s: float = 3600.0  # waiting for a free worker slot and for the GPU (held by other
    # evaluations' runs and timing), in all; past it the evaluation ends as a timeout
    total_s: float = 7200.0  # the whole evaluation, its phases and waits together; past it the
    # evaluation ends as a timeout (a time budget lowers it to the time left)


LIMIT_UNITS = {"memory_mb": "MB"}
"""The unit of each ``Limits`` field that is not in seconds."""


def check_limits(limits: "Limits", where: str = "limits") -> None:
    """Every limit is a positive, finite number: there is no "no limit"."""
    for f in dataclasses.fields(Limits):
        v = getattr(limits, f.name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SchemaError(f"{where}.{f.name}: expected a positive number, got {v!r}")


def clamp_limits(given: Any, ceilings: "Limits", where: str = "options.limits") -> tuple["Limits", list["Flag"]]:
    """A request's limits under a runner's ceilings (``given``: the request's parsed JSON object).

    Absent or ``null`` is the ceiling, never "no limit"; a value above the ceiling is lowered
    to it, and a flag (``limit_lowered``) says so; a positive value at or under it is kept.
    Anything else (0, negative, not a number, and NaN or +-Infinity, which Python's ``json``
    reads although JSON has no such numbers) raises ``SchemaError`` naming the field."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise SchemaError(f"{where}: expected an object, got {type(given).__name__}")
    out: dict[str, Any] = {}
    flags: list[Flag] = []
    for f in dataclasses.fields(Limits):
        ceiling = getattr(ceilings, f.name)
        v = given.get(f.name)
        if v is None:
            out[f.name] = ceiling
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            shown = json.dumps(v) if isinstance(v, float) else repr(v)  # NaN, Infinity as the client wrote them
            raise SchemaError(f"{where}.{f.name}: expected a positive number (or null for this runner's "
                              f"limit, {ceiling:g}), got {shown}")
        if v > ceiling:
            unit = LIMIT_UNITS.get(f.name, "s")
            flags.append(Flag("limit_lowered", "info",
                              f"limits.{f.name}: {v:g} {unit} asked, lowered to this runner's ceiling of "
                              f"{ceiling:g} {unit}"))
            v = ceiling
        out[f.name] = v
    return from_dict(Limits, out, where), flags


@dataclass
class EvalOptions:
    trials: int = 3
    """Fresh seeded inputs per case: each trial draws new inputs with its own seed."""
    seed: int = 0
    cases: Optional[list[int]] = None
    """Indices into the discovered input cases; None = all (subject to the interpreter limit)."""
    tolerance: dict[str, Tolerance] = field(default_factory=dict)
    """Per-dtype overrides, keyed by torch dtype name ("float16") or "default"."""
    device: str = "auto"  # auto | cuda | interpreter
    timing: bool = True
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    min_reps: int = 10
    max_reps: int = 1000
    flush_l2: bool = True
    cuda_graph_below_us: float = 50.0
    """Kernels shorter than this are also timed by CUDA-graph replay (launch overhead removed)."""
    interpreter_max_elements: int = 1 << 16
    """Under the CPU interpreter, cases with more input elements than this are skipped (not where
    no file of the request mentions Triton: PyTorch alone runs at full size on the CPU)."""
    speedup_flag: float = 10.0
    """Speedups above this are flagged for a person to look at."""
    allow_torch_ops: list[str] = field(default_factory=list)
    """aten ops a candidate may call besides allocation, views and copies (e.g. "aten.mm")."""
    aot_arch: Optional[str] = None
    """Also compile every launched kernel ahead of time for this arch (sm_80, sm_90, gfx90a,
    gfx942, or "device" for the runner's own GPU) and report its resources."""
    aot_configs: list[dict[str, int]] = field(default_factory=list)
    """With ``aot_arch`` and ``aot_kernel``: also compile these launch configurations of that
    kernel (constexpr values, ``num_warps``, ``num_stages``) for the arch, with the argument
    types of its observed launches, without running them. Reported with ``variant`` = index
    (the tuner screens its configs this way before running any)."""
    aot_kernel: Optional[str] = None
    aot_stage: Optional[str] = None
    """With ``aot_arch``: each report of a launch also carries the text of this compile stage
    (ttir, ttgir, llir, ptx, sass for NVIDIA; ttir, ttgir, llir, amdgcn for AMD), with the
    kernel source's line info, for display (``geak asm``); cut at a few MB."""
    inductor: bool = False
    """Also write down what PyTorch's compiler (Inductor) generates for the target, at the first
    case's inputs with sizes left dynamic, as Triton (``EvalResult.generated``): the ``compile``
    strategy makes a standalone Triton file of it. Nothing is compiled or run for it."""
    unit: str = "auto"
    """What is compared (runner.units): "symbol" (calls of the target), "tests" (everything the
    tests of a TritonBench-G / ROCm file reach above its separator), or "auto"."""
    require_triton: Optional[bool] = None
    """Candidate must launch a Triton kernel. None = yes when a candidate is given."""
    limits: Limits = field(default_factory=Limits)


@dataclass
class EvalRequest:
    target: Target
    files: dict[str, str]
    """Project-relative path -> text: the target file and the project-local modules it imports."""
    candidate: Optional[Target] = None
    """None = check and measure the target against itself."""
    candidate_files: dict[str, str] = field(default_factory=dict)
    """Files of the candidate's tree that differ from ``files`` (the candidate tree is
    ``files`` overlaid with these)."""
    options: EvalOptions = field(default_factory=EvalOptions)
    id: str = ""
    schema: str = SCHEMA

    def with_candidate(self, source: Optional[str] = None, *, id: str = "", **options: Any) -> "EvalRequest":
        """A new request for the same target, files and inputs, with its own copy of the options
        (``options`` changed, e.g. ``trials=1``). With ``source``, the candidate is the target
        file rewritten to ``source`` (same path, same symbol); without, the target against itself."""
        opts = dataclasses.replace(copy.deepcopy(self.options), **options)
        target = Target(self.target.path, self.target.symbol)
        if source is None:
            return EvalRequest(target=target, files=dict(self.files), options=opts, id=id)
        return EvalRequest(target=target, files=dict(self.files), candidate=Target(target.path, target.symbol),
                           candidate_files={target.path: source}, options=opts, id=id)


# --------------------------------------------------------------------------- result


@dataclass
class ErrorInfo:
    kind: str
    """syntax_error | missing_symbol | no_inputs | bad_inputs | signature_mismatch | import_error |
    compile_error | runtime_error | out_of_memory | illegal_memory_access | segfault | timeout |
    host_oom | worker_died | bad_request | internal | original_fails_here (the original's own
    test fails on this device) | original_varies (the original's results differ between runs on
    the same inputs: nothing can be checked) | not_run_here (every input case was left out on
    this device, e.g. too large for the CPU interpreter: nothing ran, which says nothing of the
    code; status ``compile_error``) | runner_unavailable (the runner could not be used: status
    ``crashed``, side ``harness``)"""
    message: str
    side: str = "candidate"  # reference | candidate | harness
    file: Optional[str] = None
    line: Optional[int] = None
    hint: Optional[str] = None
    traceback: Optional[str] = None
    """Trimmed to frames in the user's files."""


@dataclass
class CaseTiming:
    ref_ms: float
    cand_ms: float
    speedup: float
    ref_spread_pct: float
    """Half the inter-quartile range of the reference's samples, as % of its median."""
    cand_spread_pct: float
    reps: int
    method: str  # events | cuda_graph
    bytes_moved: Optional[int] = None
    """Input + output bytes: the fewest a kernel must move."""
    bytes_basis: Optional[str] = None
    """Where ``bytes_moved`` came from: ``get_bytes`` (the task's own count) or ``tensors`` (the
    sizes of inputs and outputs: what a kernel that touches each of them once moves). A share of
    peak over 100% from either is left ``None`` (``exceeds_peak``: the count is too large)."""
    cand_bw_pct_peak: Optional[float] = None
    cand_tflops: Optional[float] = None
    cand_flops_pct_peak: Optional[float] = None


@dataclass
class CaseResult:
    index: int
    label: str
    shapes: str
    trials: int = 0
    passed: bool = False
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    detail: Optional[str] = None
    """Where and how the first mismatch shows (output path, shape, dtype or values)."""
    skipped: Optional[str] = None
    """Reason this case did not run here (e.g. too large for the interpreter)."""
    excluded: Optional[str] = None
    """What was left out of the comparison, and why (elements the original never writes)."""
    timing: Optional[CaseTiming] = None


@dataclass
class Timing:
    ref_ms: float
    """Sum over timed cases of the reference's median time."""
    cand_ms: float
    speedup: float
    """Σ ref_ms / Σ cand_ms over the timed cases (the GEAK / TritonBench definition)."""
    speedup_geomean: float
    spread_pct: float
    """Largest per-case spread seen, reference or candidate."""
    method: str
    cases_timed: int


@dataclass
class Flag:
    code: str
    severity: str  # info | warning | reject
    message: str


@dataclass
class KernelResources:
    """One kernel in one launch configuration, compiled ahead of time for ``arch``."""

    kernel: str
    arch: str
    num_warps: int
    num_stages: int
    constexprs: dict[str, str] = field(default_factory=dict)
    arg_types: str = ""
    """The launch's non-constexpr argument types, e.g. "*fp16, *fp16, i32"."""
    arg_names: str = ""
    """Their parameters' names, in the same order ("x_ptr, out_ptr, n"): an argument Triton
    specialises at this launch (an integer equal to 1, a stride of a contiguous tensor) is
    constexpr there and in neither list."""
    registers: Optional[int] = None
    """Per thread (NVIDIA); VGPRs + AGPRs per lane (AMD)."""
    spill_bytes: Optional[int] = None
    """Per-thread local memory: NVIDIA stack frame, AMD private segment (scratch)."""
    shared_bytes: Optional[int] = None
    shared_limit: Optional[int] = None
    occupancy_pct: Optional[float] = None
    """Estimated resident warps (waves) per SM (CU) over the maximum."""
    fits: bool = True
    error: Optional[str] = None
    compile_s: float = 0.0
    variant: Optional[int] = None
    """Index into ``EvalOptions.aot_configs`` when this is a screened config, not a launch."""
    listing_stage: Optional[str] = None
    listing: Optional[str] = None
    """With ``options.aot_stage``: that stage's text (a claim of the worker, for display only)."""

    @property
    def config_text(self) -> str:
        """The launch config in words: ``BLOCK=256, warps=4, stages=3`` (constexprs left unset out)."""
        return ", ".join([f"{n}={v}" for n, v in self.constexprs.items() if v != "None"]
                         + [f"warps={self.num_warps}", f"stages={self.num_stages}"])


INTERPRETER = "Triton CPU interpreter"
"""How the CPU interpreter is named wherever a device is named (``DeviceInfo.label``)."""


@dataclass
class DeviceInfo:
    name: str
    backend: str = field(metadata={"choices": BACKENDS})
    arch: Optional[str] = None  # sm_90, gfx942, ...
    peak_bandwidth_gbs: Optional[float] = None
    peak_tflops: dict[str, float] = field(default_factory=dict)
    torch: Optional[str] = None
    triton: Optional[str] = None
    sandbox: dict[str, str] = field(default_factory=dict)
    """What the runner's self-test at start found its jobs' sandbox to hold (``filesystem``,
    ``runner_state``, ``user_namespaces``, ``checked``); empty from a runner that predates it."""

    def __str__(self) -> str:
        """``NVIDIA H200 (cuda, sm_90)``; a name that already says its backend does not repeat
        it: ``CPU (Triton interpreter)``."""
        extra = [x for x in (None if self.backend.lower() in self.name.lower() else self.backend, self.arch) if x]
        return self.name + (f" ({', '.join(extra)})" if extra else "")

    @property
    def is_gpu(self) -> bool:
        return self.backend != "interpreter"

    @property
    def label(self) -> str:
        """The device as every front end names it, and records are keyed by: ``NVIDIA H200
        (cuda, sm_90)``, or ``Triton CPU interpreter`` (``INTERPRETER``)."""
        return str(self) if self.is_gpu else INTERPRETER

    @property
    def on(self) -> str:
        """The device after "on": ``on NVIDIA H200 (cuda, sm_90)``, ``on the Triton CPU interpreter``."""
        return f"on {self.label}" if self.is_gpu else f"on the {self.label}"


@dataclass
class EvalResult:
    status: str = field(metadata={"choices": STATUSES})
    correct: bool
    message: str
    """One line a person can read."""
    id: str = ""
    cases: list[CaseResult] = field(default_factory=list)
    timing: Optional[Timing] = None
    timing_unavailable: Optional[str] = None
    flags: list[Flag] = field(default_factory=list)
    device: Optional[DeviceInfo] = None
    error: Optional[ErrorInfo] = None
    inputs_convention: Optional[str] = None  # kernelbench | cases | tritonbench | pytest
    launches: dict[str, list[str]] = field(default_factory=dict)
    """Triton kernels observed launching, per side ("reference", "candidate")."""
    torch_ops: dict[str, list[str]] = field(default_factory=dict)
    """aten compute ops observed, per side (allocation, views and copies left out)."""
    resources: list[KernelResources] = field(default_factory=list)
    """Ahead-of-time compile reports (options.aot_arch), one per kernel and launch config."""
    generated: Optional[dict] = None
    """With ``options.inductor``: Inductor's module for the target and how to read it
    (``runner.worker.inductor.generate``), or ``{"error": why}``. A claim of the worker: what is made of
    it is a candidate, verified like any other."""
    sandbox: dict[str, str] = field(default_factory=dict)
    log: str = ""
    """Tail of what the user's code printed."""
    duration_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    """Where an evaluation's time went, wall seconds. The stages, one after another
    (``STAGES``: import, run, generate, timing); within them, as the pool measured each op of
    each worker: the reference's runs (``reference_runs``: drawing inputs, running the
    original, handing the inputs over), the candidate's runs (``candidate_runs``: taking the
    inputs, running, handing its record over), judging (``judge``), the candidate's
    observations (``observe``), the inputs handed over for timing (``timing_inputs``) and the
    reference timed alone (``time_alone``); the run stage pipelines the first two, so they
    overlap. Beside them: Triton compiles (compile), waiting for the device lock
    (device_wait), holding it shared and alone (device_read, device_write; both workers
    counted) and, on a busy runner, waiting for a free worker slot (slot_wait). And each op's
    steps as its worker timed them, named ``op.step``: ``candidate.inputs``, ``candidate.call``,
    ``candidate.save`` (taking the inputs, the call, handing the record over; within the call
    ``candidate.copies``, ``candidate.fn`` with its ``candidate.launch`` steps, compiles
    included, ``candidate.launch_bands``, ``candidate.sync``, ``candidate.record``,
    ``candidate.bands``), ``judge.load``,
    ``judge.compare``, ``judge.recheck``, and the timing's ``time.prepare``, ``time.warmup``,
    ``time.calibrate``, ``time.probe``, ``time.measure``, ``time.wall_check``, ``time.work``
    (also under ``time_alone.`` and ``time_self.`` where the reference times itself). The
    candidate's worker reports its own: diagnostics only, never read by a verdict."""
    schema: str = SCHEMA

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"

    @property
    def verified(self) -> bool:
        """Correct on every case and trial, every anti-cheat rule passed."""
        return self.status == "ok" and self.correct

    @property
    def ran(self) -> bool:
        """The code ran to the end (a wrong answer or a rejection ran; a crash did not)."""
        return self.status not in DID_NOT_RUN

    @property
    def speedup(self) -> Optional[float]:
        """Σ ref ms / Σ cand ms, when it was measured (None: not timed)."""
        s = self.timing.speedup if self.timing is not None else None
        return s if s is not None and s == s else None

    def verified_speedup(self, min_gain: float = MIN_GAIN) -> Optional[float]:
        """The speedup of a verified candidate that is faster than the original by more than
        max(``min_gain``, the timing spread); None for anything else (wrong, untimed, not
        clearly faster). Nothing else is ever offered as faster."""
        if not self.verified or not beats(self.speedup, self.timing.spread_pct if self.timing else None,
                                           min_gain=min_gain):
            return None
        return self.speedup


# --------------------------------------------------------------------------- (de)serialisation


def to_dict(record: Any) -> Any:
    if dataclasses.is_dataclass(record):
        return {f.name: to_dict(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, dict):
        return {str(k): to_dict(v) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return [to_dict(v) for v in record]
    if isinstance(record, float) and (record != record or record in (float("inf"), float("-inf"))):
        return None  # NaN and infinities are not JSON
    return record


def to_json(record: Any, indent: Optional[int] = None) -> str:
    return json.dumps(to_dict(record), indent=indent, allow_nan=False)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    return _HINTS[cls]


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise SchemaError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if value is None:
            return float("nan")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SchemaError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build a record from parsed JSON. Unknown keys are ignored (newer minor versions)."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
            choices = f.metadata.get("choices")
            if choices is not None and kwargs[f.name] not in choices:
                raise SchemaError(f"{where}.{f.name}: expected one of {', '.join(choices)}, got {data[f.name]!r}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{where}: missing required field '{f.name}'")
    return cls(**kwargs)


_SCHEMA_RE = re.compile(r"(?P<name>[a-z][a-z0-9.]*)/(?P<major>[0-9]+)(?:\.[0-9]+)?")


def check_schema(data: Any) -> None:
    """``schema`` must be this one's name with the same major version (``geak.eval/1``; a newer
    minor, ``geak.eval/1.2``, is read too: unknown fields are ignored)."""
    if not isinstance(data, dict):
        raise SchemaError("expected a JSON object")
    schema = data.get("schema", SCHEMA)
    m = _SCHEMA_RE.fullmatch(schema) if isinstance(schema, str) else None
    ours = _SCHEMA_RE.fullmatch(SCHEMA)
    if m is None or m["name"] != ours["name"] or m["major"] != ours["major"]:
        shown = schema[:80] if isinstance(schema, str) else schema
        raise SchemaError(f"schema {shown!r} is not supported by this runner (it speaks '{SCHEMA}')")


def _from_json(cls: type, text: str | bytes) -> Any:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"not JSON: {e}") from None
    check_schema(data)
    return from_dict(cls, data)


def request_from_json(text: str | bytes) -> EvalRequest:
    return _from_json(EvalRequest, text)


def result_from_json(text: str | bytes) -> EvalResult:
    return _from_json(EvalResult, text)


STAGES = ("import", "run", "generate", "timing")
"""The stages of an evaluation, one after another: their ``phases`` add up to its time in the
workers (the other phases lie within them)."""

# Why elements are left out of a comparison, as the result's notes say it: written by the
# reference worker (``runner.worker.exchange``), read by the verdict (``runner.judge.verdict``).
UNWRITTEN = "the original leaves them unwritten"
VARYING = "the original gives them other values on another run"
