"""GPU timing of a reference and a candidate, interleaved, in one process, on the same inputs.

Method (per input case):
1. Warm-up: both sides run alternately (two rounds) for about ``warmup_ms`` in all (at least 3
   calls each per round) after the correctness trials already compiled and autotuned them.
2. Repetitions: enough to fill ``rep_ms`` (between ``min_reps`` and ``max_reps``). Each rep
   flushes the L2 (writes a buffer twice the cache size), keeps the GPU busy with a short spin
   kernel while the host enqueues the start event, the call and the end event (so the events
   measure the device's work, not the host's launch latency), then records them. The order
   alternates ABBA so drift hits both sides alike.
3. Median of the per-rep times; spread = half the inter-quartile range, as % of the median.
4. A three-rep probe measures each side's device time first. Kernels shorter than
   ``cuda_graph_below_us`` are timed instead by replaying a CUDA graph of several calls (no L2
   flush there: such kernels' data lives in L2 anyway); if capture fails, by events.
5. A wall-clock cross-check (device-wide synchronize around a batch of calls) catches work on
   streams the events never saw.

The timer functions were saved when this module was imported, before any user code: a
candidate that replaces them changes nothing here (and is caught by the integrity check).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .guards import perf_counter

_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_synchronize = torch.cuda.synchronize
_CUDAGraph = torch.cuda.CUDAGraph
_graph_ctx = torch.cuda.graph
_sleep = getattr(torch.cuda, "_sleep", None)
_cycles_per_us: Optional[float] = None


def _spin_cycles_per_us() -> float:
    """Calibrate torch.cuda._sleep once per process (0 if it is unavailable)."""
    global _cycles_per_us
    if _cycles_per_us is None:
        try:
            _sleep(1000)
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(start)
            _sleep(2_000_000)
            _record(end)
            _synchronize()
            _cycles_per_us = 2_000_000 / (_elapsed(start, end) * 1e3)
        except Exception:
            _cycles_per_us = 0.0
    return _cycles_per_us


def _host_us(fn: Callable[[], Any], calls: int = 5) -> float:
    """Host time to enqueue one call (no synchronisation inside)."""
    _synchronize()
    t0 = perf_counter()
    for _ in range(calls):
        fn()
    t = (perf_counter() - t0) * 1e6 / calls
    _synchronize()
    return t


@dataclass
class PairTiming:
    ref_ms: float
    cand_ms: float
    ref_spread_pct: float
    cand_spread_pct: float
    reps: int
    method: str
    ref_wall_ms: float
    cand_wall_ms: float
    note: Optional[str] = None
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds of each step of this measurement: warmup, calibrate, probe, measure, wall_check."""


def _median_spread(samples: list[float]) -> tuple[float, float]:
    med = statistics.median(samples)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        spread = (q[2] - q[0]) / 2
    else:
        spread = (max(samples) - min(samples)) / 2
    return med, (100.0 * spread / med if med > 0 else 0.0)


def _event_time(fn: Callable[[], Any], calls: int) -> float:
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _record(start)
    for _ in range(calls):
        fn()
    _record(end)
    _synchronize()
    return _elapsed(start, end) / calls


def _wall_time(fn: Callable[[], Any], calls: int) -> float:
    _synchronize()
    t0 = perf_counter()
    for _ in range(calls):
        fn()
    _synchronize()
    return (perf_counter() - t0) * 1e3 / calls


def _graph_time(fns: dict[str, Callable[[], Any]], calls_per_graph: int, reps: int) -> dict[str, list[float]]:
    graphs = {}
    for side, fn in fns.items():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm the allocator outside the capture
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        g = _CUDAGraph()
        with _graph_ctx(g):
            for _ in range(calls_per_graph):
                fn()
        graphs[side] = g
    for g in graphs.values():
        for _ in range(3):
            g.replay()
    _synchronize()
    out: dict[str, list[float]] = {s: [] for s in fns}
    sides = list(fns)
    for i in range(reps):
        order = sides if i % 2 == 0 else sides[::-1]
        for side in order:
            s, e = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(s)
            graphs[side].replay()
            _record(e)
            out[side].append((s, e))
    _synchronize()
    return {side: [_elapsed(s, e) / calls_per_graph for s, e in pairs] for side, pairs in out.items()}


def _end_failed_capture() -> None:
    """A capture that fails part-way (a host sync or an autotuner's first benchmark in the
    captured call) leaves torch's CUDA generator marked as capturing: the next ``torch.randn``
    on the GPU raises "Offset increment outside graph capture encountered unexpectedly", and the
    check after timing would call the candidate wrong for the evaluator's own attempt. A capture
    that completes ends that state."""
    try:
        _synchronize()
    except Exception:
        pass
    try:
        x = torch.zeros(1, device="cuda")
        g = _CUDAGraph()
        with _graph_ctx(g):
            x.add_(1)
        del g
        _synchronize()
    except Exception:
        pass


