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
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from runner.schema import EvalOptions, EvalRequest, EvalResult, KernelResources, Target

from .knobs import (AutotuneConfigs, LaunchSite, find_autotune, find_launch_sites, render_autotune,
                    render_autotune_launch, render_config)

NUM_WARPS = (1, 2, 4, 8, 16)
NUM_STAGES = {"cuda": (1, 2, 3, 4, 5), "hip": (1, 2)}
DEFAULT_LAUNCH = {"cuda": {"num_warps": 4, "num_stages": 3}, "hip": {"num_warps": 4, "num_stages": 2}}
"""What Triton uses when a launch does not say (``num_stages`` default differs on AMD)."""
MAX_AUTOTUNE_CONFIGS = 4
EMITS = ("constants", "autotune")


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
    case_speedups: dict[str, float] = field(default_factory=dict)
    """Per input case (its label): reference time / this config's time, measured interleaved."""


@dataclass
class ShapeChoice:
    case: str
    config: Optional[dict[str, int]]
    """The fastest verified config for this input case; ``None``: the original is best here."""
    speedup: float


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
    emit: str = "constants"
    per_shape: list[ShapeChoice] = field(default_factory=list)
    autotune_configs: list[dict[str, int]] = field(default_factory=list)
    """With ``emit="autotune"``: the configs written into the decorator."""
    autotune_key: list[str] = field(default_factory=list)
    search_speedup: Optional[float] = None
    """The chosen config's speedup as measured during the search (before confirmation)."""
    confirmation: Optional[EvalResult] = None
    """A fresh evaluation of the edited file: its timing is the speedup reported."""
    pruned_before: int = 0
    """Configs ruled out for the arch before any was run (matmul-style tiles)."""
    original_resources: list[KernelResources] = field(default_factory=list)

    @property
    def improved(self) -> bool:
        return self.best is not None and self.source is not None


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
                       rounds: int = 3, feasible: Callable[[dict[str, int]], bool] = lambda c: True,
                       prior: tuple = (), start_speed: float = 1.0) -> list[Trial]:
    """Vary one knob at a time around the best verified config so far (each axis's values in
    one parallel batch), until a whole round brings nothing or the budget is spent. Each trial
    is scored by its measured speedup over the original."""
    done: dict[tuple, Trial] = {tuple(sorted(t.config.items())): t for t in prior}
    current, best_speed = dict(start), start_speed

    def key(c):
        return tuple(sorted(c.items()))

    for _ in range(rounds):
        improved = False
        for name in sorted(axes):
            batch = [c for c in ({**current, name: v} for v in axes[name])
                     if key(c) not in done and c != start and feasible(c)]
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


_DOT_BLOCK = re.compile(r"^BLOCK(?:_SIZE)?_?([MNK])$")
_BYTES = {"fp64": 8, "i64": 8, "fp32": 4, "i32": 4, "fp16": 2, "bf16": 2, "i16": 2, "i8": 1, "u8": 1}


def dot_blocks(names) -> Optional[dict[str, str]]:
    """``{"M": "BLOCK_M", "N": ..., "K": ...}`` when a matmul-style kernel's tile knobs are named
    in the usual way (``BLOCK_M``, ``BLOCK_SIZE_M``, ``BLOCKM``)."""
    found = {}
    for n in names:
        m = _DOT_BLOCK.match(n)
        if m:
            found[m.group(1)] = n
    return found if len(found) == 3 else None


def static_limit(config: dict[str, int], blocks: dict[str, str], arch: str, elem_bytes: int,
                 defaults: dict[str, int]) -> Optional[str]:
    """Why a matmul-style config cannot fit ``arch``, known before compiling anything: the
    pipelined A and B tiles in shared memory (LDS), or an fp32 accumulator that alone needs more
    registers per thread than the arch has (it would spill)."""
    from runner.aot import ARCHS
    lim = ARCHS.get(arch)
    if lim is None or any(blocks[d] not in config for d in "MNK"):
        return None
    bm, bn, bk = (config[blocks[d]] for d in "MNK")
    stages = config.get("num_stages", defaults.get("num_stages", 3))
    warps = config.get("num_warps", defaults.get("num_warps", 4))
    # NVIDIA keeps num_stages buffers of each tile; AMD's stream pipeliner one fewer (at least one).
    buffers = max(1, stages if lim.backend == "cuda" else stages - 1)
    smem = (bm + bn) * bk * elem_bytes * buffers
    if smem > lim.smem_per_block:
        return f"tiles need ~{smem // 1024} KiB of shared memory; {arch} has {lim.smem_per_block // 1024} KiB"
    acc = bm * bn // (warps * lim.warp)
    cap = 255 if lim.backend == "cuda" else lim.vgprs_per_lane
    if acc > cap:
        return f"the accumulator alone needs {acc} registers per thread; {arch} has {cap}"
    return None


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


