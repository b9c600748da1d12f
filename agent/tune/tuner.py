"""The no-LLM tuner: search launch configurations of an existing Triton wrapper.

1. Find the knobs at the wrapper's launch site (``knobs.py``).
2. Build a search space that respects the hardware: powers of two around each block size,
   ``num_warps`` 1–16, ``num_stages`` only for kernels with loops (1–5 on NVIDIA, 1–2 on AMD).
   Large spaces are sampled (seeded), and the sample size is reported.
3. Evaluate every config on the runner as a candidate against the original: correctness on
   every case and trial, the ahead-of-time compile report for the target arch (configs that
   exceed shared memory or spill are pruned), and on a GPU the interleaved timing.
4. The best verified config wins only if it beats the original by more than the timing spread;
   otherwise the report says nothing was better. Under the CPU interpreter nothing is timed:
   the report lists which configs are correct and what they cost in registers and shared
   memory, and says that timing needs a GPU.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Optional

from runner.schema import EvalOptions, EvalRequest, EvalResult, KernelResources, Target

from .knobs import AutotuneConfigs, LaunchSite, find_autotune, find_launch_sites, render_autotune, render_config

NUM_WARPS = (1, 2, 4, 8, 16)
NUM_STAGES = {"cuda": (1, 2, 3, 4, 5), "hip": (1, 2)}


@dataclass
class Trial:
    config: dict[str, int]
    status: str
    correct: bool
    speedup: Optional[float] = None
    cand_ms: Optional[float] = None
    spread_pct: Optional[float] = None
    resources: list[KernelResources] = field(default_factory=list)
    pruned: Optional[str] = None
    message: str = ""


@dataclass
class TuneReport:
    target: str
    kernel: str
    arch: str
    original: dict[str, int]
    space_size: int
    tried: int
    trials: list[Trial]
    device: str = ""
    timed: bool = False
    best: Optional[dict[str, int]] = None
    best_speedup: Optional[float] = None
    source: Optional[str] = None
    """The target file with the best config written in (only when one was verified faster)."""
    message: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def improved(self) -> bool:
        return self.best is not None


def _powers_around(v: int, lo: int, hi: int) -> list[int]:
    if v <= 0 or v & (v - 1):
        return [v]  # not a power of two: leave it alone
    return sorted({p for p in (v // 4, v // 2, v, v * 2, v * 4) if lo <= p <= hi} | {v})


def search_axes(site: LaunchSite, backend: str = "cuda", uses_dot: bool = False) -> dict[str, list[int]]:
    axes: dict[str, list[int]] = {}
    for k in site.knobs:
        if k.kind == "constexpr":
            axes[k.name] = _powers_around(k.value, 16, 256 if uses_dot else 16384)
        elif k.kind == "num_warps":
            axes[k.name] = list(NUM_WARPS)
        elif k.kind == "num_stages" and site.has_loop:
            axes[k.name] = list(NUM_STAGES.get(backend, NUM_STAGES["cuda"]))
    names = {k.name for k in site.knobs}
    if "num_warps" not in names and site.insert_at:
        axes["num_warps"] = list(NUM_WARPS)
    if "num_stages" not in names and site.insert_at and site.has_loop:
        axes["num_stages"] = list(NUM_STAGES.get(backend, NUM_STAGES["cuda"]))
    return axes


def search_space(site: LaunchSite, backend: str = "cuda", uses_dot: bool = False) -> list[dict[str, int]]:
    axes = search_axes(site, backend, uses_dot)
    keys = sorted(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def coordinate_descent(axes: dict[str, list[int]], start: dict[str, int],
                       evaluate: Callable[[list[dict[str, int]]], list[Trial]], budget: int,
                       rounds: int = 3) -> list[Trial]:
    """Vary one knob at a time around the best verified config so far (each axis's values in
    one parallel batch), until a whole round brings nothing or the budget is spent. Each trial
    is scored by its measured speedup over the original."""
    done: dict[tuple, Trial] = {}
    current, best_speed = dict(start), 1.0

    def key(c):
        return tuple(sorted(c.items()))

    for _ in range(rounds):
        improved = False
        for name in sorted(axes):
            batch = [c for c in ({**current, name: v} for v in axes[name]) if key(c) not in done and c != start]
            batch = batch[:max(0, budget - len(done))]
            if not batch:
                continue
            for c, t in zip(batch, evaluate(batch)):
                done[key(c)] = t
            row = [done[key({**current, name: v})] for v in axes[name] if key({**current, name: v}) in done]
            good = [t for t in row if t.correct and t.status == "ok" and not t.pruned and t.speedup is not None]
            if good:
                pick = max(good, key=lambda t: t.speedup)
                margin = max(0.01, (pick.spread_pct or 0.0) / 100.0)
                if pick.speedup > best_speed * (1.0 + margin):
                    current, best_speed, improved = dict(pick.config), pick.speedup, True
        if not improved or len(done) >= budget:
            break
    return list(done.values())


def autotune_space(at: AutotuneConfigs, backend: str, uses_dot: bool, has_loop: bool) -> list[dict[str, int]]:
    """Each existing config alone, and each of its neighbours along one axis at a time."""
    seen: list[dict[str, int]] = []

    def add(c):
        if c not in seen:
            seen.append(c)

    for base in at.configs:
        add(dict(base))
        for key, value in base.items():
            if key == "num_warps":
                options = NUM_WARPS
            elif key == "num_stages":
                options = NUM_STAGES.get(backend, NUM_STAGES["cuda"]) if has_loop else (value,)
            else:
                options = _powers_around(value, 16, 256 if uses_dot else 16384)
            for v in options:
                add({**base, key: v})
    return seen


def original_config(site: LaunchSite) -> dict[str, int]:
    cfg = {k.name: k.value for k in site.knobs}
    return cfg


def choose(trials: list[Trial], min_gain: float = 0.01) -> Optional[Trial]:
    """The fastest verified, unpruned, timed trial that beats the original by more than its
    own timing spread (and at least ``min_gain``)."""
    ok = [t for t in trials if t.correct and t.status == "ok" and not t.pruned and t.speedup is not None]
    if not ok:
        return None
    best = max(ok, key=lambda t: t.speedup)
    margin = max(min_gain, (best.spread_pct or 0.0) / 100.0)
    return best if best.speedup > 1.0 + margin else None


def _trial(config: dict[str, int], r: EvalResult) -> Trial:
    t = Trial(config=config, status=r.status, correct=r.correct, message=r.message, resources=r.resources)
    if r.timing:
        t.speedup, t.cand_ms, t.spread_pct = r.timing.speedup, r.timing.cand_ms, r.timing.spread_pct
    bad = [k for k in r.resources if not k.fits]
    spills = [k for k in r.resources if k.spill_bytes]
    if bad:
        t.pruned = bad[0].error or "does not fit"
    elif spills:
        t.pruned = f"spills {spills[0].spill_bytes} bytes per thread on {spills[0].arch}"
    return t


def tune(runner, request: EvalRequest, arch: str, max_configs: int = 48, seed: int = 0,
         trials_per_case: int = 2, timed: bool = False) -> TuneReport:
    """Tune the launch of ``request.target`` (a built request for the target alone).
    ``timed``: the runner measures speed (a GPU), so large spaces are searched rather than
    sampled."""
    path, wrapper = request.target.path, request.target.symbol
    text = request.files[path]
    sites = find_launch_sites(text, wrapper)
    report = TuneReport(target=str(request.target), kernel="", arch=arch, original={}, space_size=0,
                        tried=0, trials=[])
    if not sites:
        report.message = f"{wrapper} launches no Triton kernel defined in {path}: nothing to tune"
        return report
    if len(sites) > 1:
        report.notes.append(f"{wrapper} launches {len(sites)} kernels; tuning the first "
                            f"({sites[0].kernel}, line {sites[0].line})")
    site = sites[0]
    report.kernel, report.original = site.kernel, original_config(site)
    report.notes += site.notes
    backend = "hip" if arch.startswith("gfx") else "cuda"
    uses_dot = "tl.dot" in text or ".dot(" in text
    at, why = find_autotune(text, site.kernel)
    if why:
        report.notes.append(why)
    if at is not None:
        # An autotuned kernel: each candidate pins one config (the original keeps its list).
        report.notes.append(f"{site.kernel} is autotuned over {len(at.configs)} config(s); each is "
                            "tried on its own, with its neighbours")
        report.original = {"autotune configs": len(at.configs)}
        space = autotune_space(at, backend, uses_dot, site.has_loop)
        render = lambda cfg: render_autotune(text, at, cfg)  # noqa: E731
    else:
        space = [c for c in search_space(site, backend, uses_dot)
                 if any(c.get(k) != v for k, v in report.original.items()) or set(c) - set(report.original)]
        render = lambda cfg: render_config(text, site, cfg)  # noqa: E731
    report.space_size = len(space)
    if not space:
        report.message = f"{site.kernel}: no tunable launch setting (literal block sizes, num_warps, num_stages)"
        return report
    devices: list = []

    def evaluate(configs: list[dict[str, int]]) -> list[Trial]:
        reqs = []
        for cfg in configs:
            opts = EvalOptions(**{**request.options.__dict__})
            opts.trials, opts.aot_arch = trials_per_case, arch
            reqs.append(EvalRequest(target=request.target, files=request.files,
                                    candidate=Target(path, wrapper),
                                    candidate_files={path: render(cfg)}, options=opts))
        results = runner.evaluate_many(reqs)
        devices.extend(r.device for r in results if r.device)
        return [_trial(cfg, r) for cfg, r in zip(configs, results)]

    if timed and at is None and len(space) > max_configs:
        # On a GPU: search, one knob at a time from the original, instead of sampling.
        axes = search_axes(site, backend, uses_dot)
        start = {name: report.original.get(name, values[len(values) // 2]) for name, values in axes.items()}
        report.trials = coordinate_descent(axes, start, evaluate, max_configs)
        report.notes.append(f"coordinate descent: {len(report.trials)} of {report.space_size} configs evaluated")
    else:
        if len(space) > max_configs:
            space = random.Random(seed).sample(space, max_configs)
            report.notes.append(f"searched a seeded random sample of {max_configs} of {report.space_size} configs")
        report.trials = evaluate(space)
    report.tried = len(report.trials)
    if devices:
        d = devices[0]
        report.device = d.name if d.backend == "interpreter" else f"{d.name} ({d.backend}, {d.arch})"
    report.timed = any(t.speedup is not None for t in report.trials)
    verified = sum(t.correct for t in report.trials)
    best = choose(report.trials)
    if best is not None:
        report.best, report.best_speedup = best.config, best.speedup
        report.source = render(best.config)
        report.message = (f"{site.kernel}: {best.speedup:.2f}x faster with "
                          + ", ".join(f"{k}={v}" for k, v in sorted(best.config.items()))
                          + f" ({verified} of {report.tried} configs verified correct)")
    elif report.timed:
        report.message = (f"{site.kernel}: no config beats the original ({verified} of {report.tried} "
                          "verified correct; none faster by more than the timing spread)")
    else:
        report.message = (f"{site.kernel}: {verified} of {report.tried} configs verified correct on "
                          f"{report.device or 'the runner'}; no timing here, so nothing is offered as "
                          "faster. Run on a GPU box to measure (geak optimize ... --device cuda there)")
    return report
