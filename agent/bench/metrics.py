"""The benchmark's metrics, as the GEAK paper, TritonBench and KernelBench define them.

Per task (one or more samples, each a candidate's ``EvalResult`` summarised as a ``Sample``):

* **call**: the candidate ran — it compiled and executed on every input without an error or a
  crash (a wrong answer or an anti-cheat rejection still counts as a call);
* **exec** (execution accuracy): it was verified correct (every case and trial, anti-cheat rules
  passed);
* **speedup**: Σ reference ms / Σ candidate ms over the task's timed input cases (the runner's
  ``Timing.speedup``); only for correct, timed samples.

Over the suite: call accuracy and execution accuracy (share of tasks whose chosen sample — the
best correct one — ran / was correct), mean and geometric-mean speedup over the correct timed
tasks, ``fast_p`` (share of *all* tasks that are correct and faster than ``p`` times the
reference), ``pass@k`` with the unbiased estimator over n samples per task, and % of peak.
Standard library only (and the runner's schema, for its vocabulary; ``agent.roofline``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from runner.schema import DID_NOT_RUN

from agent.roofline import roofline


@dataclass
class Sample:
    """One candidate of one task, as the metrics need it."""

    status: str
    correct: bool
    speedup: Optional[float] = None
    """Σ ref / Σ cand over timed cases; None when not timed."""
    pct_peak: Optional[float] = None
    """The candidate's % of its roofline (``agent.roofline``: per case the binding roof, compute
    from get_flops or bandwidth, weighted by time over the timed cases); None: unknown."""
    not_run: Optional[str] = None
    """Why nothing of it could run on this runner (every input case left out: too large for the
    CPU interpreter, say); such a sample says nothing of the code and is not scored."""
    not_checkable: Optional[str] = None
    """Why the original it is judged against cannot be checked on this runner (its own results
    differ between runs on the same inputs, or its own test fails on this device): nothing can be
    said of the candidate, right or wrong, and it is not scored."""

    @property
    def called(self) -> bool:
        return self.status not in DID_NOT_RUN

    @property
    def ok(self) -> bool:
        return self.correct and self.status == "ok"


def best_sample(samples: Sequence[Sample]) -> Optional[Sample]:
    """The sample a task is scored by: the fastest correct one (a correct untimed one beats a
    wrong one), else one that at least ran, else the first."""
    if not samples:
        return None
    good = [s for s in samples if s.ok]
    if good:
        return max(good, key=lambda s: s.speedup if s.speedup is not None else -1.0)
    called = [s for s in samples if s.called]
    return called[0] if called else samples[0]


def pass_at_k(n: int, c: int, k: int) -> Optional[float]:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k). None when n < k."""
    if n < k or k < 1:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geomean(values: Iterable[float]) -> Optional[float]:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def mean(values: Iterable[float]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def fast_p(tasks: Sequence[Sequence[Sample]], p: float) -> Optional[float]:
    """Share of all tasks whose chosen sample is correct and more than ``p`` times as fast as the
    reference (KernelBench's fast_p; fast_0 counts every correct task, timed or not)."""
    if not tasks:
        return None
    hits = 0
    for samples in tasks:
        b = best_sample(samples)
        if b is None or not b.ok:
            continue
        if p <= 0 or (b.speedup is not None and b.speedup > p):
            hits += 1
    return hits / len(tasks)


@dataclass
class Summary:
    tasks: int
    samples: int
    call_accuracy: Optional[float]
    execution_accuracy: Optional[float]
    timed: int
    """Correct tasks with a speedup."""
    speedup_mean: Optional[float]
    speedup_geomean: Optional[float]
    fast_p: dict[str, Optional[float]] = field(default_factory=dict)
    pass_at_k: dict[str, Optional[float]] = field(default_factory=dict)
    pct_peak_mean: Optional[float] = None
    not_run_here: int = 0
    """Tasks left out of every figure: none of their input cases could run on this runner."""
    not_checkable: int = 0
    """Tasks left out of every figure: their original cannot be checked on this runner."""


def not_run_here(samples: Sequence[Sample]) -> bool:
    """Every sample of the task could not run on this runner (``Sample.not_run``)."""
    return bool(samples) and all(s.not_run for s in samples)


def not_checkable(samples: Sequence[Sample]) -> bool:
    """Every sample of the task was judged against an original that cannot be checked here
    (``Sample.not_checkable``)."""
    return bool(samples) and all(s.not_checkable for s in samples)


def summarize(tasks: Sequence[Sequence[Sample]], ps: Sequence[float] = (0.0, 1.0, 1.5, 2.0),
              ks: Sequence[int] = (1,)) -> Summary:
    """Suite metrics from each task's samples (a task with no samples counts as failed; a task
    none of whose samples could run here is left out and counted in ``not_run_here``; one whose
    original cannot be checked here, in ``not_checkable``)."""
    skipped = [s for s in tasks if not_run_here(s)]
    unjudged = [s for s in tasks if not not_run_here(s) and not_checkable(s)]
    tasks = [s for s in tasks if not not_run_here(s) and not not_checkable(s)]
    n_tasks = len(tasks)
    best = [best_sample(s) for s in tasks]
    called = sum(1 for b in best if b is not None and b.called)
    correct = [b for b in best if b is not None and b.ok]
    speedups = [b.speedup for b in correct if b.speedup is not None]
    out = Summary(
        tasks=n_tasks, samples=sum(len(s) for s in tasks),
        call_accuracy=called / n_tasks if n_tasks else None,
        execution_accuracy=len(correct) / n_tasks if n_tasks else None,
        timed=len(speedups), speedup_mean=mean(speedups), speedup_geomean=geomean(speedups),
        pct_peak_mean=mean(b.pct_peak for b in correct if b.pct_peak is not None), not_run_here=len(skipped),
        not_checkable=len(unjudged))
    for p in ps:
        out.fast_p[f"fast_{p:g}"] = fast_p(tasks, p)
    for k in ks:
        vals = [pass_at_k(len(s), sum(1 for x in s if x.ok), k) for s in tasks]
        known = [v for v in vals if v is not None]
        # Defined only when every task has at least k samples.
        out.pass_at_k[f"pass@{k}"] = (sum(known) / len(known)) if known and len(known) == len(vals) else None
    return out


NOT_CHECKABLE = ("original_varies", "original_fails_here")
"""``ErrorInfo.kind`` of a result that says the original cannot be checked on this runner."""


def sample_from_result(result) -> Sample:
    """A ``Sample`` from an ``EvalResult`` (or its JSON dict)."""
    d = result if isinstance(result, dict) else None
    get = (lambda k: d.get(k)) if d is not None else (lambda k: getattr(result, k))
    timing = get("timing")
    speedup = None
    if timing:
        speedup = timing["speedup"] if isinstance(timing, dict) else timing.speedup
    error = get("error")
    kind = (error.get("kind") if isinstance(error, dict) else getattr(error, "kind", None)) if error else None
    return Sample(status=get("status"), correct=bool(get("correct")), speedup=speedup,
                  pct_peak=pct_peak(get("cases") or []),
                  not_run=get("message") if kind == "not_run_here" else None,
                  not_checkable=get("message") if kind in NOT_CHECKABLE else None)


def pct_peak(cases) -> Optional[float]:
    """% of the roofline over the timed cases (``agent.roofline``: each case's binding roof,
    FLOP/s from get_flops or bandwidth, weighted by its time); None when unknown."""
    r = roofline({"cases": list(cases)})
    return r.pct if r is not None else None
