"""The tuner against time and the roofline: a task budget stops the search between batches and
keeps the best verified config, a search stops near the roofline, the roofline arithmetic, and
``geak bench --time-budget`` stopping a tuning task in flight.

A fake GPU runner stands in for the evaluator here (no kernel runs): it times each config by a
cost model and takes a fixed time per batch, so these tests are about the search's decisions
and clocks only; correctness checking is tested with the real runner in test_tune.py."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest

from agent.deadline import Deadline
from agent.watch import Watched
from agent.roofline import ROOFLINE_STOP_PCT, pct_text, roofline
from agent.tune.tuner import tune
from conftest import ADD_RELU, Project
from runner.schema import CaseResult, CaseTiming, DeviceInfo, EvalResult, Limits, Timing

H200 = DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90", peak_bandwidth_gbs=4800.0)


def _block(text):
    if text is None:
        return 256
    return int(re.search(r"BLOCK=(\d+)", text.split("def add_relu(")[1]).group(1))


class FakeGpu:
    """Times a config by ``cost(block, warps)`` ms against the original's ``cost(256, 4)``; each
    batch takes ``batch_s`` seconds; moves ``nbytes`` per case (bandwidth share on an H200)."""

    device, parallelism = "cuda", 2

    def __init__(self, cost, batch_s=0.0, nbytes=4_800_000, wrong=()):
        self.cost, self.batch_s, self.nbytes, self.wrong = cost, batch_s, nbytes, set(wrong)
        self.requests, self.batches = [], 0
        self.lock = threading.Lock()

    def device_info(self):
        return H200

    def evaluate(self, req):
        return self.evaluate_many([req])[0]

    def evaluate_many(self, reqs):
        with self.lock:
            self.batches += 1
            self.requests += reqs
        time.sleep(self.batch_s)
        return [self.one(r) for r in reqs]

    def one(self, req):
        if req.options.aot_configs:
            return EvalResult(status="ok", correct=True, message="", device=H200)  # no compile screen here
        text = req.candidate_files.get(req.target.path) if req.candidate is not None else None
        block = _block(text)
        m = re.search(r"num_warps=(\d+)", (text or "").split("def add_relu(")[-1])
        warps = int(m.group(1)) if m else 4
        if block in self.wrong:
            return EvalResult(status="mismatch", correct=False, message="wrong", device=H200)
        ref, cand = self.cost(256, 4), self.cost(block, warps)
        bw = 100.0 * self.nbytes / (cand * 1e-3) / (H200.peak_bandwidth_gbs * 1e9)
        case = CaseResult(index=0, label="n=2048", shapes="", trials=1, passed=True, timing=CaseTiming(
            ref_ms=ref, cand_ms=cand, speedup=ref / cand, ref_spread_pct=0.5, cand_spread_pct=0.5, reps=10,
            method="events", bytes_moved=self.nbytes, bytes_basis="tensors", cand_bw_pct_peak=bw))
        return EvalResult(status="ok", correct=True, message="ok", device=H200, cases=[case], timing=Timing(
            ref_ms=ref, cand_ms=cand, speedup=ref / cand, speedup_geomean=ref / cand, spread_pct=0.5,
            method="events", cases_timed=1))


def _cost(block, warps):  # bigger blocks are faster: 1024 is best (0.5 ms); the original 1.0 ms
    return {64: 1.6, 128: 1.3, 256: 1.0, 512: 0.7, 1024: 0.5}[block] * (1.0 + 0.01 * abs(warps - 4))


def _small_is_fast(block, warps):  # the first configs searched (BLOCK=64) are the fastest
    return _cost({64: 1024, 128: 512, 256: 256, 512: 128, 1024: 64}[block], warps)


def test_roofline_is_the_time_weighted_binding_roof_and_unknown_is_not_guessed():
    r = EvalResult(status="ok", correct=True, message="", cases=[
        CaseResult(0, "small", "", timing=CaseTiming(1.0, 1.0, 1.0, 0, 0, 1, "events", cand_bw_pct_peak=20.0,
                                                      bytes_basis="get_bytes")),
        CaseResult(1, "big", "", timing=CaseTiming(3.0, 3.0, 1.0, 0, 0, 1, "events", cand_bw_pct_peak=80.0,
                                                    bytes_basis="get_bytes")),
        CaseResult(2, "skipped", "", skipped="too large")])
    roof = roofline(r)
    assert roof.pct == pytest.approx((1 * 20 + 3 * 80) / 4) and roof.basis == "bandwidth" and roof.cases == 2
    assert pct_text(roof) == "65% of peak bandwidth"
    # Bytes counted from the tensors' sizes: a lower bound, and said so.
    r.cases[0].timing.bytes_basis = "tensors"
    assert roofline(r).basis == "bandwidth_lower_bound" and "at least" in pct_text(roofline(r))
    # A compute-bound case counts at its FLOP/s share, the roof that binds it.
    r.cases[1].timing.cand_flops_pct_peak = 95.0
    assert roofline(r).pct == pytest.approx((1 * 20 + 3 * 95) / 4) and roofline(r).basis == "flops"
    # No bytes or FLOPs known (or an unknown GPU): unknown, not zero.
    bare = EvalResult(status="ok", correct=True, message="", cases=[
        CaseResult(0, "c", "", timing=CaseTiming(1.0, 1.0, 1.0, 0, 0, 1, "events"))])
    assert roofline(bare) is None and pct_text(roofline(bare)) == "unknown" and roofline(None) is None


def test_deadline_lowers_every_phase_limit_to_the_time_left(tmp_path):
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    req.options.limits = Limits(import_s=120, run_s=300, timing_s=300, wait_s=600)
    capped, lowered = Deadline.after(30).limit(req)
    lim = capped.options.limits
    assert lowered and 28 < lim.import_s <= 30
    assert lim.run_s == lim.import_s == lim.timing_s == lim.wait_s == lim.total_s
    assert req.options.limits.run_s == 300  # the caller's request is left as it was
    req.options.limits.total_s = 900
    same, lowered = Deadline.after(1000).limit(req)
    assert not lowered and same is req
    with pytest.raises(ValueError, match="positive number of seconds"):
        Deadline.after(0, "task budget")

    class Slow:
        def evaluate_many(self, reqs):
            return [EvalResult(status="timeout", correct=False, message="run phase over its limit") for _ in reqs]

    br = Watched(Slow(), deadline=Deadline.after(10, "task budget"))
    (r,) = br.evaluate_many([req])
    assert br.cut == 1 and r.message.startswith("stopped by the task budget")


def test_a_task_budget_stops_the_search_between_batches_and_keeps_the_verified_best(tmp_path):
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    gpu = FakeGpu(_cost, batch_s=0.4)
    t0 = time.monotonic()
    # A budget shorter than the search needs (it converges after about 9 configs, 3 batches).
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True, deadline=Deadline.after(3.0,
                                                                                                     "task budget"))
    took = time.monotonic() - t0
    assert report.stopped == "task budget" and report.stopped_after == report.tried < report.space_size
    # Batches sized to end before the deadline: the first two configs (the pace), the later ones
    # what the time left holds at the measured pace.
    assert report.tried >= 2
    assert took < 3.0 + 0.5  # the confirmation ran inside the budget's reserve
    # The best config found so far was confirmed and offered; nothing unverified is.
    assert report.improved and report.confirmation is not None and report.confirmation.correct
    assert report.best in [t.config for t in report.trials if t.correct]
    assert "stopped on its task budget after" in report.message
    assert report.search_s is not None and report.search_s <= took and report.confirm_s is not None
    # Every evaluation ran with phase limits no longer than the time that was left.
    assert all(r.options.limits.run_s <= 3.0 for r in gpu.requests)


def test_a_task_budget_too_short_for_any_batch_keeps_the_original(tmp_path):
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    report = tune(FakeGpu(_cost), req, "sm_90", max_configs=8, trials_per_case=1, timed=True,
                  deadline=Deadline.after(0.5, "task budget"))
    assert report.stopped == "task budget" and report.tried == 0 and not report.improved
    assert "task budget was spent before any config ran" in report.message


def test_the_search_stops_once_the_best_verified_config_is_near_the_roofline(tmp_path):
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    # 2.28 GB per call: the original (1.0 ms) at 47.5% of an H200's 4.8 TB/s, BLOCK=1024 with
    # 4 warps (0.5 ms) at 95%, with 1 warp (0.515 ms) at 92%.
    gpu = FakeGpu(_cost, nbytes=2_280_000_000)
    base = gpu.one(req)
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True, original=base)
    assert report.original_pct_peak == pytest.approx(47.5)
    assert report.stopped == "roofline" and report.tried < report.space_size
    best = max((t for t in report.trials if t.correct), key=lambda t: t.speedup)
    assert best.pct_peak >= ROOFLINE_STOP_PCT and report.improved
    assert report.best_pct_peak == pytest.approx(best.pct_peak) and report.best_pct_peak >= ROOFLINE_STOP_PCT
    assert report.peak_basis == "bandwidth_lower_bound"
    assert any("roofline" in n for n in report.notes)
    # An original already near its roofline is not searched at all.
    near = FakeGpu(_cost, nbytes=4_512_000_000)
    report = tune(near, req, "sm_90", max_configs=48, trials_per_case=1, timed=True, original=near.one(req))
    assert report.stopped == "roofline" and report.tried == 0 and "already runs at 94%" in report.message


def test_geak_optimize_task_budget_reaches_the_tuner(tmp_path):
    from agent.optimize import OptimizeSettings, optimize
    from agent.tune.strategy import TuneSettings
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    out = optimize(req, "tune", FakeGpu(_cost, batch_s=0.4), OptimizeSettings(
        arch="sm_90", tune=TuneSettings(max_configs=48, trials=1, budget_s=2.2)))
    # The original's check counts against the budget: fewer configs than tune() alone got.
    assert out.stopped == "task budget" and out.report.stopped_after < out.report.space_size
    assert "stopped on its task budget" in out.message and out.report.budget_s < 3.0
    with pytest.raises(ValueError, match="positive number"):
        optimize(req, "tune", FakeGpu(_cost), OptimizeSettings(tune=TuneSettings(budget_s=-1.0)))


def test_bench_time_budget_stops_a_tuning_task_in_flight_and_records_it(tmp_path):
    from agent.bench.suite import Bench, Settings
    from agent.bench.tasks import load_suite
    from agent.commands.bench import summary_text
    from agent.bench.report import markdown
    from agent.bench.suite import document
    from runner.schema import EvalOptions
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "add_relu.py").write_text(ADD_RELU)
    (tmp_path / "pyproject.toml").write_text("")
    tasks, _ = load_suite(suite)
    gpu = FakeGpu(_small_is_fast, batch_s=0.4)
    b = Bench(gpu, tasks, Settings(strategy="tune", max_configs=48), EvalOptions(trials=1), tmp_path / "out",
              stream=open(os.devnull, "w"), time_budget_s=2.2)
    t0 = time.monotonic()
    (rec,) = b.run()[0]
    assert time.monotonic() - t0 < 2.2 + 1.0
    assert rec.stopped == "time budget" and b.stopped() == ["add_relu"] and rec.error is None
    assert rec.search["stopped"] == "time budget" and rec.search["configs_run"] < 25
    stopped_after = rec.search["configs_run"]
    (s,) = rec.samples  # the best verified config found, confirmed: what the task keeps
    assert s.correct and s.source == "tuned" and s.speedup > 1.0
    assert rec.search["pct_peak_first"] is not None and rec.search["pct_peak_final"] > rec.search["pct_peak_first"]
    doc = document([rec], b.settings, H200, "suite", [])
    assert doc["stopped"] == ["add_relu"] and doc["summary"]["tasks"] == 1
    assert "(stopped)" in summary_text(doc) and "% of peak" in summary_text(doc)
    md = markdown(doc)
    assert "stopped by the time budget" in md and "time budget after" in md
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    assert state["tasks"]["add_relu"]["stopped"] == "time budget"
    # --resume runs a task the budget stopped again (a finished one would be kept).
    again = Bench(FakeGpu(_cost), tasks, Settings(strategy="tune", max_configs=48), EvalOptions(trials=1),
                  tmp_path / "out", resume=True, stream=open(os.devnull, "w"))
    assert "add_relu" in again.state.records and again.state.done(tasks[0]) is None
    (rec,) = again.run()[0]
    assert rec.stopped is None and rec.search["stopped"] is None and rec.search["configs_run"] > stopped_after


def test_configs_the_budget_cuts_short_are_neither_tried_nor_wrong(tmp_path):
    """An evaluation sent with its limits lowered to the little time left, and ended by them, says
    nothing about its config: it is not counted as tried, nor as failing, and the report says how
    many the budget cut."""
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")

    class Crowded(FakeGpu):  # after the first batch, the GPU is busy and every evaluation waits out its limit
        def one(self, r):
            if self.batches > 2 and r.candidate is not None:
                return EvalResult(status="timeout", correct=False, message="waited 1 s for a free worker slot")
            return super().one(r)

    gpu = Crowded(_cost, batch_s=0.4)
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(2.2, "task budget"))
    assert report.stopped == "task budget"
    assert all(t.status != "timeout" for t in report.trials), [t.status for t in report.trials]
    assert any("cut short by the task budget" in n for n in report.notes), report.notes
    # None finished: the message says they were cut, not that none ran.
    late = Crowded(_cost, batch_s=0.4)
    late.batches = 2
    report = tune(late, req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(2.2, "task budget"))
    assert not report.trials and "ended the" in report.message and "before any finished" in report.message, \
        report.message


def test_the_confirmation_keeps_as_much_as_the_originals_check_took():
    """A winner the budget leaves no time to confirm is lost: the reserve is at least the
    original's own check (an evaluation as large as the confirmation), at most half the budget."""
    from agent.tune.tuner import confirm_reserve
    check = EvalResult(status="ok", correct=True, message="", duration_s=15.0)
    assert confirm_reserve(40.0, check) == 15.0
    assert confirm_reserve(40.0, EvalResult(status="ok", correct=True, message="", duration_s=2.0)) == 4.0
    assert confirm_reserve(20.0, check) == 10.0
    assert confirm_reserve(None, check) == 0.0 and confirm_reserve(40.0, None) == 4.0


