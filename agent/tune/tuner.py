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

import ast
import itertools
import random
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from runner.aot import default_launch
from runner.schema import EvalRequest, EvalResult, KernelResources, beats

from agent.deadline import Deadline
from agent.outcome import NONE_FASTER
from agent.watch import Watched
from agent.roofline import ROOFLINE_STOP_PCT, Roofline, roofline
from agent.tune.knobs import (AutotuneConfigs, LaunchSite, config_text, find_autotune, find_launch_sites,
                              render_autotune, render_autotune_launch, render_config)
from agent.tune.rewrites import kernel_rewrites, rows_rewrite

NUM_WARPS = (1, 2, 4, 8, 16)
NUM_STAGES = {"cuda": (1, 2, 3, 4, 5), "rocm": (1, 2)}
DEFAULT_LAUNCH = {backend: default_launch(backend) for backend in ("cuda", "rocm")}
"""What Triton uses when a launch does not say (``num_stages`` default differs on AMD). Keyed by
backend, in ``DeviceInfo``'s words: ``cuda`` or ``rocm``."""
MAX_AUTOTUNE_CONFIGS = 4
EMITS = ("constants", "autotune")
SEARCH_TIMING = {"warmup_ms": 10.0, "rep_ms": 25.0, "min_reps": 5}
"""Timing options for configs during the search: a quarter of the default budget. The
interleaved ABBA order, L2 flush and medians stay; the chosen config is then measured again
with the request's own (full) budget before anything is offered."""
CONFIRM_RESERVE = 0.1
"""With a deadline, the search stops this share of the time before it, kept for the
confirmation, or the original's own check's seconds when that took longer (a confirmation is
an evaluation as large, and a winner it cannot confirm is lost), at most half the budget; if
the search's last batch ran into that time, the confirmation still gets this much past the
deadline (the one allowance beyond a budget)."""
FIRST_BATCH = 2
"""Under a deadline the first batch is this small: it measures the pace (each config's seconds
on a runner that other tasks may share) before larger batches are sized to the time left. A
first batch as large as the runner, sent by several tasks at once, queued past every budget."""


PROGRESS_BATCH = 4
"""Without a deadline and with nothing timed (the CPU interpreter), configs run in batches of
this many per evaluation the runner runs at once, after one compile screen of them all, so that
between batches the progress and the pace can be said (a batch waits for its slowest config,
so larger batches lose less to that)."""


PRIOR_SHARE = 0.5
"""Under a deadline no search starts with less time left than this share of the original's own
check: a first batch started then ran past the budget (TritonBench-G's destindex_copy_kv1: a
17 s check, then 15 s for two configs on a 30 s budget)."""


def confirm_reserve(budget_s: Optional[float], original: Optional[EvalResult]) -> float:
    """Seconds kept back from the search for the confirmation (``CONFIRM_RESERVE``)."""
    if not budget_s:
        return 0.0
    check_s = (original.duration_s or 0.0) if original is not None else 0.0
    return min(max(CONFIRM_RESERVE * budget_s, check_s), 0.5 * budget_s)


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
    pct_peak: Optional[float] = None
    """Its share of the roofline (``agent.roofline``), where the bytes or FLOPs are known."""
    peak_basis: Optional[str] = None

    @property
    def timed_ok(self) -> bool:
        """Verified correct, run (not pruned) and timed: its speedup can be compared."""
        return self.correct and self.status == "ok" and not self.pruned and self.speedup is not None


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
    stopped: Optional[str] = None
    """Why the search ended before its plan: "task budget", "time budget" (geak bench
    --time-budget) or "roofline" (the best verified config, or the original, within reach of
    the roofline); None: it ran its plan."""
    stopped_after: Optional[int] = None
    """Configs run when it stopped."""
    search_s: Optional[float] = None
    """Wall seconds of the search: its compile screens and evaluations, not the confirmation."""
    confirm_s: Optional[float] = None
    """Wall seconds of the confirmation."""
    budget_s: Optional[float] = None
    """The time the tuner had (to its deadline) when it started; None: no deadline."""
    original_pct_peak: Optional[float] = None
    """The original's share of its roofline (``agent.roofline``); None: unknown."""
    best_pct_peak: Optional[float] = None
    """The chosen config's share (the confirmation's measurement where there is one)."""
    peak_basis: Optional[str] = None
    """What the shares are of: flops | bandwidth | bandwidth_lower_bound."""
    timeline: list[dict] = field(default_factory=list)
    """Each step of the search in order, for diagnosing where a budget went: ``{"step":
    "screen" | "batch", "configs": n, "start_s": seconds since the search began, "s": wall
    seconds, "evals": [each evaluation's phases, "status" and "duration_s"]}``."""

    @property
    def improved(self) -> bool:
        return self.best is not None and self.source is not None


