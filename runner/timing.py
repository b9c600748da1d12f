"""GPU timing of a reference and a candidate, interleaved, in one process, on the same inputs.

Method (per input case):
1. Warm-up: both sides run alternately for ``warmup_ms`` (at least 3 calls each) after the
   correctness trials already compiled and autotuned them.
2. Repetitions: enough to fill ``rep_ms`` (between ``min_reps`` and ``max_reps``). Each rep
   flushes the L2 (writes a buffer twice the cache size), records a start event, calls the
   function, records an end event. The order alternates ABBA so drift hits both sides alike.
3. Median of the per-rep times; spread = half the inter-quartile range, as % of the median.
4. Kernels shorter than ``cuda_graph_below_us`` are launch-bound under event timing, so both
   sides are also captured in a CUDA graph of several calls and timed by replay (no L2 flush
   there: such kernels' data lives in L2 anyway); that figure is reported when capture works.
5. A wall-clock cross-check (device-wide synchronize around a batch of calls) catches work on
   streams the events never saw.

The timer functions were saved when this module was imported, before any user code: a
candidate that replaces them changes nothing here (and is caught by the integrity check).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from .guards import perf_counter

_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_synchronize = torch.cuda.synchronize
_CUDAGraph = torch.cuda.CUDAGraph
_graph_ctx = torch.cuda.graph


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


def time_pair(ref: Callable[[], Any], cand: Callable[[], Any], *, warmup_ms: float, rep_ms: float,
              min_reps: int, max_reps: int, flush_bytes: int, flush_l2: bool,
              cuda_graph_below_us: float) -> PairTiming:
    fns = {"ref": ref, "cand": cand}
    # Warm-up, alternating, until warmup_ms of device time has passed on each side.
    est = {}
    for side, fn in fns.items():
        fn()
    _synchronize()
    for side, fn in fns.items():
        est[side] = max(_event_time(fn, 3), 1e-4)
    for side, fn in fns.items():
        n = max(3, min(1000, int(warmup_ms / est[side])))
        est[side] = max(_event_time(fn, n), 1e-4)

    reps = int(rep_ms / (est["ref"] + est["cand"]))
    reps = max(min_reps, min(max_reps, reps))
    flush = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device="cuda") if flush_l2 else None
    events = {s: [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(reps)] for s in fns}
    order = ["ref", "cand"]
    for i in range(reps):
        for side in (order if i % 2 == 0 else order[::-1]):
            if flush is not None:
                flush.zero_()
            start, end = events[side][i]
            _record(start)
            fns[side]()
            _record(end)
    _synchronize()
    samples = {s: [_elapsed(a, b) for a, b in events[s]] for s in fns}
    del flush
    method, note = "events", None
    ref_ms, ref_sp = _median_spread(samples["ref"])
    cand_ms, cand_sp = _median_spread(samples["cand"])

    if min(ref_ms, cand_ms) * 1e3 < cuda_graph_below_us:
        calls = max(1, min(100, int(math.ceil(0.2 / max(min(ref_ms, cand_ms), 1e-3)))))
        try:
            g = _graph_time(fns, calls, max(min_reps, 20))
            ref_ms, ref_sp = _median_spread(g["ref"])
            cand_ms, cand_sp = _median_spread(g["cand"])
            method = "cuda_graph"
        except Exception as e:  # capture can fail (host syncs, allocations, CPU work in fn)
            note = f"CUDA-graph timing unavailable ({type(e).__name__}: {str(e)[:120]}); " \
                   "event timing of a launch-bound kernel includes launch overhead"
            try:
                _synchronize()
            except Exception:
                pass

    wall_calls = max(5, min(200, int(50 / max(est["ref"], est["cand"]))))
    ref_wall = _wall_time(ref, wall_calls)
    cand_wall = _wall_time(cand, wall_calls)
    return PairTiming(ref_ms=ref_ms, cand_ms=cand_ms, ref_spread_pct=ref_sp, cand_spread_pct=cand_sp,
                      reps=reps, method=method, ref_wall_ms=ref_wall, cand_wall_ms=cand_wall, note=note)


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