def _event_reps(fns: dict, reps: int, flush, spin: dict) -> dict[str, list[float]]:
    """``reps`` interleaved (ABBA) event-timed calls per side, each after an L2 flush and a spin."""
    events = {s: [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(reps)] for s in fns}
    order = list(fns)
    for i in range(reps):
        for side in (order if i % 2 == 0 else order[::-1]):
            if flush is not None:
                flush.zero_()
            if spin:
                _sleep(spin[side])
            start, end = events[side][i]
            _record(start)
            fns[side]()
            _record(end)
    _synchronize()
    return {s: [_elapsed(a, b) for a, b in events[s]] for s in fns}


def time_pair(ref: Callable[[], Any], cand: Callable[[], Any], *, warmup_ms: float, rep_ms: float,
              min_reps: int, max_reps: int, flush_bytes: int, flush_l2: bool,
              cuda_graph_below_us: float) -> PairTiming:
    fns = {"ref": ref, "cand": cand}
    steps: dict[str, float] = {}
    mark = [perf_counter()]

    def done(name: str) -> None:
        now = perf_counter()
        steps[name] = steps.get(name, 0.0) + now - mark[0]
        mark[0] = now

    # Warm-up: the sides alternate in two rounds until about warmup_ms has passed in all
    # (back-to-back calls, at least 3 per side and round). The correctness trials just ran both
    # on the device, so this brings clocks and caches to a steady state; it is not a first run.
    est = {}
    for side, fn in fns.items():
        fn()
    _synchronize()
    for side, fn in fns.items():
        est[side] = max(_event_time(fn, 3), 1e-4)
    for _ in range(2):
        for side, fn in fns.items():
            n = max(3, min(500, int(warmup_ms / 4 / est[side])))
            est[side] = max(_event_time(fn, n), 1e-4)
    done("warmup")

    flush = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device="cuda") if flush_l2 else None
    # Spin long enough to cover the host's enqueue of (start, call, end), with margin.
    rate = _spin_cycles_per_us()
    spin_us = {s: min(2000.0, 2.0 * _host_us(fn) + 20.0) for s, fn in fns.items()}
    spin = {s: int(rate * us) for s, us in spin_us.items()} if rate else {}
    done("calibrate")
    # A short probe of device time per call decides the method and the number of reps.
    t0 = perf_counter()
    probe = _event_reps(fns, 3, flush, spin)
    probe_wall_ms = (perf_counter() - t0) * 1e3 / 3
    done("probe")
    dev = {s: statistics.median(v) for s, v in probe.items()}
    method, note, reps = "events", None, 0
    ref_ms = cand_ms = ref_sp = cand_sp = 0.0

    if min(dev.values()) * 1e3 < cuda_graph_below_us:
        calls = max(1, min(100, int(math.ceil(0.2 / max(min(dev.values()), 1e-3)))))
        reps = max(min_reps, 20)
        try:
            g = _graph_time(fns, calls, reps)
            ref_ms, ref_sp = _median_spread(g["ref"])
            cand_ms, cand_sp = _median_spread(g["cand"])
            method = "cuda_graph"
        except Exception as e:  # capture can fail (host syncs, allocations, CPU work in fn)
            note = f"CUDA-graph timing unavailable ({type(e).__name__}: {str(e)[:120]}); timed with events"
            _end_failed_capture()
    if method == "events":
        # rep_ms is the wall budget of the loop, flushes and spins included.
        reps = max(min_reps, min(max_reps, int(rep_ms / max(probe_wall_ms, 1e-3))))
        samples = _event_reps(fns, reps, flush, spin)
        ref_ms, ref_sp = _median_spread(samples["ref"])
        cand_ms, cand_sp = _median_spread(samples["cand"])
    del flush
    done("measure")

    # The cross-check spends about half of rep_ms per side (50 ms at the default 100).
    wall_calls = max(5, min(200, int(max(rep_ms / 2, 5.0) / max(est["ref"], est["cand"]))))
    ref_wall = _wall_time(ref, wall_calls)
    cand_wall = _wall_time(cand, wall_calls)
    done("wall_check")
    return PairTiming(ref_ms=ref_ms, cand_ms=cand_ms, ref_spread_pct=ref_sp, cand_spread_pct=cand_sp,
                      reps=reps, method=method, ref_wall_ms=ref_wall, cand_wall_ms=cand_wall, note=note,
                      steps=steps)


def hidden_work(t: PairTiming) -> Optional[str]:
    """A candidate whose device-wide wall time far exceeds its event time (more than the
    reference's launch overhead explains) did work the events did not see."""
    ref_over = max(t.ref_wall_ms - t.ref_ms, 0.0)
    unexplained = t.cand_wall_ms - t.cand_ms - ref_over
    if unexplained > max(0.5 * t.cand_wall_ms, 0.02) and t.cand_wall_ms > 1.5 * t.cand_ms:
        return (f"the candidate's events show {t.cand_ms:.4f} ms per call, but the device stays busy "
                f"{t.cand_wall_ms:.4f} ms per call (the reference: {t.ref_ms:.4f} / "
                f"{t.ref_wall_ms:.4f} ms): work on a stream or thread the timer does not see?")
    return None
