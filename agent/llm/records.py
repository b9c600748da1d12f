"""The records of one run: a ``Step`` per candidate attempt, and the final ``Report``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from runner.schema import EvalResult


@dataclass
class Step:
    id: str
    """i{iteration:02d}-c{lane}"""
    iteration: int
    lane: int
    kind: str
    """The prompt's kind: generate | fix_did_not_run | fix_wrong | fix_rejected | fix_no_code |
    optimize | restart"""
    prompt: str = ""
    response: Optional[str] = None
    source: Optional[str] = None
    extraction: str = ""
    """How the code was found (fenced, joined, json, ...) or why none was."""
    notes: str = ""
    """The answer's reasoning (its text outside the code)."""
    error: Optional[str] = None
    """A failed model call, in words."""
    error_kind: Optional[str] = None
    result: Optional[EvalResult] = None
    outcome: Optional[str] = None
    """provider_error | no_code | did_not_run | rejected | wrong | correct (None: not finished)"""
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    truncated: bool = False
    """The answer stopped at the max-tokens limit."""
    compiled: Optional[str] = None
    """For a correct candidate that is slower than the original or spills: what the compiler
    made of it against the original (``render_compiled_diff``), for the reflector."""

    @property
    def finished(self) -> bool:
        return self.outcome is not None


@dataclass
class Candidate:
    """One attempt, as the report lists it."""
    id: str
    iteration: int
    lane: int
    kind: str
    outcome: str
    status: Optional[str] = None
    correct: bool = False
    speedup: Optional[float] = None
    spread_pct: Optional[float] = None
    message: str = ""


@dataclass
class Report:
    target: str
    provider: str
    model: str
    run_dir: str
    device: str = ""
    knowledge: list[str] = field(default_factory=list)
    iterations_run: int = 0
    parallel: int = 1
    stopped: str = "iterations"
    """iterations | target | budget | provider (a refusal: key, model) | unreachable (no call ever
    reached the provider) | provider_errors | time budget"""
    provider_error: Optional[str] = None
    """What stopped it, where the provider did (``provider``, ``unreachable``): its message."""
    timed: bool = False
    improved: bool = False
    best: Optional[str] = None
    best_speedup: Optional[float] = None
    source: Optional[str] = None
    """The chosen candidate's module (only when verified faster)."""
    result: Optional[EvalResult] = None
    """The chosen candidate's EvalResult."""
    baseline: Optional[EvalResult] = None
    verified: list[str] = field(default_factory=list)
    """Ids of the candidates verified correct, fastest first when timed."""
    candidates: list[Candidate] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    message: str = ""
    notes: list[str] = field(default_factory=list)