def test_under_a_budget_the_first_batch_measures_the_pace_before_larger_ones(tmp_path):
    """Several tasks sharing a runner each sent a first batch as large as the runner, and every
    one of them queued past its budget; the first batch is now two configs, later ones sized to
    the time left at the pace measured."""
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")

    class Wide(FakeGpu):
        parallelism = 12

        def evaluate_many(self, reqs):
            self.sizes = getattr(self, "sizes", []) + [sum(r.candidate is not None and not r.options.aot_configs
                                                           for r in reqs)]
            return super().evaluate_many(reqs)

    gpu = Wide(_cost, batch_s=0.2)
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(4.0, "task budget"))
    search = [n for n in gpu.sizes if n]
    assert search[0] == 2 and max(search[1:]) > 2, gpu.sizes
    assert report.tried > 2
    # The report keeps each step's evaluations in order, for diagnosing where a budget went.
    batches = [st for st in report.timeline if st["step"] == "batch"]
    assert [st["configs"] for st in batches] == search[:-1], (report.timeline, search)  # then the confirmation
    assert all(len(st["evals"]) == st["configs"] and all("duration_s" in e for e in st["evals"]) for st in batches)
    starts = [st["start_s"] for st in report.timeline]
    assert starts == sorted(starts) and starts[-1] < 4.0


