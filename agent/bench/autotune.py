"""Triton's own ``@triton.autotune`` over the tuner's space, beside the tuner
(``geak bench --strategy tune --against-autotune``).

After the tuner has run on a task, its kernel is decorated with ``@triton.autotune`` over the
same space: the tuner's space after its arithmetic pruning (the literal part of each config: an
autotune config holds values, not expressions or kernel rewrites), a seeded sample of
``max_configs`` with the original's config when larger; a kernel that is autotuned already gets
its own list and its neighbours. The decorated file is evaluated against the original by the
same evaluator, so both sides' speedups are measured the same way. Triton benchmarks every config
at the first call of each shape, inside that evaluation: its search seconds are the evaluation's
worker seconds less those of the original's own check.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Optional

from agent.deadline import Deadline, earliest
from agent.roofline import roofline
from agent.watch import Watched
from runner.schema import STAGES
from agent.tune.knobs import LaunchSite, find_autotune, find_launch_sites, render_autotune, render_autotune_launch
from agent.tune.tuner import (DEFAULT_LAUNCH, ELEMENT_BYTES, autotune_space, backend_of, dot_blocks, screen_part,
                          search_space, shape_key, static_limit)

EXTRA_S = 30.0
"""Triton's side gets the task's budget again and this much more: it benchmarks every config
inside the test's first calls, and one slow task must not hold the run."""

SAME_WITHIN = 1.01
"""Two speedups within 1% of each other are the same."""

HINTS = ("eviction_policy", "input_precision", "num_ctas")
"""Tuner axes that an autotune config cannot hold (load hints, launch options it does not take)."""


def autotune_space_of(text: str, site: LaunchSite, report,
                      max_configs: int) -> tuple[list[dict], bool, Callable[[list[dict]], str], object]:
    """The tuner's space as ``@triton.autotune`` configs: ``(configs, sampled, render, key)``,
    ``render(configs)`` being the source that holds them."""
    backend, uses_dot = backend_of(report.arch), "tl.dot" in text
    at, _ = find_autotune(text, site.kernel)
    if at is not None:
        space = autotune_space(at, backend, uses_dot, site.has_loop)[:max_configs]
        return space, False, (lambda cfgs: render_autotune(text, at, cfgs)), "as the file writes it"
    original = {**{k.name: k.value for k in site.knobs}, **site.axes_original()}
    space: list[dict] = []
    for c in search_space(site, backend, uses_dot):
        lit = screen_part(c, original, hints=HINTS)
        if lit and lit not in space:
            space.append(lit)
    blocks = dot_blocks(k.name for k in site.knobs) if uses_dot else None
    if blocks:  # the tuner's arithmetic pruning, with the element size it saw
        sizes = [ELEMENT_BYTES.get(ty.lstrip("*"), 4) for r in report.original_resources
                 for ty in r.arg_types.split(", ") if ty.startswith("*")]
        base = {k.name: k.value for k in site.knobs}
        space = [c for c in space if static_limit({**base, **c}, blocks, report.arch, max(sizes) if sizes else 4,
                                                  DEFAULT_LAUNCH[backend]) is None]
    sampled = len(space) > max_configs
    if sampled:  # the tuner's budget; the original's config always among them
        first = next((c for c in space if all(c.get(k.name) == k.value for k in site.knobs)), None)
        rest = [c for c in space if c != first]
        space = ([first] if first else []) + random.Random(0).sample(rest, max_configs - (1 if first else 0))
    key = shape_key(text, site, report.trials)
    return space, sampled, (lambda cfgs: render_autotune_launch(text, site, cfgs, key)), key