def _good(t: Trial) -> bool:
    return t.correct and t.status == "ok" and not t.pruned and t.speedup is not None


def per_shape(trials: list[Trial], min_gain: float = 0.01) -> list[ShapeChoice]:
    """For each timed input case, the verified config that is fastest on it; the original
    (``config=None``) where no config beats it there by more than the spread."""
    good = [t for t in trials if _good(t)]
    labels: list[str] = []
    for t in good:
        labels += [c for c in t.case_speedups if c not in labels]
    out = []
    for label in labels:
        ranked = sorted((t for t in good if label in t.case_speedups), key=lambda t: -t.case_speedups[label])
        best = ranked[0]
        margin = max(min_gain, (best.spread_pct or 0.0) / 100.0)
        sp = best.case_speedups[label]
        out.append(ShapeChoice(label, dict(best.config) if sp > 1.0 + margin else None, sp if sp > 1.0 + margin else 1.0))
    return out


def autotune_configs(choices: list[ShapeChoice], original: dict[str, int], trials: list[Trial],
                     limit: int = MAX_AUTOTUNE_CONFIGS) -> list[dict[str, int]]:
    """The few configs an ``@triton.autotune`` should hold: the per-shape winners, most cases
    won first (the original's config where it is still the best for some shape)."""
    wins: dict[tuple, int] = {}
    for c in choices:
        cfg = c.config if c.config is not None else original
        wins[tuple(sorted(cfg.items()))] = wins.get(tuple(sorted(cfg.items())), 0) + 1
    overall = {tuple(sorted(t.config.items())): t.speedup or 0.0 for t in trials if _good(t)}
    ranked = sorted(wins, key=lambda k: (-wins[k], -overall.get(k, 1.0)))
    return [dict(k) for k in ranked[:limit]]


def shape_key(text: str, site: LaunchSite, trials: list[Trial]) -> list[str]:
    """The kernel's integer arguments other than strides (sizes like ``n_cols``, ``M``), from
    the argument types seen at run time; by name when no launch was observed."""
    runtime = [name for name, const in site.params if not const]
    types: list[str] = []
    for t in trials:
        for r in t.resources:
            if r.kernel == site.kernel and r.arg_types:
                types = r.arg_types.split(", ")
                break
        if types:
            break
    if len(types) == len(runtime):
        key = [n for n, ty in zip(runtime, types) if ty in ("i32", "i64") and "stride" not in n.lower()]
    else:
        key = [n for n in runtime if "ptr" not in n.lower() and "stride" not in n.lower()]
    return key


def _request(request: EvalRequest, source: Optional[str], **options) -> EvalRequest:
    """The original request with ``options`` changed; with ``source``, a candidate that is the
    target file rewritten (same path, same symbol)."""
    opts = EvalOptions(**{**request.options.__dict__, **options})
    if source is None:
        return EvalRequest(target=request.target, files=request.files, options=opts)
    path = request.target.path
    return EvalRequest(target=request.target, files=request.files, candidate=Target(path, request.target.symbol),
                       candidate_files={path: source}, options=opts)


def _trial(config: dict[str, int], r: EvalResult) -> Trial:
    t = Trial(config=config, status=r.status, correct=r.correct, message=r.message, resources=r.resources)
    if r.timing:
        t.speedup, t.cand_ms, t.spread_pct = r.timing.speedup, r.timing.cand_ms, r.timing.spread_pct
        t.case_speedups = {c.label: c.timing.speedup for c in r.cases if c.timing}
    bad = [k for k in r.resources if not k.fits]
    spills = [k for k in r.resources if k.spill_bytes]
    if bad:
        t.pruned = bad[0].error or "does not fit"
    elif spills:
        t.pruned = f"spills {spills[0].spill_bytes} bytes per thread on {spills[0].arch}"
    return t