def test_no_search_starts_with_less_time_left_than_half_the_originals_check(tmp_path):
    """TritonBench-G's destindex_copy_kv1 on the H200: its check took 17.3 s of a 30 s budget,
    and the first batch of two configs, started with 12.7 s left, took 15.5 s: 32.8 s in all."""
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    slow = EvalResult(status="ok", correct=True, message="", duration_s=6.0)
    gpu = FakeGpu(_cost, batch_s=0.3)
    t0 = time.monotonic()
    # 5 s: 2.5 s kept for the confirmation (half the budget, less than the check), 2.5 s < 3 s
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(5.0, "task budget"), original=slow)
    assert report.tried == 0 and report.stopped == "task budget", (report.tried, report.stopped)
    assert "the task budget was spent before any config ran" in report.message, report.message
    assert time.monotonic() - t0 < 5.0
    # With a quick check the same budget searches.
    quick = EvalResult(status="ok", correct=True, message="", duration_s=1.0)
    report = tune(FakeGpu(_cost, batch_s=0.3), req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(5.0, "task budget"), original=quick)
    assert report.tried >= 2


def test_a_batch_the_time_left_after_its_compile_screen_cannot_hold_is_not_started(tmp_path, monkeypatch):
    # TritonBench-G's llama_ff_triton on the H200: a compile screen of six large tiles took 25 s
    # of its 30 s, the batch after it still started, and the task ended at 32.3 s.
    from agent.tune import tuner
    screens = []
    check = tuner.Screen.check

    def slow_check(self, configs):
        screens.append(len(configs))
        if len(screens) == 2:  # the second screen: after the first batch measured the pace
            time.sleep(3.2)
        return check(self, configs)

    monkeypatch.setattr(tuner.Screen, "check", slow_check)
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")
    gpu = FakeGpu(_cost, batch_s=0.3)
    t0 = time.monotonic()
    report = tune(gpu, req, "sm_90", max_configs=48, trials_per_case=1, timed=True,
                  deadline=Deadline.after(4.0, "task budget"))
    took = time.monotonic() - t0
    assert len(screens) >= 2 and report.stopped == "task budget"
    # The batch after the long screen ran nothing: its configs are cut, neither tried nor wrong.
    steps = [s["step"] for s in report.timeline]
    assert steps[:2] == ["screen", "batch"] and "batch" not in steps[2:], report.timeline
    assert report.tried == 2 and "cut short by the task budget" in report.message, report.message
    # (A config of the first batch that looked faster is confirmed: that gets its reserve.)
    allowance = tuner.confirm_reserve(4.0, None) if report.confirmation is not None else 0.0
    assert took < 4.0 + allowance + 0.3, (took, allowance)