def _powers_around(v: int, lo: int, hi: int) -> list[int]:
    if v <= 0 or v & (v - 1):
        return [v]  # not a power of two: leave it alone
    return sorted({p for p in (v // 4, v // 2, v, v * 2, v * 4) if lo <= p <= hi} | {v})


def search_axes(site: LaunchSite, backend: str = "cuda", uses_dot: bool = False) -> dict[str, list]:
    """Each knob's values, the original's first where it has one: literal knobs (powers of
    two around them, warps, stages), computed knobs (their expressions), the kernel's
    rewrites (labels), and options the launch does not pass yet."""
    axes: dict[str, list] = {}
    for ek in site.exprs:
        if ek.kind != "num_stages" or site.has_loop:
            axes[ek.name] = list(ek.values)
    for rw in site.rewrites:
        axes[rw.name] = rw.values
    for k in site.knobs:
        if k.kind == "constexpr":
            axes[k.name] = _powers_around(k.value, 16, 256 if uses_dot else 16384)
        elif k.kind == "num_warps":
            axes[k.name] = list(NUM_WARPS)
        elif k.kind == "num_stages" and site.has_loop:
            axes[k.name] = list(NUM_STAGES.get(backend, NUM_STAGES["cuda"]))
    # Launch options the launch does not pass can be added (a computed one stays as it is).
    names = {k.name for k in site.knobs} | site.keywords
    insert = site.insert_at is not None and not site.splat
    if "num_warps" not in names and insert:
        axes["num_warps"] = list(NUM_WARPS)
    if "num_stages" not in names and insert and site.has_loop:
        axes["num_stages"] = list(NUM_STAGES.get(backend, NUM_STAGES["cuda"]))
    for name, values in site.extra_axes.items():
        if name not in names and insert:
            axes[name] = list(values)
    return axes


def search_space(site: LaunchSite, backend: str = "cuda", uses_dot: bool = False) -> list[dict[str, int]]:
    axes = search_axes(site, backend, uses_dot)
    keys = sorted(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def _key(config: dict[str, int]) -> tuple:
    return tuple(sorted(config.items()))


RESULT_NEUTRAL = frozenset({"num_warps", "num_stages", "num_ctas", "eviction_policy"})
"""Search axes that change how fast a kernel runs, never what it computes: launch options and
cache hints. Every other axis (block sizes, computed blocks, rows per program, dot precision)
may change results, and a config that moves one is verified like any other."""


def changes_results(trials, base: dict) -> set[tuple]:
    """``(knob, value)`` pairs seen to change the kernel's results: a config that failed
    verification (a mismatch) and differs from ``base`` (the original's config) or from a
    verified config in that one knob alone among those that can change results. A pair that is
    part of any verified config is never one. The search does not try such values again (a
    block size the kernel's output depends on, as in a block-sparse attention whose block
    tables are laid out per block, is then left as written)."""
    verified = [t.config for t in trials if t.correct]
    cleared = {(k, v) for c in verified for k, v in c.items()}
    refs = [base] + verified
    bad = set()
    for t in trials:
        if t.status != "mismatch":
            continue
        for ref in refs:
            diff = [(k, v) for k, v in t.config.items() if k not in RESULT_NEUTRAL and ref.get(k) != v]
            if len(diff) == 1 and diff[0] not in cleared:
                bad.add(diff[0])
                break
    return bad


def _hits(config: dict, bad: set) -> bool:
    return any((k, v) in bad for k, v in config.items())


def _moves(config: dict, base: dict) -> int:
    """How many knobs that can change results ``config`` sets otherwise than ``base``."""
    return sum(1 for k, v in config.items() if k not in RESULT_NEUTRAL and base.get(k) != v)


def _nearest_first(values: list, current) -> list:
    """An axis's values ordered by their distance (in the axis's order) from ``current``."""
    at = values.index(current) if current in values else len(values) // 2
    return sorted(values, key=lambda v: (abs(values.index(v) - at), values.index(v)))


def coordinate_descent(axes: dict[str, list[int]], start: dict[str, int],
                       evaluate: Callable[[list[dict[str, int]]], list[Trial]], budget: int,
                       rounds: int = 3, feasible: Callable[[dict[str, int]], bool] = lambda c: True,
                       prior: tuple = (), start_speed: float = 1.0,
                       skip: Callable[[dict[str, int]], bool] = lambda c: False,
                       base: Optional[dict[str, int]] = None) -> list[Trial]:
    """Vary one knob at a time around the best verified config so far (each axis's values in
    one parallel batch), until a whole round brings nothing or the budget is spent. Each trial
    is scored by its measured speedup over the original. ``evaluate`` may return fewer trials
    than configs (those it pruned unrun, which ``skip`` then names).

    Where the budget cannot hold every axis's values in a round, each axis gets its share of
    what is left, its values nearest the current one first, so that every knob is tried (a
    kernel whose first knobs change its results would otherwise spend the budget on them and
    never try its launch options); a round that left values out is followed by another. Values
    seen to change results (``changes_results``, against ``base``, the original's config) are
    not tried again."""
    done: dict[tuple, Trial] = {_key(t.config): t for t in prior}
    current, best_speed = dict(start), start_speed
    base = dict(start if base is None else base)
    key = _key

    for r in range(rounds + len(axes)):
        improved = trimmed = ran = False
        names = sorted(axes)
        for i, name in enumerate(names):
            bad = changes_results(done.values(), base)
            batch = [c for c in ({**current, name: v} for v in _nearest_first(axes[name], current.get(name)))
                     if key(c) not in done and c not in (start, base) and feasible(c) and not skip(c)
                     and not _hits(c, bad)]
            left = max(0, budget - len(done))
            share = -(-left // (len(names) - i)) if left else 0  # ceil: the axes still to come get theirs
            trimmed |= len(batch) > share
            batch = batch[:share]
            if not batch:
                continue
            for t in evaluate(batch):
                done[key(t.config)] = t
                ran = True
            row = [done[key({**current, name: v})] for v in axes[name] if key({**current, name: v}) in done]
            good = [t for t in row if t.timed_ok]
            if good:
                pick = max(good, key=lambda t: t.speedup)
                if beats(pick.speedup, pick.spread_pct, baseline=best_speed):
                    current, best_speed, improved = dict(pick.config), pick.speedup, True
        if not ran or len(done) >= budget:
            break
        if not trimmed and (not improved or r + 1 >= rounds):
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
ELEMENT_BYTES = {"fp64": 8, "i64": 8, "fp32": 4, "i32": 4, "fp16": 2, "bf16": 2, "i16": 2, "i8": 1, "u8": 1}
"""Bytes per element of a compiled kernel's pointer argument types (``*fp16`` -> 2), for the
shared-memory arithmetic of ``static_limit``."""


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
    "rocm": [(128, 256, 16, 4, 2), (256, 256, 16, 8, 2), (128, 128, 32, 8, 2), (64, 128, 32, 4, 2),
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
    """How many evaluations the runner runs at once (the ``Runner`` protocol's ``parallelism``)."""
    return max(1, int(runner.parallelism))


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
        self.part: Callable[[dict], Optional[dict]] = lambda c: c
        """What of a config can be screened (``screen_part``); None: it is compiled as it runs."""
        self.original: list[KernelResources] = []
        """The original's own launches as compiled for the arch (the screen's control)."""
        self.last: list[EvalResult] = []
        """The evaluations of the last ``check`` (none when nothing was screened)."""

    def check(self, configs: list[dict[str, int]]) -> dict[tuple, tuple[Optional[str], list[KernelResources]]]:
        """``{config key: (why it is pruned or None, its compile reports)}`` for the configs
        that could be screened; the others are missing."""
        self.last = []
        pairs = [(c, self.part(c)) for c in configs]
        pairs = [(c, p) for c, p in pairs if p is not None]
        if not pairs or self.unavailable:
            return {}
        n = min(self.parallel, len(pairs))
        chunks = [pairs[i::n] for i in range(n)]
        results = self.last = self.runner.evaluate_many([
            self.request.with_candidate(None, trials=1, timing=False, aot_arch=self.arch, aot_kernel=self.kernel,
                                        aot_configs=[dict(p) for _, p in chunk]) for chunk in chunks])
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
            for i, (cfg, _) in enumerate(chunk):
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
    return {k.name: k.value for k in site.knobs}


def pick_site(sites: list[LaunchSite], launched: Optional[set[str]] = None) -> LaunchSite:
    """The launch to tune: the first whose kernel runs (when that is known) and that has a
    knob, else the first that runs, else the first."""
    runs = [s for s in sites if launched is None or s.kernel in launched] or sites
    return next((s for s in runs if s.knobs or s.exprs), runs[0])


def screen_part(config: dict, original: dict, hints: tuple = ()) -> Optional[dict]:
    """The literal part of ``config`` (what an ``@triton.autotune`` config or the compile
    screen can hold), or None when it changes a computed knob or the kernel's code. The screen
    passes its rewrites that only hint (``hints``: cache eviction, dot precision), which change
    neither registers nor shared memory much, so that their literal part is still screened."""
    out = {}
    for name, value in config.items():
        if isinstance(value, int) and not isinstance(original.get(name), str):
            out[name] = value
        elif value != original.get(name) and name not in hints:
            return None
    return out


def choose(trials: list[Trial], original: Optional[dict] = None) -> Optional[Trial]:
    """The fastest trial that is verified faster than the original: correct, run, timed, and
    beating it by more than its own timing spread (and at least 1%). Between equally fast
    ones, the one that changes fewest of ``original``'s values."""
    faster = [t for t in trials if t.timed_ok and beats(t.speedup, t.spread_pct)]
    original = original or {}
    return max(faster, key=lambda t: (t.speedup, -sum(original.get(k) != v for k, v in t.config.items())),
               default=None)


def per_shape(trials: list[Trial], original: Optional[dict] = None) -> list[ShapeChoice]:
    """For each timed input case, the verified config that is fastest on it; the original
    (``config=None``) where no config beats it there by more than the spread. Between equally
    fast configs, the one that changes fewest of ``original``'s values."""
    original = original or {}
    good = [t for t in trials if t.timed_ok]
    labels: list[str] = []
    for t in good:
        labels += [c for c in t.case_speedups if c not in labels]
    out = []
    for label in labels:
        best = max((t for t in good if label in t.case_speedups),
                   key=lambda t: (t.case_speedups[label], -sum(original.get(k) != v for k, v in t.config.items())))
        sp = best.case_speedups[label]
        wins = beats(sp, best.spread_pct)
        out.append(ShapeChoice(label, dict(best.config) if wins else None, sp if wins else 1.0))
    return out


def autotune_configs(choices: list[ShapeChoice], original: dict[str, int], trials: list[Trial],
                     limit: int = MAX_AUTOTUNE_CONFIGS) -> list[dict[str, int]]:
    """The few configs an ``@triton.autotune`` should hold: the per-shape winners, most cases
    won first (the original's config where it is still the best for some shape)."""
    wins: dict[tuple, int] = {}
    for c in choices:
        cfg = c.config if c.config is not None else original
        wins[_key(cfg)] = wins.get(_key(cfg), 0) + 1
    overall = {_key(t.config): t.speedup or 0.0 for t in trials if t.timed_ok}
    ranked = sorted(wins, key=lambda k: (-wins[k], -overall.get(k, 1.0)))
    return [dict(k) for k in ranked[:limit]]


def shape_key(text: str, site: LaunchSite, trials: list[Trial]) -> list[str]:
    """The kernel's integer arguments other than strides (sizes like ``n_cols``, ``M``): an
    ``@triton.autotune`` keyed on them tunes once per shape. A pointer in the key would make it
    tune again at every call with new tensors, so the types seen at run time decide (by name;
    by position in results without names); without them, the names, less those the kernel
    uses as pointers."""
    runtime = [name for name, const in site.params if not const]
    names: list[str] = []
    types: list[str] = []
    for t in trials:
        for r in t.resources:
            if r.kernel == site.kernel and r.arg_types:
                types = r.arg_types.split(", ")
                names = r.arg_names.split(", ") if r.arg_names else []
                break
        if types:
            break
    ints = ("i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64")
    sizes = [n for n in runtime if "stride" not in n.lower()]
    if names and len(names) == len(types):
        typed = dict(zip(names, types))
        # a parameter missing from the signature was specialised (an integer equal to 1)
        return [n for n in sizes if typed.get(n, "i32") in ints]
    if len(types) == len(runtime):
        return [n for n, ty in zip(runtime, types) if ty in ints and "stride" not in n.lower()]
    pointers = pointer_params(text, site.kernel)
    return [n for n in sizes if "ptr" not in n.lower() and n not in pointers]


def pointer_params(text: str, kernel: str) -> set[str]:
    """Parameters of ``kernel`` its body uses as pointers: the base of an address sum
    (``X + offs``) or of a load, store or block pointer, and never compared like a size."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        return set()
    params = {a.arg for a in fn.args.args}
    based: set[str] = set()
    compared: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left = node.left
            while isinstance(left, ast.BinOp) and isinstance(left.op, (ast.Add, ast.Sub)):
                left = left.left
            if isinstance(left, ast.Name):
                based.add(left.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                (node.func.attr in ("load", "store", "make_block_ptr", "make_tensor_descriptor")
                 or node.func.attr.startswith("atomic_")):
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg in ("pointer", "base")),
                                                        None)
            if isinstance(first, ast.Name):
                based.add(first.id)
        elif isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                compared |= {n.id for n in ast.walk(side) if isinstance(n, ast.Name)}
    return (based & params) - compared


def _trial(config: dict[str, int], r: EvalResult) -> Trial:
    t = Trial(config=config, status=r.status, correct=r.correct, message=r.message, resources=r.resources,
              phases=dict(r.phases))
    if r.timing:
        t.speedup, t.cand_ms, t.spread_pct = r.timing.speedup, r.timing.cand_ms, r.timing.spread_pct
        t.case_speedups = {c.label: c.timing.speedup for c in r.cases if c.timing}
        roof = roofline(r)
        if roof is not None:
            t.pct_peak, t.peak_basis = roof.pct, roof.basis
    bad = [k for k in r.resources if not k.fits]
    spills = [k for k in r.resources if k.spill_bytes]
    if bad:
        t.pruned = bad[0].error or "does not fit"
    elif spills:
        t.pruned = f"spills {spills[0].spill_bytes} bytes per thread on {spills[0].arch}"
    return t


def _untimed_why(original: Optional[EvalResult]) -> str:
    """Why the original was not timed on a GPU runner ('' when it was, or on the CPU)."""
    if original is None or original.timing is not None or not (original.device and original.device.is_gpu):
        return ""
    return f"the original itself could not be timed there ({original.timing_unavailable or 'no timing'})"


def backend_of(arch: str) -> str:
    """``cuda`` or ``rocm``: whose launch defaults and limits apply to ``arch``."""
    return "rocm" if arch.startswith("gfx") else "cuda"


def tune(runner, request: EvalRequest, arch: str, max_configs: int = 48, seed: int = 0,
         trials_per_case: int = 2, timed: bool = False, emit: str = "constants",
         key: Optional[list[str]] = None, deadline: Optional[Deadline] = None,
         original: Optional[EvalResult] = None, on_plan: Optional[Callable[[dict], None]] = None) -> TuneReport:
    """Tune the launch of ``request.target`` (a built request for the target alone).
    ``timed``: the runner measures speed (a GPU), so large spaces are searched rather than
    sampled. ``emit``: ``constants`` writes the best config into the launch; ``autotune``
    writes an ``@triton.autotune`` with the per-shape winners, keyed on ``key`` (default: the
    kernel's integer size arguments). ``deadline``: the search stops before a batch that would
    start after it (less ``CONFIRM_RESERVE``), keeping its best verified config, and every
    evaluation's phase limits are lowered to the time left. ``original``: the original's own
    evaluation, for its share of the roofline (a search also stops once it is near the roofline).
    ``on_plan``: told once, before the first config runs, what the search will run: ``{"configs":
    n (at most, with "at_most": True, when the search may stop sooner or descends), "space":
    the space's size, "pruned": configs the compile screen ruled out, "batch": configs per
    batch, "parallel": evaluations the runner runs at once}``.

    Find the launch and its knobs; build the space; prune what cannot fit the arch; search;
    judge the trials; write the edit; confirm it on a fresh evaluation."""
    if emit not in EMITS:
        raise ValueError(f"emit must be one of {EMITS}")
    t = _Tuning(Watched(runner, deadline=deadline), request, arch, trials_per_case)
    t.deadline, t.original_roof = deadline, roofline(original)
    t.untimed_why = _untimed_why(original)
    t.on_plan = on_plan or (lambda plan: None)
    t.report.budget_s = round(deadline.left(), 1) if deadline is not None else None
    t.reserve_s = confirm_reserve(t.report.budget_s, original)
    # Before the first batch has measured the pace, the original's own check is the best guess
    # of what one config's evaluation takes (it runs the same test, with one trial more).
    t.prior_s = PRIOR_SHARE * (original.duration_s or 0.0) if deadline is not None and original is not None else 0.0
    if not (t.find_launch(key) and t.never_runs(original) and t.build_space() and t.prune_for_arch()):
        return t.report
    t.search(max_configs, seed, timed)
    best = t.judge(timed, emit)
    if best is None and not t.autotune_gain(emit):
        return t.report
    edit = t.write_edit(emit, best, key)
    if edit is None:
        return t.report
    if deadline is not None:  # the confirmation may use the reserve even past the deadline
        spare = Deadline(max(deadline.at, time.monotonic() + t.reserve_s), deadline.why)
        t.runner = t.runner.within(spare)
    t0 = time.monotonic()
    report = t.confirm(*edit)
    report.confirm_s = round(time.monotonic() - t0, 2)
    conf = roofline(report.confirmation) if report.improved else None
    if conf is not None:
        report.best_pct_peak, report.peak_basis = conf.pct, conf.basis
    return report


class _Tuning:
    """One tuning run's state, step by step (``tune`` reads as the list of steps)."""

    def __init__(self, runner, request: EvalRequest, arch: str, trials_per_case: int):
        self.runner, self.request, self.arch, self.trials_per_case = runner, request, arch, trials_per_case
        self.path, self.wrapper = request.target.path, request.target.symbol
        self.text = request.files[self.path]
        self.backend = backend_of(arch)
        self.defaults = DEFAULT_LAUNCH[self.backend]
        self.uses_dot = "tl.dot" in self.text or ".dot(" in self.text
        self.report = TuneReport(target=str(request.target), kernel="", arch=arch, original={}, space_size=0,
                                 tried=0, trials=[])
        self.feasible: Callable[[dict[str, int]], bool] = lambda c: True
        self.blocks: Optional[dict[str, str]] = None
        self.devices: list = []
        self.untimed_why = ""
        self.reserve_s = 0.0
        """Seconds of the budget kept for the confirmation (``confirm_reserve``)."""
        self.prior_s = 0.0
        """Seconds one config's evaluation is guessed to take before any has run (``PRIOR_SHARE``)."""
        self.cut: list[dict] = []
        """Configs whose evaluation the deadline ended (limits lowered to the time left)."""
        self.started = time.monotonic()
        self.prescreened: Optional[dict] = None
        """The compile screen's verdicts on every config of the search, where it ran once before
        the first batch (``PROGRESS_BATCH``); None: each batch is screened as it comes."""
        self.on_plan: Callable[[dict], None] = lambda plan: None

    # 1. The launch site and its knobs ------------------------------------------------------

    def find_launch(self, key: Optional[list[str]]) -> bool:
        report = self.report
        sites = find_launch_sites(self.text, self.wrapper)
        if not sites:
            report.message = f"{self.wrapper} launches no Triton kernel defined in {self.path}: nothing to tune"
            return False
        site = self.site = pick_site(sites, self.launched(sites))
        if len(sites) > 1:
            report.notes.append(f"{self.wrapper} reaches {len(sites)} launches; tuning {site.kernel} "
                                f"(line {site.line}, in {site.scope})")
        if key:
            unknown = [k for k in key if k not in {n for n, const in site.params if not const}]
            if unknown:
                raise ValueError(f"--key {','.join(unknown)}: not a (non-constexpr) argument of {site.kernel}; "
                                 f"its arguments are {', '.join(n for n, c in site.params if not c)}")
        report.kernel, report.original = site.kernel, original_config(site)
        report.notes += site.notes
        return True

    def never_runs(self, original: Optional[EvalResult]) -> bool:
        """False, with the reason in the report, when the original's own check ran and launched
        no Triton kernel at all (its test raised first, say): no config can be verified (each
        candidate would be rejected for launching nothing), so nothing is searched."""
        if original is None or not original.correct or \
                not any(f.code == "no_triton_launch" for f in original.flags):  # the evaluator's word
            return True
        notes = [f.message for f in original.flags if f.code == "reference_note"]
        self.report.message = (f"{self.report.kernel}: the original's own check launched no Triton kernel"
                               + (f" ({notes[0]})" if notes else "") + "; nothing to tune: a config that never "
                               "runs cannot be verified")
        return False

    def launched(self, sites: list[LaunchSite]) -> Optional[set[str]]:
        """The kernels the original launches when it runs, where that decides which launch to
        tune (several, or one outside the wrapper's own body: a ``backward`` the inputs never
        reach must not be "verified" by not running); None when it need not be asked."""
        if len(sites) == 1 and sites[0].scope == self.wrapper:
            return None
        probe = self.runner.evaluate(self.request.with_candidate(None, trials=1, timing=False))
        return set(probe.launches.get("reference") or []) | set(probe.launches.get("candidate") or [])

    # 2. The space ----------------------------------------------------------------------------

    def build_space(self) -> bool:
        report, site, text = self.report, self.site, self.text
        at, why = find_autotune(text, site.kernel)
        self.at = at
        if at is None:
            self.add_rewrites()
        if why:
            report.notes.append(why)
        if at is not None:
            # An autotuned kernel: each candidate pins one config (the original keeps its list).
            report.notes.append(f"{site.kernel} is autotuned over {len(at.configs)} config(s); each is "
                                "tried on its own, with its neighbours")
            report.original = {"autotune configs": len(at.configs)}
            self.space = autotune_space(at, self.backend, self.uses_dot, site.has_loop)
            self.render = lambda cfg: render_autotune(text, at, cfg)
        else:
            space = search_space(site, self.backend, self.uses_dot)
            if why:  # autotuned over configs it cannot read: the autotuner owns the launch options and
                keep = {rw.name for rw in site.rewrites}  # its keys (passing them at the launch raises)
                space = list({_key(c): c for c in ({k: v for k, v in c.items() if k in keep} for c in space)
                              if c}.values())
                report.notes.append(f"{site.kernel} is autotuned: only program rewrites are tried, the "
                                    "autotuner keeps its launch options")
            self.space = [c for c in space
                          if any(c.get(k) != v for k, v in report.original.items()) or set(c) - set(report.original)]
            self.render = lambda cfg: render_config(text, site, cfg)
        report.space_size = len(self.space)
        if not self.space:
            report.message = (f"{site.kernel}: no tunable launch setting (block sizes, literal or computed, "
                              "num_warps, num_stages) and no program rewrite applies")
            return False
        return True

    def add_rewrites(self) -> None:
        """The kernel's program rewrites for this arch, ``num_ctas`` where the arch has thread
        block clusters (NVIDIA sm_90 and later) and the kernel is a tiled dot, and what the
        original runs with on those axes and on its computed knobs."""
        site = self.site
        kdef = next((n for n in ast.parse(self.text).body if isinstance(n, ast.FunctionDef) and n.name == site.kernel),
                    None)
        if kdef is not None:
            site.rewrites = kernel_rewrites(self.text, kdef, self.backend, self.arch)
            rows = rows_rewrite(self.text, kdef, site)
            if rows is not None:
                site.rewrites.append(rows)
        sm = re.fullmatch(r"sm_(\d+)a?", self.arch)
        if self.backend == "cuda" and sm and int(sm.group(1)) >= 90 and self.uses_dot:
            site.extra_axes = {"num_ctas": [1, 2]}
        self.report.original.update(site.axes_original())
        if site.scope and site.scope != self.wrapper:
            self.report.notes.append(f"{site.kernel} is launched from {site.scope}")

    # 3. What cannot fit the arch, before anything runs ---------------------------------------

    def prune_for_arch(self) -> bool:
        """Matmul-style tiles that cannot fit the arch. The element size comes from the
        original's observed launches (one untimed run, compiled for the arch)."""
        report, site, arch = self.report, self.site, self.arch
        self.blocks = dot_blocks(k.name for k in site.knobs) if self.uses_dot else None
        if self.blocks:
            probe = self.runner.evaluate(self.request.with_candidate(None, trials=1, timing=False, aot_arch=arch))
            report.original_resources = [r for r in probe.resources if r.kernel == site.kernel]
            sizes = [ELEMENT_BYTES.get(t.lstrip("*"), 4) for r in report.original_resources
                     for t in r.arg_types.split(", ") if t.startswith("*")]
            elem = max(sizes) if sizes else 4
            reasons = {}
            for c in self.space:
                why_not = static_limit({**report.original, **c}, self.blocks, arch, elem, self.defaults)
                if why_not:
                    reasons[_key(c)] = why_not
            if reasons:
                self.space = [c for c in self.space if _key(c) not in reasons]
                report.pruned_before = len(reasons)
                report.notes.append(f"pruned {len(reasons)} of {report.space_size} configs before running anything "
                                    f"(tiles over {arch}'s shared memory or registers, {elem}-byte elements), e.g. "
                                    + next(iter(reasons.values())))
                self.feasible = lambda c: _key(c) not in reasons
            if not self.space:
                report.message = f"{site.kernel}: no config fits {arch}"
                return False
        self.screen = Screen(self.runner, self.request, site.kernel, arch, _parallelism(self.runner))
        hints = tuple(rw.name for rw in site.rewrites)
        followers = site.followers()

        def part(c: dict) -> Optional[dict]:
            # What the screen compiles is what runs: a knob's followers take its value.
            p = screen_part(c, report.original, hints)
            for lead, names in followers.items():
                if p is not None and lead in p:
                    p.update(dict.fromkeys(names, p[lead]))
            return p
        self.screen.part = part
        return True

    # 4. The search -----------------------------------------------------------------------------

    def evaluate(self, configs: list[dict[str, int]]) -> list[Trial]:
        """Screen the batch by compiling it for the arch, then run what is left. Returns the run
        configs' trials (the pruned ones go to ``report.screened``)."""
        t0 = time.monotonic()
        if self.prescreened is not None:
            verdicts = self.prescreened
        else:
            verdicts = self.screen.check(configs)
            self._step("screen", len(configs), t0, self.screen.last)
        run = []
        for cfg in configs:
            why, res = verdicts.get(_key(cfg), (None, None))
            if why:
                self.report.screened.append(Trial(config=cfg, status="pruned", correct=False, resources=res,
                                                  pruned=why, message=f"pruned before running: {why}"))
            else:
                run.append(cfg)
        run = self._fits_after_screen(run)
        t1 = time.monotonic()
        if not run:
            return []
        # A screened config's compile report is the screen's; the others are compiled as they run.
        results = self.runner.evaluate_many([
            self.request.with_candidate(self.render(cfg), trials=self.trials_per_case,
                                        aot_arch=None if _key(cfg) in verdicts else self.arch, **self.search_timing)
            for cfg in run])
        self._step("batch", len(run), t1, results)
        self.devices.extend(r.device for r in results if r.device)
        out = []
        for cfg, r in zip(run, results):
            if _key(cfg) in verdicts and not r.resources:
                r.resources = verdicts[_key(cfg)][1]
            if r.status == "timeout" and (r.message or "").startswith("stopped by the "):
                self.cut.append(cfg)  # the budget ended it, not the config: neither tried nor wrong
            else:
                out.append(_trial(cfg, r))
        return out

    def _fits_after_screen(self, run: list[dict]) -> list[dict]:
        """Under a deadline, the configs of ``run`` that the time left after the compile screen
        still holds at the pace measured so far (before any, ``PRIOR_SHARE`` of the original's
        check): a screen of large tiles can take most of a budget (TritonBench-G's
        llama_ff_triton: 25 s of 30), and a batch started after it ran past the budget. The
        others are cut, neither tried nor wrong."""
        if self.search_deadline is None or not run:
            return run
        left = self.search_deadline.left()
        pace = self.per_config_s if self.per_config_s is not None else self.prior_s
        n = 0 if left <= 0 else len(run) if not pace else min(len(run), int(left / pace))
        self.cut.extend(run[n:])
        return run[:n]

    def _step(self, step: str, configs: int, t0: float, results: list[EvalResult]) -> None:
        if not results:
            return
        self.report.timeline.append({
            "step": step, "configs": configs, "start_s": round(t0 - self.started, 2),
            "s": round(time.monotonic() - t0, 2),
            "evals": [{"status": r.status, "duration_s": r.duration_s, **r.phases} for r in results]})

    def search(self, max_configs: int, seed: int, timed: bool) -> None:
        """What the original runs with, on the search axes, is the start. On a GPU a large space
        is explored, then refined by coordinate descent; otherwise it is sampled."""
        report = self.report
        self.search_timing = SEARCH_TIMING if timed else {}
        self._plan_budget(timed)
        t0 = time.monotonic()
        self.axes = search_axes(self.site, self.backend, self.uses_dot)
        self.start = {name: report.original.get(name, self.defaults.get(name, values[len(values) // 2]))
                      for name, values in self.axes.items()}
        seeds = ([c for c in dot_seeds(self.axes, self.blocks, self.start, self.backend) if self.feasible(c)]
                 if self.blocks and self.at is None else [])
        if timed and self.at is None and len(self.space) > max_configs:
            self._explore_then_descend(seeds, max_configs, seed)
        else:
            self._sample(seeds, max_configs, seed)
        report.original_resources = report.original_resources or self.screen.original
        if report.screened:
            report.notes.append(f"{len(report.screened)} config(s) pruned before running by the {self.arch} "
                                f"compile report, e.g. {report.screened[0].pruned}")
        elif self.screen.unavailable:
            report.notes.append(f"no compile screen before running: {self.screen.unavailable}")
        report.tried = len(report.trials)
        if self.devices:
            report.device = self.devices[0].label
        report.timed = any(t.speedup is not None for t in report.trials)
        report.search_s = round(time.monotonic() - t0, 2)
        self._say_stop()

    def _explore_then_descend(self, seeds: list[dict[str, int]], max_configs: int, seed: int) -> None:
        """Explore first (the seeds, then a seeded sample up to half the budget: the knobs of a
        tiled kernel interact, which one-knob moves alone miss), then coordinate descent refines
        from the best verified config found. Between batches, a sampled config holding a value
        seen to change the kernel's results (``changes_results``) gives its place to the next
        one of the seeded order that holds none (``_budgeted``)."""
        report, space, start = self.report, self.space, self.start
        report.seeds = len(seeds)
        n_sample = max(0, max_configs // 2 - len(seeds)) if len(space) > 2 * max_configs else 0
        rest = [c for c in space if c != start and c not in seeds]
        order = random.Random(seed).sample(rest, len(rest))
        explore = seeds[:max_configs] + order[:n_sample]
        self.on_plan({"configs": max_configs, "at_most": True, "space": report.space_size, "pruned": 0,
                      "batch": self.batch, "parallel": _parallelism(self.runner)})
        explored = self._budgeted(explore, spare=order[n_sample:]) if explore else []
        best0 = choose(explored)
        if best0 is not None:
            start, speed0 = dict(best0.config), best0.speedup
        else:
            speed0 = 1.0
        # The descent returns the explored trials first, then its own.
        report.trials = coordinate_descent(self.axes, start, self._budgeted, max_configs, feasible=self.feasible,
                                           prior=tuple(explored), start_speed=speed0, base=self.start,
                                           skip=lambda c: _key(c) in {_key(t.config) for t in report.screened})
        learned = changes_results(report.trials, self.start)
        report.notes.append(
            f"searched {len(report.trials)} of {len(space)} configs: "
            + (f"{len(seeds)} known-good tile shapes for {self.backend}, " if seeds else "")
            + (f"a seeded sample of {n_sample}, " if n_sample else "")
            + "then coordinate descent from " + ("the best of these" if best0 is not None else "the original")
            + (f"; values seen to change the kernel's results were not tried again: "
               + ", ".join(f"{k}={v}" for k, v in sorted(learned, key=str)) if learned else ""))

    def _sample(self, seeds: list[dict[str, int]], max_configs: int, seed: int) -> None:
        report, space = self.report, self.space
        if len(space) > max_configs:
            seeds = [c for c in seeds if c in space]
            report.seeds = len(seeds)
            rest = [c for c in space if c not in seeds]
            space = seeds[:max_configs] + random.Random(seed).sample(rest, max_configs - len(seeds[:max_configs]))
            report.notes.append(f"searched a seeded random sample of {max_configs} of {report.space_size} configs"
                                + (f" ({report.space_size - report.pruned_before} after pruning)"
                                   if report.pruned_before else "")
                                + (f", {len(seeds)} of them known-good tile shapes for {self.backend}" if seeds else ""))
        if self.prescreen:
            space = self._prescreen(space)
        self.on_plan({"configs": len(space), "at_most": self.deadline is not None or bool(self.search_timing), "space": report.space_size,
                      "pruned": len(report.screened), "batch": min(self.batch or len(space), len(space)),
                      "parallel": _parallelism(self.runner)})
        report.trials = self._budgeted(space)

    def _prescreen(self, space: list[dict[str, int]]) -> list[dict[str, int]]:
        """One compile screen of every config before the first batch: the configs it rules out
        go to ``report.screened``; the others are returned, in order, to run."""
        t0 = time.monotonic()
        self.prescreened = self.screen.check(space)
        self._step("screen", len(space), t0, self.screen.last)
        run = []
        for cfg in space:
            why, res = self.prescreened.get(_key(cfg), (None, None))
            if why:
                self.report.screened.append(Trial(config=cfg, status="pruned", correct=False, resources=res,
                                                  pruned=why, message=f"pruned before running: {why}"))
            else:
                run.append(cfg)
        return run

    def _plan_budget(self, timed: bool) -> None:
        """How the search stops early: before a batch that would start past the deadline (less
        the confirmation's reserve), or once near the roofline. Either needs batches: no larger
        than the runner runs at once (twice that when timed, so compiles overlap timing), and
        under a deadline no larger than the time left holds (``_batch_size``)."""
        self.search_deadline = None
        self.ran: list[Trial] = []
        self.report.original_pct_peak = self.original_roof.pct if self.original_roof else None
        self.report.peak_basis = self.original_roof.basis if self.original_roof else None
        if self.deadline is not None:
            self.search_deadline = self.deadline.sooner(self.reserve_s)
        n = _parallelism(self.runner)
        self.prescreen = self.deadline is None and not timed
        self.batch = PROGRESS_BATCH * n if self.prescreen else (2 * n if timed else n)
        self.per_config_s: Optional[float] = None
        """Seconds of search per config, as measured so far (under a deadline)."""

    def _budgeted(self, configs: list[dict[str, int]], spare: Optional[list[dict[str, int]]] = None) -> list[Trial]:
        """``evaluate`` in batches, stopping before one when the time is spent or the best
        verified config so far (or the original) is near the roofline. Returns the trials run.
        With ``spare`` (more configs, in order), a config still to run that holds a value seen to
        change results is replaced by the next spare one that holds none; and once more of the
        configs run have failed verification than passed it, by one that moves at most one knob
        that can change results (so that its failure, if it fails, says which value was wrong)."""
        out: list[Trial] = []
        pending = list(configs)
        spare_left = iter(spare) if spare is not None else None
        while pending:
            if self._stop_now():
                break
            if spare_left is not None and self.ran:
                pending = self._without_failing(pending, spare_left)
                if not pending:
                    break
            size = self._batch_size(len(pending))
            t0 = time.monotonic()
            trials = self.evaluate(pending[:size])
            if self.search_deadline is not None and trials:
                self.per_config_s = (time.monotonic() - t0) / len(trials)
            pending = pending[size:]
            out += trials
            self.ran += trials
        return out

    def _without_failing(self, pending: list[dict], spare_left) -> list[dict]:
        """``pending`` less the configs that the trials run so far say to leave (``_budgeted``),
        each replaced by the next config of ``spare_left`` (an iterator) that is not to leave."""
        bad = changes_results(self.ran, self.start)
        strict = sum(t.status == "mismatch" for t in self.ran) > sum(t.correct for t in self.ran)

        def keep(c):
            return not _hits(c, bad) and (not strict or _moves(c, self.start) <= 1)

        kept = [c for c in pending if keep(c)]
        while len(kept) < len(pending):
            c = next(spare_left, None)
            if c is None:
                break
            if keep(c):
                kept.append(c)
        return kept

    def _batch_size(self, remaining: int) -> int:
        """The next batch's size. Under a deadline a batch must end before it: the first is what
        the runner runs at once; later ones as many configs as the time left holds at the pace
        measured so far (a GPU shared with other tasks makes each config slower), at least one."""
        if not self.batch:
            return max(1, remaining)
        if self.search_deadline is None:
            return self.batch
        if self.per_config_s is None:
            return min(remaining, max(1, min(FIRST_BATCH, _parallelism(self.runner))))
        fits = int(self.search_deadline.left() / max(self.per_config_s, 1e-3))
        return min(remaining, self.batch, max(1, fits))

    def _stop_now(self) -> bool:
        report = self.report
        if report.stopped is None:
            if self.search_deadline is not None and (
                    self.search_deadline.passed or  # or not even one config fits at the pace measured
                    (self.per_config_s is not None and self.search_deadline.left() < self.per_config_s) or
                    (self.per_config_s is None and self.search_deadline.left() < self.prior_s)):
                report.stopped = self.deadline.why
            else:
                best = choose(self.ran)
                roof = (Roofline(best.pct_peak, best.peak_basis or "", 1)
                        if best is not None and best.pct_peak is not None else self.original_roof)
                if roof is not None and roof.pct >= ROOFLINE_STOP_PCT:
                    report.stopped = "roofline"
            if report.stopped is not None:
                report.stopped_after = len(self.ran)
        return report.stopped is not None

    def _say_stop(self) -> None:
        report = self.report
        if report.stopped == "roofline":
            best = choose(report.trials)
            who = (f"the best verified config ({config_text(best.config)})" if best is not None and
                   best.pct_peak is not None else "the original")
            pct = best.pct_peak if best is not None and best.pct_peak is not None else report.original_pct_peak
            report.notes.append(f"the search stopped after {report.stopped_after} config(s): {who} runs at "
                                f"{pct:.0f}% of its roofline (the search stops at {ROOFLINE_STOP_PCT:.0f}%)")
        elif report.stopped is not None:
            report.notes.append(f"the search stopped on its {report.stopped} after {report.stopped_after} config(s) "
                                f"({report.search_s:.0f} s of {report.budget_s:.0f} s); the best verified config so "
                                "far is what is judged")

    # 5. The judgement --------------------------------------------------------------------------

    def judge(self, timed: bool, emit: str) -> Optional[Trial]:
        """The fastest config verified faster than the original, or None with the report's
        message saying why there is none (nothing timed, nothing faster)."""
        report, kernel = self.report, self.site.kernel
        verified = sum(t.correct for t in report.trials)
        self.unrun = f", {len(report.screened)} more pruned before running" if report.screened else ""
        if self.cut:
            why = self.deadline.why if self.deadline else "budget"
            self.unrun += f", {len(self.cut)} more cut short by the {why} before they finished"
            report.notes.append(f"{len(self.cut)} config(s) were cut short by the {why}: neither verified nor wrong")
        report.emit = emit
        as_run = {**self.defaults, **report.original}  # what the original runs with, defaults included
        best = choose(report.trials, as_run)
        if report.timed:
            # An @triton.autotune holds literal values only: its per-shape winners are chosen
            # among the configs that keep the computed knobs and the kernel's code as written.
            report.per_shape = per_shape([t for t in report.trials if emit != "autotune"
                                          or screen_part(t.config, report.original) is not None], as_run)
        if self.cut and report.stopped is None and self.deadline is not None:
            report.stopped, report.stopped_after = self.deadline.why, len(report.trials)
        if not report.trials and report.stopped:
            report.message = (f"{kernel}: the original stays: " + (
                f"it already runs at {report.original_pct_peak:.0f}% of its roofline, so no config was tried"
                if report.stopped == "roofline" else
                f"the {report.stopped} ended the {len(self.cut)} config(s) it had started before any finished"
                if self.cut else f"the {report.stopped} was spent before any config ran"))
        elif not report.timed and timed:
            # A GPU runner, but nothing was timed: no config reproduced the original's outputs.
            first = next((t for t in report.trials if not t.correct), None)
            report.message = (f"{kernel}: {verified} of {report.tried} configs verified correct{self.unrun}, so "
                              "nothing was timed and the original stays"
                              + (f"; first failure: {first.status}: {first.message[:300]}" if first else ""))
        elif not report.timed and self.untimed_why:
            report.message = (f"{kernel}: {verified} of {report.tried} configs verified correct on "
                              f"{report.device or 'the runner'}{self.unrun}; {self.untimed_why}, so nothing is "
                              "offered as faster")
        elif not report.timed:
            report.message = (f"{kernel}: {verified} of {report.tried} configs verified correct on "
                              f"{report.device or 'the runner'}{self.unrun}; no timing here, so nothing is offered as "
                              "faster: timing needs a GPU. Run the same command on a GPU box, or point it at "
                              "a runner there: --runner http://HOST:8765 (geak-runner serve on that box)")
        elif best is None and not self.autotune_gain(emit):
            report.message = (f"{kernel}: no config beats the original ({verified} of {report.tried} "
                              f"verified correct{self.unrun}; {NONE_FASTER})")
        if report.stopped in ("task budget", "time budget") and report.trials:
            self.unrun += f"; the search stopped on its {report.stopped} after {report.stopped_after} config(s)"
            report.message += f" (the search stopped on its {report.stopped} after {report.stopped_after} config(s))"
        if best is not None and best.pct_peak is not None:
            report.best_pct_peak, report.peak_basis = best.pct_peak, best.peak_basis
        return best if report.timed else None

    def autotune_gain(self, emit: str) -> bool:
        """With ``emit="autotune"``: some input shape has a config that beats the original there."""
        return self.report.timed and emit == "autotune" and any(c.config is not None for c in self.report.per_shape)

    # 6. The edit -------------------------------------------------------------------------------

    def write_edit(self, emit: str, best: Optional[Trial], key: Optional[list[str]]) -> Optional[tuple[str, str]]:
        """``(the edited file, how to say it)`` in the form asked for; None (and the report's
        message says why) when it cannot be written."""
        report, site, text, at = self.report, self.site, self.text, self.at
        if emit != "autotune":
            report.best, report.search_speedup = best.config, best.speedup
            return self.render(best.config), self.label(best.config)
        names = sorted({n for t in report.trials for n in t.config})
        # An autotuned kernel's original is its own list, which is not one of the configs.
        original_full = {} if at is not None else {
            n: report.original.get(n, self.defaults.get(n)) for n in names if n in report.original or n in self.defaults}
        configs = [c for c in autotune_configs(report.per_shape, original_full, report.trials) if c]
        if not self.autotune_gain(emit) or not configs:
            configs = [best.config]  # faster overall, but no single shape by a clear margin
        literal = [screen_part(c, report.original) for c in configs]
        if any(c is None for c in literal) or not any(literal):
            return self.computed_instead(best)
        configs = report.autotune_configs = [c for c in literal if c]
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
            return None
        report.best = {"autotune configs": len(configs)}
        report.search_speedup = best.speedup if best is not None else None
        return source, f"@triton.autotune over {len(configs)} config(s) keyed on {report.autotune_key or 'its key'}"

    def computed_instead(self, best: Optional[Trial]) -> Optional[tuple[str, str]]:
        """The winners change a computed knob or the kernel's program, which an
        ``@triton.autotune`` cannot hold (its configs are literal values): the best config is
        written as it is, its computed block sizes still following the shape."""
        if best is None:
            self.report.message = (f"{self.site.kernel}: the per-shape winners change a computed block size or "
                                   "the kernel's code, which @triton.autotune cannot hold; use --emit constants")
            return None
        self.report.notes.append("written as one config, not an @triton.autotune: the best config changes a "
                                 "computed block size or the kernel's code, which autotune configs cannot hold")
        self.report.emit = "constants"
        return self.write_edit("constants", best, None)

    # 7. The confirmation -----------------------------------------------------------------------

    def label(self, config: dict) -> str:
        """``BLOCK_M=64, num_warps=8``; a knob the launch passes under several keywords names
        them all (``BLOCK_M=BLOCK_N=64``): one value, written once."""
        followers = self.site.followers()
        return ", ".join("=".join([k, *followers.get(k, [])]) + f"={v}" for k, v in sorted(config.items()))

    def confirm(self, source: str, label: str) -> TuneReport:
        """A fresh evaluation of the edited file, with the full timing budget: the best of many
        noisy measurements is biased upwards, so only this one's speedup lets the edit be offered."""
        report, kernel = self.report, self.site.kernel
        (conf,) = self.runner.evaluate_many([
            self.request.with_candidate(source, trials=max(3, self.trials_per_case), aot_arch=self.arch)])
        report.confirmation = conf
        sp = conf.verified_speedup()
        verified = sum(t.correct for t in report.trials)
        if sp is None:
            report.best = None
            measured = conf.speedup
            why = (f"measured {measured:.3f}x on confirmation" if measured is not None and conf.correct
                   else f"failed on confirmation: {conf.status}: {conf.message}")
            report.message = (f"{kernel}: {label} looked faster in the search"
                              + (f" ({report.search_speedup:.3f}x)" if report.search_speedup else "")
                              + f" but {why}; the original stays")
            return report
        report.best_speedup, report.source = sp, source
        report.message = (f"{kernel}: {sp:.2f}x faster with {label} (confirmed on a fresh "
                          f"evaluation; {verified} of {report.tried} configs verified correct{self.unrun})")
        return report