def tune(runner, request: EvalRequest, arch: str, max_configs: int = 48, seed: int = 0,
         trials_per_case: int = 2, timed: bool = False, emit: str = "constants",
         key: Optional[list[str]] = None) -> TuneReport:
    """Tune the launch of ``request.target`` (a built request for the target alone).
    ``timed``: the runner measures speed (a GPU), so large spaces are searched rather than
    sampled. ``emit``: ``constants`` writes the best config into the launch; ``autotune``
    writes an ``@triton.autotune`` with the per-shape winners, keyed on ``key`` (default: the
    kernel's integer size arguments)."""
    if emit not in EMITS:
        raise ValueError(f"emit must be one of {EMITS}")
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
    if key:
        unknown = [k for k in key if k not in {n for n, const in site.params if not const}]
        if unknown:
            raise ValueError(f"--key {','.join(unknown)}: not a (non-constexpr) argument of {site.kernel}; "
                             f"its arguments are {', '.join(n for n, c in site.params if not c)}")
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

    # Prune before running anything: matmul-style tiles that cannot fit the arch. The element
    # size comes from the original's observed launches (one untimed run, compiled for arch).
    feasible = lambda c: True  # noqa: E731
    blocks = dot_blocks(k.name for k in site.knobs) if uses_dot else None
    if blocks:
        probe = runner.evaluate(_request(request, None, trials=1, timing=False, aot_arch=arch))
        report.original_resources = [r for r in probe.resources if r.kernel == site.kernel]
        sizes = [_BYTES.get(t.lstrip("*"), 4) for r in report.original_resources
                 for t in r.arg_types.split(", ") if t.startswith("*")]
        elem = max(sizes) if sizes else 4
        defaults = DEFAULT_LAUNCH.get(backend, DEFAULT_LAUNCH["cuda"])
        reasons = {}
        for c in space:
            why_not = static_limit({**report.original, **c}, blocks, arch, elem, defaults)
            if why_not:
                reasons[tuple(sorted(c.items()))] = why_not
        if reasons:
            space = [c for c in space if tuple(sorted(c.items())) not in reasons]
            report.pruned_before = len(reasons)
            report.notes.append(f"pruned {len(reasons)} of {report.space_size} configs before running anything "
                                f"(tiles over {arch}'s shared memory or registers, {elem}-byte elements), e.g. "
                                + next(iter(reasons.values())))
            feasible = lambda c: tuple(sorted(c.items())) not in reasons  # noqa: E731
        if not space:
            report.message = f"{site.kernel}: no config fits {arch}"
            return report

    def evaluate(configs: list[dict[str, int]]) -> list[Trial]:
        results = runner.evaluate_many([_request(request, render(cfg), trials=trials_per_case, aot_arch=arch)
                                        for cfg in configs])
        devices.extend(r.device for r in results if r.device)
        return [_trial(cfg, r) for cfg, r in zip(configs, results)]

    if timed and at is None and len(space) > max_configs:
        # On a GPU: a seeded sample of half the budget explores the space (the knobs of a tiled
        # kernel interact, which one-knob moves alone miss), then coordinate descent refines
        # from the best verified config found, one knob at a time.
        axes = search_axes(site, backend, uses_dot)
        start = {name: report.original.get(name, values[len(values) // 2]) for name, values in axes.items()}
        n_explore = max_configs // 2 if len(space) > 2 * max_configs else 0
        explored = evaluate(random.Random(seed).sample([c for c in space if c != start], n_explore)) if n_explore else []
        best0 = choose(explored)
        if best0 is not None:
            start, speed0 = dict(best0.config), best0.speedup
        else:
            speed0 = 1.0
        # The descent returns the explored trials first, then its own.
        report.trials = coordinate_descent(axes, start, evaluate, max_configs, feasible=feasible,
                                           prior=tuple(explored), start_speed=speed0)
        report.notes.append(f"searched {len(report.trials)} of {len(space)} configs: a seeded sample of "
                            f"{n_explore}, then coordinate descent from "
                            + ("the best of it" if best0 is not None else "the original"))
    else:
        if len(space) > max_configs:
            space = random.Random(seed).sample(space, max_configs)
            report.notes.append(f"searched a seeded random sample of {max_configs} of {report.space_size} configs"
                                + (f" ({report.space_size - report.pruned_before} after pruning)" if report.pruned_before else ""))
        report.trials = evaluate(space)
    report.tried = len(report.trials)
    if devices:
        d = devices[0]
        report.device = d.name if d.backend == "interpreter" else f"{d.name} ({d.backend}, {d.arch})"
    report.timed = any(t.speedup is not None for t in report.trials)
    verified = sum(t.correct for t in report.trials)
    report.emit = emit
    best = choose(report.trials)
    if report.timed:
        report.per_shape = per_shape(report.trials)
    if not report.timed:
        report.message = (f"{site.kernel}: {verified} of {report.tried} configs verified correct on "
                          f"{report.device or 'the runner'}; no timing here, so nothing is offered as "
                          "faster: timing needs a GPU. Run the same command on a GPU box, or point it at "
                          "a runner there: --runner http://HOST:8765 (geak-runner serve on that box)")
        return report
    per_shape_gain = any(c.config is not None for c in report.per_shape)
    if best is None and not (emit == "autotune" and per_shape_gain):
        report.message = (f"{site.kernel}: no config beats the original ({verified} of {report.tried} "
                          "verified correct; none faster by more than the timing spread)")
        return report

    # The edit, in the form the user asked for.
    if emit == "autotune":
        defaults = DEFAULT_LAUNCH.get(backend, DEFAULT_LAUNCH["cuda"])
        names = sorted({n for t in report.trials for n in t.config})
        # An autotuned kernel's original is its own list, which is not one of the configs.
        original_full = {} if at is not None else {
            n: report.original.get(n, defaults.get(n)) for n in names if n in report.original or n in defaults}
        configs = autotune_configs(report.per_shape, original_full, report.trials)
        configs = [c for c in configs if c]
        if not per_shape_gain or not configs:
            configs = [best.config]  # faster overall, but no single shape by a clear margin
        report.autotune_configs = configs
        try:
            if at is not None:
                source = render_autotune(text, at, configs)
            else:
                if text.count(f"{site.kernel}[") > 1:
                    raise ValueError(f"{site.kernel} is launched in more than one place; an autotune "
                                     "decorator would change the others")
                report.autotune_key = key or shape_key(text, site, report.trials)
                source = render_autotune_launch(text, site, configs, report.autotune_key)
        except ValueError as e:
            report.message = f"{site.kernel}: cannot write an @triton.autotune edit: {e}; use --emit constants"
            return report
        label = f"@triton.autotune over {len(configs)} config(s) keyed on {report.autotune_key or 'its key'}"
        report.best = {"autotune configs": len(configs)}
    else:
        source = render(best.config)
        label = ", ".join(f"{k}={v}" for k, v in sorted(best.config.items()))
        report.best = best.config
    report.search_speedup = best.speedup if best is not None else None

    # Confirm on a fresh evaluation: the best of many noisy measurements is biased upwards.
    (conf,) = runner.evaluate_many([_request(request, source, trials=max(3, trials_per_case), aot_arch=arch)])
    report.confirmation = conf
    sp = conf.timing.speedup if conf.timing else None
    margin = max(0.01, (conf.timing.spread_pct if conf.timing else 0.0) / 100.0)
    if not (conf.status == "ok" and conf.correct and sp is not None and sp > 1.0 + margin):
        report.best = None
        why = (f"measured {sp:.3f}x on confirmation" if sp is not None and conf.correct
               else f"failed on confirmation: {conf.status}: {conf.message}")
        report.message = (f"{site.kernel}: {label} looked faster in the search"
                          + (f" ({report.search_speedup:.3f}x)" if report.search_speedup else "")
                          + f" but {why}; the original stays")
        return report
    report.best_speedup, report.source = sp, source
    report.message = (f"{site.kernel}: {sp:.2f}x faster with {label} (confirmed on a fresh "
                      f"evaluation; {verified} of {report.tried} configs verified correct)")
    return report
