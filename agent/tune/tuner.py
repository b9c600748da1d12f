"""The no-LLM tuner: search launch configurations of an existing Triton wrapper.

1. Find the knobs at the wrapper's launch site (``knobs.py``).
2. Build a search space that respects the hardware: powers of two around each block size,
   ``num_warps`` 1–16, ``num_stages`` only for kernels with loops (1–5 on NVIDIA, 1–2 on AMD).
   Large spaces are sampled (seeded), and the sample size is reported.
3. Before running a batch of configs, compile each ahead of time for the target arch with the
   argument types of the original's launches (one screening request per worker): configs that
   exceed shared memory, fail to compile or spill more than the original are pruned unrun.
4. Evaluate every remaining config on the runner as a candidate against the original:
   correctness on every case and trial, and on a GPU the interleaved timing, with a shorter
   timing budget during the search (``SEARCH_TIMING``). Tiled ``tl.dot`` kernels start from a
   few tile shapes known to be good on the arch family (``DOT_SEEDS``), then a seeded sample
   and coordinate descent.
5. The best verified config wins only if a fresh evaluation of the edited file, with the full
   timing budget, beats the original by more than the timing spread; otherwise the report says
   nothing was better. Under the CPU interpreter nothing is timed: the report lists which
   configs are correct and what they cost in registers and shared memory, and says that timing
   needs a GPU.
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
SEARCH_TIMING = {"warmup_ms": 10.0, "rep_ms": 25.0, "min_reps": 5}
"""Timing options for configs during the search: a quarter of the default budget. The
interleaved ABBA order, L2 flush and medians stay; the chosen config is then measured again
with the request's own (full) budget before anything is offered."""


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
    phases: dict[str, float] = field(default_factory=dict)
    """Where the evaluation's time went (``EvalResult.phases``)."""


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
    screened: list[Trial] = field(default_factory=list)
    """Configs compiled for the arch before running and pruned unrun (``pruned`` says why)."""
    seeds: int = 0
    """Known-good tile shapes for the arch that the search started from (tiled dot kernels)."""

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
    # Launch options the launch does not pass can be added (a computed one stays as it is).
    names = {k.name for k in site.knobs} | site.keywords
    if "num_warps" not in names and site.insert_at:
        axes["num_warps"] = list(NUM_WARPS)
    if "num_stages" not in names and site.insert_at and site.has_loop:
        axes["num_stages"] = list(NUM_STAGES.get(backend, NUM_STAGES["cuda"]))
    return axes


