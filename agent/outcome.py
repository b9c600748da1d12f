"""What an optimization ends with, the same for every strategy and every front end.

``agent.optimize.optimize`` returns an ``Outcome``: the original's own check, the result it
offers (verified faster; or, where asked, verified correct where nothing could be timed, and
said so), one ``Tried`` per config or candidate evaluated, and the strategy's own report
(``TuneReport`` / the GEAK loop's ``Report``), which ``geak optimize --json`` prints. The CLI,
the benchmark harness and the language server read this record; none of them re-derives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from runner.schema import EvalResult


@dataclass
class Tried:
    """One config (tuner) or candidate (GEAK loop) that was evaluated, or pruned unrun."""

    label: str
    """"BLOCK_SIZE=512, num_warps=8" or "iteration 1, candidate 2"."""
    verdict: str
    """verified | an ``EvalResult.status`` | pruned (not run: the compile report ruled it out) |
    no code | model error | unfinished"""
    correct: bool = False
    speedup: Optional[float] = None
    """Measured against the original, interleaved (None: not timed)."""
    message: str = ""
    chosen: bool = False
    """The one offered as the result."""
    result: Optional[EvalResult] = None
    """Its evaluation, where it is kept (the GEAK loop's candidates)."""
    case_speedups: dict[str, float] = field(default_factory=dict)
    """Per input case (its label), where only these are kept (the tuner's configs)."""

    @property
    def ran(self) -> bool:
        return self.verdict != "pruned"


@dataclass
class Outcome:
    strategy: str
    """tune | llm"""
    baseline: Optional[EvalResult] = None
    """The original checked against itself. Not correct: nothing else ran."""
    source: Optional[str] = None
    """The target file's text offered as the result, or None."""
    result: Optional[EvalResult] = None
    """The offered text's own evaluation."""
    speedup: Optional[float] = None
    """The offered result's verified speedup; None when it was not timed."""
    untimed: bool = False
    """``source`` is verified correct but could not be timed (offered only when asked for)."""
    timed: bool = False
    """The runner measures speed (a GPU)."""
    message: str = ""
    notes: list[str] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    report: Any = None
    """The strategy's own record: ``agent.tune.tuner.TuneReport`` or ``agent.llm.records.Report``."""
    stopped: Optional[str] = None
    """Why it stopped. The GEAK loop: iterations | target | budget (tokens) | provider (a key or
    model refused) | unreachable (no call reached the provider) | provider_errors | time budget. The tuner: None (it ran its plan) | task budget | time budget |
    roofline. Either, with no ``baseline``: the time ran out before the original was checked."""
    untimed_edit: Optional[str] = None
    """The tuner, when asked and nothing could be timed: an ``@triton.autotune`` over the original
    and verified configs, checked as written, for a GPU to choose from at run time."""
    untimed_note: str = ""
    """What ``untimed_edit`` is, or why there is none."""

    @property
    def original_fails(self) -> bool:
        return self.baseline is not None and not self.baseline.correct

    @property
    def improved(self) -> bool:
        """A result verified faster than the original is offered."""
        return self.source is not None and not self.untimed

    @property
    def verified(self) -> int:
        return sum(1 for t in self.tried if t.correct)

    @property
    def total(self) -> int:
        """Configs or candidates that ran (pruned ones left out)."""
        return sum(1 for t in self.tried if t.ran)


NONE_FASTER = "none faster than the original by more than the timing spread"
"""Where configs or candidates were verified and timed and none beat the original (``beats``)."""


def summary(out: Outcome) -> str:
    """What an optimization came to, in one line: what ``geak optimize`` ends with and what the
    editor says of a job (in its own words, ``geak_lsp.wording.editor_words``). The strategy's
    own ``message`` has the detail (timings, where candidates are kept)."""
    base = out.baseline
    if base is None:
        return out.message  # the time ran out before the original was checked
    if out.original_fails:
        return f"the original fails its own inputs: {base.message}; fix it first"
    if out.strategy == "compile":
        return out.message
    noun = "launch configs" if out.strategy == "tune" else "candidates"
    on = base.device.on if base.device is not None else "on the runner"
    chosen = next((t for t in out.tried if t.chosen), None)
    label = chosen.label if chosen is not None else "the result"
    stopped = (f" (the search stopped on its {out.stopped})" if out.stopped in ("task budget", "time budget")
               else "")
    ok, n = out.verified, out.total
    if out.improved and out.speedup is not None:
        text = f"{label} is verified and {out.speedup:.2f}x faster than the original"
    elif out.untimed:
        text = f"{label} is verified correct {on} but not timed (timing needs a GPU); offered because --untimed is on"
    elif ok and not out.timed:
        text = f"{ok} of {n} {noun} verified correct {on}, none timed: no verified improvement (timing needs a GPU)"
    elif ok:
        text = f"{ok} of {n} {noun} correct, {NONE_FASTER}"
    elif n:
        text = f"none of the {n} {noun} was correct"
    else:
        text = out.message or f"no {noun} ran"
    return text + stopped