def test_a_task_whose_budget_the_originals_check_spends_is_finished_not_run_again(tmp_path):
    """A task whose own budget (``--task-budget``) ends while its original is checked has nothing
    to score; it is finished, not stopped: --resume does not run it again (the same settings would
    give it the same budget), and the table says why it has no score."""
    from agent.bench.report import markdown
    from agent.bench.suite import Bench, Settings, document
    from agent.bench.tasks import load_suite
    from agent.commands.bench import _document, summary_text
    from runner.schema import EvalOptions

    class SlowOriginal(FakeGpu):  # the original's check always runs past the limit it is sent with
        def one(self, r):
            if r.candidate is None:
                return EvalResult(status="timeout", correct=False, message="ran past its limit")
            return super().one(r)

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "add_relu.py").write_text(ADD_RELU)
    (tmp_path / "pyproject.toml").write_text("")
    tasks, _ = load_suite(suite)
    settings = Settings(strategy="tune", max_configs=8, task_budget=2.0)
    b = Bench(SlowOriginal(_cost), tasks, settings, EvalOptions(trials=1), tmp_path / "out",
              stream=open(os.devnull, "w"))
    (rec,) = b.run()[0]
    assert rec.stopped == "task budget" and not rec.samples and rec.error is None
    assert b.stopped() == [] and "while the original was checked" in rec.notes[-1]
    doc = _document([rec], b.settings, H200, tmp_path / "suite", [], (1,), [], [])
    assert doc["stopped"] == [] and doc["budget_spent"] == ["add_relu"] and doc["summary"]["tasks"] == 0
    assert any("task budget was spent checking the original: 1 task(s) (add_relu)" in n for n in doc["notes"])
    assert "budget spent" in summary_text(doc)
    assert "the task budget was spent checking the original (not scored)" in markdown(doc)
    # --resume keeps it: nothing is evaluated again.
    gpu = SlowOriginal(_cost)
    again = Bench(gpu, tasks, settings, EvalOptions(trials=1), tmp_path / "out", resume=True,
                  stream=open(os.devnull, "w"))
    assert again.state.done(tasks[0]) is not None
    (kept,), reused = again.run()
    assert gpu.batches == 0 and kept.stopped == "task budget" and reused
    # The call's time budget is another matter: a task it stopped runs again (the test above).
    assert document([rec], settings, H200, "suite", [])["stopped"] == []