def search_space(site: LaunchSite, backend: str = "cuda", uses_dot: bool = False) -> list[dict[str, int]]:
    axes = search_axes(site, backend, uses_dot)
    keys = sorted(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def _key(config: dict[str, int]) -> tuple:
    return tuple(sorted(config.items()))


def coordinate_descent(axes: dict[str, list[int]], start: dict[str, int],
                       evaluate: Callable[[list[dict[str, int]]], list[Trial]], budget: int,
                       rounds: int = 3, feasible: Callable[[dict[str, int]], bool] = lambda c: True,
                       prior: tuple = (), start_speed: float = 1.0,
                       skip: Callable[[dict[str, int]], bool] = lambda c: False) -> list[Trial]:
    """Vary one knob at a time around the best verified config so far (each axis's values in
    one parallel batch), until a whole round brings nothing or the budget is spent. Each trial
    is scored by its measured speedup over the original. ``evaluate`` may return fewer trials
    than configs (those it pruned unrun, which ``skip`` then names)."""
    done: dict[tuple, Trial] = {_key(t.config): t for t in prior}
    current, best_speed = dict(start), start_speed
    key = _key

    for _ in range(rounds):
        improved = False
        for name in sorted(axes):
            batch = [c for c in ({**current, name: v} for v in axes[name])
                     if key(c) not in done and c != start and feasible(c) and not skip(c)]
            batch = batch[:max(0, budget - len(done))]
            if not batch:
                continue
            for t in evaluate(batch):
                done[key(t.config)] = t
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


# Tile shapes (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) that are good starting points
# for a tiled tl.dot kernel: Triton's matmul tutorial configs for NVIDIA, and for AMD CDNA the
# same tutorial's HIP configs (64-wide waves, num_stages 2 with the stream pipeliner).
DOT_SEEDS = {
    "cuda": [(128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
             (64, 128, 32, 4, 4), (128, 128, 64, 8, 3), (128, 32, 32, 4, 4), (64, 32, 32, 2, 5)],
    "hip": [(128, 256, 16, 4, 2), (256, 256, 16, 8, 2), (128, 128, 32, 8, 2), (64, 128, 32, 4, 2),
            (64, 64, 32, 4, 2), (128, 128, 64, 4, 2)],
}


def dot_seeds(axes: dict[str, list[int]], blocks: dict[str, str], start: dict[str, int],
              backend: str) -> list[dict[str, int]]:
    """``DOT_SEEDS`` for this kernel's knob names, each kept only where every value it sets is
    in the search space (the knobs it does not name keep ``start``'s values)."""
    out: list[dict[str, int]] = []
    for bm, bn, bk, warps, stages in DOT_SEEDS.get(backend, DOT_SEEDS["cuda"]):
        want = {blocks["M"]: bm, blocks["N"]: bn, blocks["K"]: bk, "num_warps": warps, "num_stages": stages}
        if any(name in axes and v not in axes[name] for name, v in want.items()):
            continue
        c = {**start, **{name: v for name, v in want.items() if name in axes}}
        if c not in out and c != start:
            out.append(c)
    return out


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


def _parallelism(runner) -> int:
    """How many evaluations the runner runs at once (its local pool's size; else a guess)."""
    size = getattr(getattr(runner, "pool", None), "size", None) or getattr(runner, "parallel", None)
    return max(1, int(size)) if isinstance(size, int) else 4


class Screen:
    """Compile configs for the target arch before running them, through the runner: one
    untimed run of the original per request records its launches' argument types, and the
    worker compiles each config with them (``EvalOptions.aot_configs``). A config is pruned
    when it does not compile or fit (shared memory) or spills more than the original; if the
    original's own launches do not compile here, nothing is pruned."""

    def __init__(self, runner, request: EvalRequest, kernel: str, arch: str, parallel: int):
        self.runner, self.request, self.kernel, self.arch = runner, request, kernel, arch
        self.parallel = max(1, parallel)
        self.unavailable: Optional[str] = None
        self.original: list[KernelResources] = []
        """The original's own launches as compiled for the arch (the screen's control)."""

    def check(self, configs: list[dict[str, int]]) -> dict[tuple, tuple[Optional[str], list[KernelResources]]]:
        """``{config key: (why it is pruned or None, its compile reports)}`` for the configs
        that could be screened; the others are missing."""
        if not configs or self.unavailable:
            return {}
        n = min(self.parallel, len(configs))
        chunks = [configs[i::n] for i in range(n)]
        results = self.runner.evaluate_many([
            _request(self.request, None, trials=1, timing=False, aot_arch=self.arch, aot_kernel=self.kernel,
                     aot_configs=[dict(c) for c in chunk]) for chunk in chunks])
        out: dict[tuple, tuple[Optional[str], list[KernelResources]]] = {}
        for chunk, r in zip(chunks, results):
            control = [k for k in r.resources if k.variant is None and k.kernel == self.kernel]
            if not r.correct or not control or not all(k.fits and not k.error for k in control):
                why = (r.message if not r.correct else
                       f"the original's launches of {self.kernel} did not compile for {self.arch}"
                       + (f" ({control[0].error})" if control and control[0].error else ""))
                self.unavailable = why[:300]
                return {}
            self.original = self.original or control
            spill0 = max((k.spill_bytes or 0) for k in control)
            for i, cfg in enumerate(chunk):
                mine = [k for k in r.resources if k.variant == i]
                if not mine:
                    continue
                bad = next((k for k in mine if not k.fits or k.error), None)
                spills = max((k.spill_bytes or 0) for k in mine)
                if bad is not None:
                    why = bad.error or "does not fit"
                elif spills > spill0:
                    why = f"spills {spills} bytes per thread on {self.arch}" + (
                        f" (the original: {spill0})" if spill0 else "")
                else:
                    why = None
                out[_key(cfg)] = (why, mine)
        return out


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
        wins[_key(cfg)] = wins.get(_key(cfg), 0) + 1
    overall = {_key(t.config): t.speedup or 0.0 for t in trials if _good(t)}
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
    t = Trial(config=config, status=r.status, correct=r.correct, message=r.message, resources=r.resources,
              phases=dict(r.phases))
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
    defaults = DEFAULT_LAUNCH.get(backend, DEFAULT_LAUNCH["cuda"])

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
        reasons = {}
        for c in space:
            why_not = static_limit({**report.original, **c}, blocks, arch, elem, defaults)
            if why_not:
                reasons[_key(c)] = why_not
        if reasons:
            space = [c for c in space if _key(c) not in reasons]
            report.pruned_before = len(reasons)
            report.notes.append(f"pruned {len(reasons)} of {report.space_size} configs before running anything "
                                f"(tiles over {arch}'s shared memory or registers, {elem}-byte elements), e.g. "
                                + next(iter(reasons.values())))
            feasible = lambda c: _key(c) not in reasons  # noqa: E731
        if not space:
            report.message = f"{site.kernel}: no config fits {arch}"
            return report

    screen = Screen(runner, request, site.kernel, arch, _parallelism(runner))
    search_timing = SEARCH_TIMING if timed else {}

    def evaluate(configs: list[dict[str, int]]) -> list[Trial]:
        """Screen the batch by compiling it for arch, then run what is left. Returns the run
        configs' trials (the pruned ones go to report.screened)."""
        verdicts = screen.check(configs)
        run = []
        for cfg in configs:
            why, res = verdicts.get(_key(cfg), (None, None))
            if why:
                report.screened.append(Trial(config=cfg, status="pruned", correct=False, resources=res,
                                             pruned=why, message=f"pruned before running: {why}"))
            else:
                run.append(cfg)
        # A screened config's compile report is the screen's; the others are compiled as they run.
        results = runner.evaluate_many([
            _request(request, render(cfg), trials=trials_per_case,
                     aot_arch=None if _key(cfg) in verdicts else arch, **search_timing)
            for cfg in run])
        devices.extend(r.device for r in results if r.device)
        for cfg, r in zip(run, results):
            if _key(cfg) in verdicts and not r.resources:
                r.resources = verdicts[_key(cfg)][1]
        return [_trial(cfg, r) for cfg, r in zip(run, results)]

    # What the original runs with, on the search axes; and known-good tiles for tl.dot kernels.
    axes = search_axes(site, backend, uses_dot)
    start = {name: report.original.get(name, defaults.get(name, values[len(values) // 2]))
             for name, values in axes.items()}
    seeds = [c for c in dot_seeds(axes, blocks, start, backend) if feasible(c)] if blocks and at is None else []
    if timed and at is None and len(space) > max_configs:
        # On a GPU: explore first (the seeds, then a seeded sample up to half the budget: the
        # knobs of a tiled kernel interact, which one-knob moves alone miss), then coordinate
        # descent refines from the best verified config found.
        report.seeds = len(seeds)
        n_sample = max(0, max_configs // 2 - len(seeds)) if len(space) > 2 * max_configs else 0
        rest = [c for c in space if c != start and c not in seeds]
        explore = seeds[:max_configs] + random.Random(seed).sample(rest, min(n_sample, len(rest)))
        explored = evaluate(explore) if explore else []
        best0 = choose(explored)
        if best0 is not None:
            start, speed0 = dict(best0.config), best0.speedup
        else:
            speed0 = 1.0
        # The descent returns the explored trials first, then its own.
        report.trials = coordinate_descent(axes, start, evaluate, max_configs, feasible=feasible,
                                           prior=tuple(explored), start_speed=speed0,
                                           skip=lambda c: _key(c) in {_key(t.config) for t in report.screened})
        report.notes.append(
            f"searched {len(report.trials)} of {len(space)} configs: "
            + (f"{len(seeds)} known-good tile shapes for {backend}, " if seeds else "")
            + (f"a seeded sample of {n_sample}, " if n_sample else "")
            + "then coordinate descent from " + ("the best of these" if best0 is not None else "the original"))
    else:
        if len(space) > max_configs:
            seeds = [c for c in seeds if c in space]
            report.seeds = len(seeds)
            rest = [c for c in space if c not in seeds]
            space = seeds[:max_configs] + random.Random(seed).sample(rest, max_configs - len(seeds[:max_configs]))
            report.notes.append(f"searched a seeded random sample of {max_configs} of {report.space_size} configs"
                                + (f" ({report.space_size - report.pruned_before} after pruning)" if report.pruned_before else "")
                                + (f", {len(seeds)} of them known-good tile shapes for {backend}" if seeds else ""))
        report.trials = evaluate(space)
    report.original_resources = report.original_resources or screen.original
    if report.screened:
        report.notes.append(f"{len(report.screened)} config(s) pruned before running by the {arch} compile "
                            f"report, e.g. {report.screened[0].pruned}")
    elif screen.unavailable:
        report.notes.append(f"no compile screen before running: {screen.unavailable}")
    report.tried = len(report.trials)
    if devices:
        d = devices[0]
        report.device = d.name if d.backend == "interpreter" else f"{d.name} ({d.backend}, {d.arch})"
    report.timed = any(t.speedup is not None for t in report.trials)
    verified = sum(t.correct for t in report.trials)
    unrun = f", {len(report.screened)} more pruned before running" if report.screened else ""
    report.emit = emit
    best = choose(report.trials)
    if report.timed:
        report.per_shape = per_shape(report.trials)
    if not report.timed and timed:
        # A GPU runner, but nothing was timed: no config reproduced the original's outputs.
        first = next((t for t in report.trials if not t.correct), None)
        report.message = (f"{site.kernel}: {verified} of {report.tried} configs verified correct{unrun}, so "
                          "nothing was timed and the original stays"
                          + (f"; first failure: {first.status}: {first.message[:300]}" if first else ""))
        return report
    if not report.timed:
        report.message = (f"{site.kernel}: {verified} of {report.tried} configs verified correct on "
                          f"{report.device or 'the runner'}{unrun}; no timing here, so nothing is offered as "
                          "faster: timing needs a GPU. Run the same command on a GPU box, or point it at "
                          "a runner there: --runner http://HOST:8765 (geak-runner serve on that box)")
        return report
    per_shape_gain = any(c.config is not None for c in report.per_shape)
    if best is None and not (emit == "autotune" and per_shape_gain):
        report.message = (f"{site.kernel}: no config beats the original ({verified} of {report.tried} "
                          f"verified correct{unrun}; none faster by more than the timing spread)")
        return report

    # The edit, in the form the user asked for.
    if emit == "autotune":
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
                      f"evaluation; {verified} of {report.tried} configs verified correct{unrun})")
    return report