def against_autotune(request, outcome, runner, deadline: Optional[Deadline], max_configs: int,
                     budget_s: Optional[float]) -> dict:
    """``@triton.autotune`` over the tuner's space, evaluated against the original: its configs,
    whether they were sampled, its key, status, correctness, speedup, tuned ms, % of peak and
    search seconds; or ``skipped`` (why it did not run) and, when the time budget ended it
    before it started, ``time_budget``."""
    report, text = outcome.report, request.files[request.target.path]
    sites = find_launch_sites(text, request.target.symbol)
    if not sites or report is None or not report.kernel:
        return {"skipped": "no launch to tune"}
    if deadline is not None and deadline.passed:
        return {"skipped": "the time budget was spent", "time_budget": True}
    space, sampled, render, key = autotune_space_of(text, sites[0], report, max_configs)
    if len(space) < 2:
        return {"skipped": "fewer than two configs"}
    try:
        src = render(space)
    except ValueError as e:
        return {"skipped": f"cannot write it as an @triton.autotune: {e}"}
    mine = earliest(deadline, Deadline.after(budget_s + EXTRA_S, "task budget") if budget_s else None)
    t0 = time.perf_counter()
    req = request.with_candidate(src, trials=3)
    r = Watched(runner, deadline=mine).evaluate(req)
    wall_s = time.perf_counter() - t0
    worker = sum(r.phases.get(k, 0.0) for k in STAGES)
    base = sum(outcome.baseline.phases.get(k, 0.0) for k in STAGES) if outcome.baseline else 0.0
    roof = roofline(r) if r.timing else None
    return {"configs": len(space), "sampled": sampled, "key": key, "status": r.status, "correct": bool(r.correct),
            "speedup": r.timing.speedup if r.timing else None, "tuned_ms": r.timing.cand_ms if r.timing else None,
            "pct_peak": roof.pct if roof else None, "search_s": round(max(0.0, worker - base), 1),
            "eval_s": round(wall_s, 1), "message": r.message[:300]}


def verdict(tuner_speedup: Optional[float], autotune: dict, why_untimed: str = "") -> str:
    """The tuner against Triton's autotune, in words: which was faster (within 1%: the same),
    or why they cannot be compared."""
    theirs = autotune.get("speedup")
    if tuner_speedup is None:
        return "untimed" + (f" ({why_untimed})" if why_untimed else "")
    if theirs is None:
        return "the tuner only (Triton's autotune: " + (autotune.get("skipped") or autotune.get("status") or "-") + ")"
    if tuner_speedup > theirs * SAME_WITHIN:
        return "the tuner faster"
    return "Triton's autotune faster" if theirs > tuner_speedup * SAME_WITHIN else "the same within 1%"


def comparison(pairs: list[tuple[Optional[float], dict]]) -> dict:
    """Over a suite's tasks (each the tuner's speedup and its ``autotune`` record): on how many
    both were timed, and of those how many the tuner was faster on, the same within 1%, and
    Triton's autotune faster on, with each side's geometric-mean speedup there."""
    from agent.bench.metrics import geomean
    both = [(mine, at["speedup"]) for mine, at in pairs if mine is not None and at.get("speedup") is not None]
    return {"compared": len(both),
            "tuner_faster": sum(1 for g, t in both if g > t * SAME_WITHIN),
            "same": sum(1 for g, t in both if not (g > t * SAME_WITHIN or t > g * SAME_WITHIN)),
            "autotune_faster": sum(1 for g, t in both if t > g * SAME_WITHIN),
            "tuner_geomean": geomean(g for g, _ in both), "autotune_geomean": geomean(t for _, t in both)}


def in_words(summary: dict) -> str:
    """``comparison``'s figures in a sentence."""
    n = summary.get("compared") or 0
    if not n:
        return "nothing compared: no task had both the tuner's and Triton's autotune's speedup (timing needs a GPU)"

    def x(v):
        return "-" if v is None else f"{v:.3f}x"
    return (f"{n} task(s) with both timed: the tuner faster on {summary['tuner_faster']}, the same within 1% on "
            f"{summary['same']}, Triton's autotune faster on {summary['autotune_faster']}; geomean speedup "
            f"{x(summary['tuner_geomean'])} (the tuner) against {x(summary['autotune_geomean'])} (Triton's autotune)")
