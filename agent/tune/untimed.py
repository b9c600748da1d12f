"""The tuner's untimed edit: what it can offer where nothing could be timed (no GPU).

An ``@triton.autotune`` over the original config and up to three verified-correct ones (the
most occupancy on the arch first, then the fewest registers), checked once more as written: on
a GPU, Triton times them at the first call and keeps the fastest. Never called faster.
"""

from __future__ import annotations

from typing import Optional

from runner.schema import EvalRequest

from agent.tune.knobs import find_autotune, find_launch_sites, render_autotune, render_autotune_launch
from agent.tune.tuner import DEFAULT_LAUNCH, TuneReport, Trial, backend_of, screen_part, shape_key


def _rank(t: Trial) -> tuple:
    occ = min((k.occupancy_pct or 0.0 for k in t.resources), default=0.0)
    regs = max((k.registers or 0 for k in t.resources), default=0)
    return (-occ, regs)


def untimed_edit(runner, req: EvalRequest, report: TuneReport,
                 key: Optional[list[str]] = None) -> tuple[Optional[str], str]:
    """``(the edited file or None, what it is, or why there is none)``."""
    verified = [t for t in report.trials if t.correct and t.status == "ok" and not t.pruned]
    if not verified:
        return None, "no config was verified correct"
    text = req.files[req.target.path]
    site = next(s for s in find_launch_sites(text, req.target.symbol) if s.kernel == report.kernel)
    # Autotune configs hold literal values: configs that change a computed knob or the kernel's
    # code are left out, the others keep their literal part.
    literal = [(t, screen_part(t.config, report.original)) for t in verified]
    literal = [(t, c) for t, c in literal if c is not None]
    if not literal:
        return None, "every verified config changes a computed block size or the kernel's code"
    chosen = [dict(c) for _, c in sorted(literal, key=lambda tc: _rank(tc[0]))[:3]]
    at, _ = find_autotune(text, site.kernel)
    try:
        if at is not None:
            configs = list(at.configs) + [c for c in chosen if c not in at.configs]
            source = render_autotune(text, at, configs)
            label = f"the kernel's {len(at.configs)} autotune config(s) and {len(configs) - len(at.configs)} more"
        else:
            defaults = DEFAULT_LAUNCH[backend_of(report.arch)]
            names = sorted({n for c in chosen for n in c})
            original = {n: report.original.get(n, defaults.get(n)) for n in names
                        if isinstance(report.original.get(n, defaults.get(n)), int)}
            configs = [original] + [{**original, **c} for c in chosen if {**original, **c} != original]
            source = render_autotune_launch(text, site, configs, key or shape_key(text, site, report.trials))
            label = f"the original config and {len(configs) - 1} verified one(s)"
    except ValueError as e:
        return None, f"cannot write it as an @triton.autotune: {e}"
    check = runner.evaluate(req.with_candidate(source, timing=False))
    if not check.correct:
        return None, f"the @triton.autotune edit failed its check: {check.status}: {check.message}"
    return source, (f"an @triton.autotune over {label}, verified correct on {report.device or 'the runner'} "
                    "but not timed: on a GPU, Triton times them at the first call and keeps the fastest")
