"""Measurements that outlive the editor: ``.geak/lsp-results.json`` in the workspace.

One record per target, source hash and device: what a hover shows. And, per target, its last
runs (``RunRecord``): every config or candidate a job tried, with its verdict, speedup and
per-case results, which the editor's results view shows. The hash is that of the
target's own text and of the kernels it launches (``DocumentTargets.source_hash``), so an edit
elsewhere in the file does not make a measurement stale, and an edit to the kernel does.
Writes are atomic (a temporary file renamed over the old one); a damaged file is set aside
and started afresh, never a reason to fail.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from runner.schema import CaseResult, CaseTiming, KernelResources

FILE = "lsp-results.json"
VERSION = 1
MAX_RECORDS = 500
MAX_RUNS = 10
"""Runs kept per target (the newest)."""
MAX_CANDIDATES = 200
"""Candidates kept per run (a tuner run over a large space lists the first ones)."""


def _subset(name: str, doc: str, *parts: tuple, own: tuple[tuple[str, str, str], ...] = ()) -> type:
    """A record of the named fields of the schema's records, each with the schema's type and
    default (declared once, there), plus the store's ``own`` fields (name, type, what it is).
    A part is ``(record, names)``, or ``(record, names, "optional")`` for fields that may be
    missing here (a case that was not timed): ``Optional`` of the schema's type, None.
    Fields without a default come first."""
    fields = []
    for source, names, *optional in parts:
        by_name = {f.name: f for f in dataclasses.fields(source)}
        for n in names:
            f = by_name[n]  # a KeyError here: the schema no longer has it
            if optional:
                fields.append((n, f"Optional[{f.type}]", dataclasses.field(default=None)))
            elif f.default is not dataclasses.MISSING:
                fields.append((n, f.type, dataclasses.field(default=f.default)))
            elif f.default_factory is not dataclasses.MISSING:
                fields.append((n, f.type, dataclasses.field(default_factory=f.default_factory)))
            else:
                fields.append((n, f.type))
    fields += [(n, ty, dataclasses.field(default=None)) for n, ty, _ in own]
    fields.sort(key=lambda f: len(f) == 3)
    cls = dataclasses.make_dataclass(name, fields)
    cls.__module__ = __name__
    cls.__doc__ = doc + "".join(f"\n\n``{n}``: {what}" for n, _, what in own)
    return cls


CaseRecord = _subset(
    "CaseRecord", "One input case of a run, as the store keeps it: the schema's ``CaseResult`` and "
    "``CaseTiming`` fields, one side's times.",
    (CaseResult, ("label", "shapes", "passed", "skipped", "max_abs_err", "max_rel_err", "detail")),
    (CaseTiming, ("ref_ms", "cand_ms", "speedup"), "optional"),
    own=(("spread_pct", "Optional[float]", "the side's timing spread (``ref_spread_pct`` or ``cand_spread_pct``)"),
         ("bw_pct_peak", "Optional[float]", "the candidate's share of peak bandwidth (``cand_bw_pct_peak``)"),
         ("flops_pct_peak", "Optional[float]", "the candidate's share of peak FLOP/s (``cand_flops_pct_peak``)")))

ResourceRecord = _subset(
    "ResourceRecord", "One kernel launch compiled ahead of time, as the store keeps it: the schema's "
    "``KernelResources`` fields a hover shows.",
    (KernelResources, ("kernel", "arch", "registers", "spill_bytes", "shared_bytes", "shared_limit",
                       "occupancy_pct", "error")),
    own=(("config", "str", "the launch config in words (``KernelResources.config_text``)"),))


@dataclass
class Record:
    path: str
    """Project-relative path of the file."""
    symbol: str
    """The evaluated symbol (a kernel's wrapper)."""
    source_hash: str
    device: str
    """Device name and backend, e.g. "NVIDIA H200 (cuda, sm_90)" or "Triton CPU interpreter"."""
    measured_at: float
    kind: str
    """benchmark | optimize"""
    status: str
    correct: bool
    message: str
    timing_unavailable: Optional[str] = None
    cases: list[CaseRecord] = field(default_factory=list)
    resources: list[ResourceRecord] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    speedup: Optional[float] = None
    """For an optimize result: the verified speedup of the result over the original."""

    @property
    def key(self) -> str:
        return f"{self.path}::{self.symbol}@{self.source_hash}@{self.device}"


@dataclass
class CandidateRecord:
    """One config (tuner) or candidate (GEAK loop) that a job evaluated."""
    label: str
    """"BLOCK_SIZE=512, num_warps=8" or "iteration 1, candidate 2"."""
    verdict: str
    """verified | mismatch | compile_error | runtime_error | timeout | crashed | rejected |
    pruned (not run: the compile report ruled it out) | no code | model error"""
    correct: bool = False
    speedup: Optional[float] = None
    """Timed against the original, interleaved (None: not timed)."""
    message: str = ""
    chosen: bool = False
    """The one offered as the result."""
    cases: list[CaseRecord] = field(default_factory=list)
    """Per input case: pass/fail, error, and the candidate's time or speedup when timed."""


@dataclass
class RunRecord:
    """One Optimize or Benchmark job on a target, as the results view shows it."""
    path: str
    symbol: str
    """The evaluated symbol (a kernel's wrapper)."""
    name: str
    """The target the user picked."""
    source_hash: str
    kind: str
    """optimize | benchmark"""
    strategy: str
    """tune | llm | benchmark"""
    device: str
    started_at: float
    finished_at: float
    outcome: str
    """verified | not-timed | no-improvement | benchmark | fails-own-inputs | error"""
    message: str
    speedup: Optional[float] = None
    original: list[CaseRecord] = field(default_factory=list)
    """The original's own run: per case, pass/fail and its time."""
    candidates: list[CandidateRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    job: str = ""
    result_hash: Optional[str] = None
    """The target's source hash once the offered result is the code (None: nothing offered)."""
    compiled: Optional[dict] = None
    """What changed in compiled terms from the original to the offered result
    (``agent.asm.compiled_difference``: per kernel and launch config, registers, spills,
    shared memory, occupancy and the instruction mix); None: nothing offered, or not compiled."""


def case_records(result, side: str = "reference") -> list[CaseRecord]:
    """``EvalResult.cases`` as records of one side's times."""
    out = []
    for c in result.cases if result is not None else []:
        t = c.timing
        out.append(CaseRecord(
            label=c.label, shapes=c.shapes, passed=c.passed, skipped=c.skipped,
            ref_ms=(t.cand_ms if side == "candidate" else t.ref_ms) if t else None,
            cand_ms=t.cand_ms if t else None, speedup=t.speedup if t else None,
            spread_pct=(t.cand_spread_pct if side == "candidate" else t.ref_spread_pct) if t else None,
            bw_pct_peak=t.cand_bw_pct_peak if t else None, flops_pct_peak=t.cand_flops_pct_peak if t else None,
            max_abs_err=c.max_abs_err, max_rel_err=c.max_rel_err, detail=c.detail))
    return out


def device_name(d) -> str:
    """The device as records are keyed by it: ``NVIDIA H200 (cuda, sm_90)``, or the interpreter."""
    if d is None:
        return "unknown device"
    return d.label


def record_from_result(result, path: str, symbol: str, source_hash: str, kind: str,
                       kernels: list[str], side: str = "reference") -> Record:
    """An ``EvalResult`` as a record of one side's code: the reference (the target against
    itself, or the original) or the candidate (an optimize result, once it is the code)."""
    device = device_name(result.device)
    cases = case_records(result, side)
    res = []
    for k in result.resources:
        res.append(ResourceRecord(kernel=k.kernel, arch=k.arch, config=k.config_text, registers=k.registers,
                                  spill_bytes=k.spill_bytes, shared_bytes=k.shared_bytes,
                                  shared_limit=k.shared_limit, occupancy_pct=k.occupancy_pct, error=k.error))
    return Record(path=path, symbol=symbol, source_hash=source_hash, device=device, measured_at=time.time(),
                  kind=kind, status=result.status, correct=result.correct, message=result.message,
                  timing_unavailable=result.timing_unavailable, cases=cases, resources=res, kernels=kernels,
                  speedup=result.timing.speedup if side == "candidate" and result.timing else None)


def _record(doc: dict) -> Record:
    doc = dict(doc)
    doc["cases"] = [CaseRecord(**c) for c in doc.get("cases", [])]
    doc["resources"] = [ResourceRecord(**r) for r in doc.get("resources", [])]
    return Record(**doc)


def _run(doc: dict) -> RunRecord:
    doc = dict(doc)
    doc["original"] = [CaseRecord(**c) for c in doc.get("original", [])]
    doc["candidates"] = [CandidateRecord(**{**c, "cases": [CaseRecord(**x) for x in c.get("cases", [])]})
                         for c in doc.get("candidates", [])]
    return RunRecord(**doc)


class Store:
    def __init__(self, root: Optional[Path]):
        self.root = root
        self._lock = threading.Lock()
        self._records: dict[str, Record] = {}
        self._runs: list[RunRecord] = []
        self.problem: Optional[str] = None
        self._load()

    @property
    def path(self) -> Optional[Path]:
        return self.root / ".geak" / FILE if self.root else None

    def _load(self) -> None:
        p = self.path
        if p is None or not p.is_file():
            return
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
            if doc.get("version") != VERSION:
                raise ValueError(f"version {doc.get('version')!r}")
            self._records = {r.key: r for r in (_record(x) for x in doc.get("records", []))}
            self._runs = [_run(x) for x in doc.get("runs", [])]
        except (OSError, ValueError, TypeError, AttributeError) as e:
            self.problem = f"{p}: unreadable ({e}); set aside as {p.name}.bad and started afresh"
            try:
                p.replace(p.with_name(p.name + ".bad"))
            except OSError:
                pass
            self._records = {}
            self._runs = []

    def put(self, rec: Record) -> None:
        with self._lock:
            self._records[rec.key] = rec
            if len(self._records) > MAX_RECORDS:
                for r in sorted(self._records.values(), key=lambda r: r.measured_at)[:len(self._records) - MAX_RECORDS]:
                    self._records.pop(r.key, None)
            self._save()

    def _save(self) -> None:
        p = self.path
        if p is None:
            return
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            doc: dict[str, Any] = {"version": VERSION, "records": [asdict(r) for r in self._records.values()],
                                   "runs": [asdict(r) for r in self._runs]}
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".lsp-results.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, p)
        except OSError as e:
            self.problem = f"{p}: cannot write ({e}); results are kept in memory only"

    def latest(self, path: str, symbol: str, kind: Optional[str] = None) -> Optional[Record]:
        """The most recent record for the target, any source hash, any device."""
        with self._lock:
            hits = [r for r in self._records.values() if r.path == path and r.symbol == symbol
                    and (kind is None or r.kind == kind)]
        return max(hits, key=lambda r: r.measured_at, default=None)

    def for_target(self, path: str, symbol: str) -> list[Record]:
        with self._lock:
            return sorted((r for r in self._records.values() if r.path == path and r.symbol == symbol),
                          key=lambda r: -r.measured_at)

    def put_run(self, run: RunRecord) -> None:
        run.candidates = run.candidates[:MAX_CANDIDATES]
        with self._lock:
            self._runs.append(run)
            mine = [r for r in self._runs if (r.path, r.symbol) == (run.path, run.symbol)]
            for old in mine[:-MAX_RUNS]:
                self._runs.remove(old)
            self._runs = self._runs[-MAX_RECORDS:]
            self._save()

    def runs(self, path: str, symbol: str) -> list[RunRecord]:
        """The target's runs, newest first."""
        with self._lock:
            return sorted((r for r in self._runs if r.path == path and r.symbol == symbol),
                          key=lambda r: -r.finished_at)
