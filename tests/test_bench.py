"""geak bench without a runner: format detection and loaders on fixture files written for these
tests, the metric arithmetic against hand-computed cases, the baseline cache, the report."""

import ast

import pytest

from agent.bench import metrics
from agent.bench.baselines import BaselineCache, baseline_request
from agent.bench.formats import SEPARATOR, FormatError, adapt, candidate_text, detect
from agent.bench.metrics import Sample, fast_p, geomean, pass_at_k, summarize
from agent.bench.report import markdown, plot
from agent.bench.tasks import SuiteError, load_suite
from conftest import ROOT
from runner.schema import EvalOptions

FIX = ROOT / "tests" / "bench_fixtures"


def read(rel):
    return (FIX / rel).read_text()


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("rel,fmt", [
    ("tritonbench/scaled_add.py", "tritonbench"),
    ("rocm/row_scale.py", "rocm"),
    ("kernelbench/19_ReLU.py", "kernelbench"),
    ("geak/scale_shift.py", "geak"),
    ("mixed/helpers.py", None),
])
def test_detect_tells_the_formats_apart(rel, fmt):
    assert detect(read(rel), rel) == fmt


def test_every_shipped_benchmark_is_a_geak_task_with_a_reference():
    files = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(files) >= 25
    for f in files:
        a = adapt(f.read_text(), f"benchmarks/{f.name}", detect(f.read_text(), f.name))
        assert a.format == "geak" and a.symbol == f.stem and a.reference == f"{f.stem}_reference", f.name


def test_separator_must_be_exactly_146_hashes():
    text = read("tritonbench/scaled_add.py").replace(SEPARATOR, "#" * 145)
    assert detect(text, "x.py") is None  # neither TritonBench-G (no 146 line) nor geak (no get_inputs)
    with pytest.raises(FormatError, match="146"):
        adapt(text, "x.py", "tritonbench")


# --------------------------------------------------------------------------- loaders


def test_tritonbench_loader_drops_the_import_time_test_call_and_finds_the_wrapper():
    a = adapt(read("tritonbench/scaled_add.py"), "t/scaled_add.py", "tritonbench")
    assert a.symbol == "scaled_add"
    assert "result_gold = test_scaled_add()" not in a.text
    assert "def test_scaled_add" in a.text and "scaled_add_kernel[" in a.text
    ast.parse(a.text)
    # A candidate (only the part above the line) gets the task's tests back.
    merged = candidate_text("tritonbench", a.text, read("tritonbench_candidates/scaled_add.py"))
    assert "BLOCK_SIZE=512" in merged and "def test_scaled_add" in merged and merged.count(SEPARATOR) == 1


def test_rocm_loader_stubs_request_and_drops_the_original_harness():
    a = adapt(read("rocm/row_scale.py"), "r/row_scale.py", "rocm")
    assert a.symbol == "row_scale"
    tree = ast.parse(a.text)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "test_row_scale" in names
    assert not names & {"test_performance", "test_save_results"}
    assert "tb_eval" not in a.text
    assert "request=_geak_pytest_request()" in a.text
    assert any("left out" in n for n in a.notes)


def test_rocm_test_that_launches_the_kernel_directly_is_refused_with_the_line():
    text = read("rocm/row_scale.py").replace("    y = row_scale(x, s)",
                                             "    y = torch.empty_like(x)\n    row_scale_kernel[(M,)](x, s, y, N, BLOCK=128)")
    with pytest.raises(FormatError) as e:
        adapt(text, "r/row_scale.py", "rocm")
    assert "launches row_scale_kernel directly" in str(e.value) and e.value.line and e.value.hint


def test_kernelbench_loader_needs_model_and_inputs():
    assert adapt(read("kernelbench/19_ReLU.py"), "k.py", "kernelbench").symbol == "Model"
    with pytest.raises(FormatError, match="get_init_inputs"):
        adapt(read("kernelbench/19_ReLU.py").replace("def get_init_inputs", "def other"), "k.py", "kernelbench")


def test_load_suite_auto_mixed_folder_and_candidates():
    tasks, notes = load_suite(FIX / "mixed")
    assert {t.name: t.format for t in tasks} == {"19_ReLU": "kernelbench", "row_scale": "rocm",
                                                 "scale_shift": "geak", "scaled_add": "tritonbench"}
    assert any("helpers" in n for n in notes)
    tasks, _ = load_suite(FIX / "geak", candidates=FIX / "geak_candidates")
    assert [c.name for c in tasks[0].candidates] == ["a_block512.py", "b_wrong_sign.py", "c_broken.py"]
    # --tasks filters by glob
    tasks, _ = load_suite(FIX / "mixed", pattern="scale*")
    assert [t.name for t in tasks] == ["scale_shift", "scaled_add"]


def test_load_suite_bad_input_names_the_file_and_what_to_do(tmp_path):
    with pytest.raises(SuiteError, match="no such directory"):
        load_suite(tmp_path / "missing")
    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(SuiteError) as e:
        load_suite(tmp_path)
    assert "no benchmark tasks" in str(e.value) and e.value.hint
    (tmp_path / "broken.py").write_text("def f(:\n")
    tasks, _ = load_suite(tmp_path)  # a file that does not fit is a task that carries its error
    assert [t.name for t in tasks] == ["broken"] and "broken.py:1: syntax error" in tasks[0].error
    with pytest.raises(SuiteError, match=r"broken.py:1: syntax error"):
        tasks[0].request(EvalOptions())
    (tmp_path / "broken.py").unlink()
    (tmp_path / "k.py").write_text(read("kernelbench/19_ReLU.py"))
    tasks, _ = load_suite(tmp_path, "tritonbench")
    assert "looks like the kernelbench format, not tritonbench" in tasks[0].error


def test_an_unknown_task_name_lists_the_names_there_closest_first():
    with pytest.raises(SuiteError) as e:
        load_suite(ROOT / "benchmarks", pattern="sofmax")
    assert "no task in" in str(e.value) and "matches --tasks 'sofmax'" in str(e.value)
    assert e.value.hint.startswith("did you mean softmax") and "the tasks there: softmax" in e.value.hint
    assert "format" not in e.value.hint.lower()


def test_requests_carry_the_adapted_text_and_candidates():
    tasks, _ = load_suite(FIX / "tritonbench", candidates=FIX / "tritonbench_candidates")
    t = tasks[0]
    req = t.request(EvalOptions(), t.candidates[0])
    assert "result_gold = test_scaled_add()" not in req.files[t.rel]
    cand = req.candidate_files[t.rel]
    assert "BLOCK_SIZE=512" in cand and "result_gold = test_scaled_add()" not in cand
    kb, _ = load_suite(FIX / "kernelbench", candidates=FIX / "kernelbench_candidates")
    r = kb[0].request(EvalOptions(), kb[0].candidates[0])
    assert r.target.symbol == "Model" and r.candidate.symbol == "ModelNew"
    assert list(r.candidate_files) == [r.candidate.path] and r.candidate.path != r.target.path


def test_baseline_requests_compare_the_first_version_with_its_reference():
    tasks, _ = load_suite(ROOT / "benchmarks", pattern="softmax")
    t = tasks[0]
    eager = baseline_request(t, "eager", EvalOptions())
    assert (eager.target.symbol, eager.candidate.symbol) == ("softmax_reference", "softmax")
    comp = baseline_request(t, "compile", EvalOptions())
    assert comp.target.symbol == "softmax_reference_compiled"
    assert "torch.compile(softmax_reference)" in comp.files[comp.target.path]
    kb, _ = load_suite(FIX / "kernelbench")
    assert baseline_request(kb[0], "eager", EvalOptions()) is None


# --------------------------------------------------------------------------- metrics


def test_pass_at_k_matches_hand_computed_values():
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k
    assert pass_at_k(1, 1, 2) is None  # fewer samples than k


def test_speedup_fast_p_and_accuracies_on_a_hand_made_suite():
    ok = lambda sp: Sample("ok", True, sp)  # noqa: E731
    tasks = [
        [ok(2.0)],
        [ok(0.5)],
        [Sample("mismatch", False, None)],            # ran, wrong
        [Sample("compile_error", False, None)],       # did not run
        [Sample("rejected", False, None), ok(1.2)],   # two samples: the correct one counts
    ]
    s = summarize(tasks, ps=(0.0, 1.0, 1.5), ks=(1, 2))
    assert s.tasks == 5 and s.samples == 6
    assert s.call_accuracy == pytest.approx(4 / 5)
    assert s.execution_accuracy == pytest.approx(3 / 5)
    assert s.timed == 3
    assert s.speedup_mean == pytest.approx((2.0 + 0.5 + 1.2) / 3)
    assert s.speedup_geomean == pytest.approx((2.0 * 0.5 * 1.2) ** (1 / 3))
    assert s.fast_p == {"fast_0": pytest.approx(3 / 5), "fast_1": pytest.approx(2 / 5),
                        "fast_1.5": pytest.approx(1 / 5)}
    # pass@1 per task: 1, 1, 0, 0, 1/2 -> 2.5/5; pass@2 is undefined (tasks with one sample)
    assert s.pass_at_k["pass@1"] == pytest.approx(0.5)
    assert s.pass_at_k["pass@2"] is None


def test_a_task_whose_original_cannot_be_checked_is_left_out_and_counted():
    from agent.commands.bench import summary_text
    from runner.schema import ErrorInfo, EvalResult
    varies = EvalResult(status="runtime_error", correct=False, message="test_x: cannot be checked: ...",
                        error=ErrorInfo(kind="original_varies", side="reference", message="..."))
    s = metrics.sample_from_result(varies)
    assert s.not_checkable == varies.message and not s.ok
    summ = summarize([[s], [Sample("ok", True, 2.0)], [Sample("mismatch", False, None)]])
    assert summ.not_checkable == 1 and summ.tasks == 2 and summ.execution_accuracy == 0.5
    # One sample judged against a checkable original is enough for the task to be scored.
    assert summarize([[s, Sample("mismatch", False, None)]]).not_checkable == 0
    assert metrics.sample_from_result(EvalResult(status="mismatch", correct=False, message="")).not_checkable is None
    from dataclasses import asdict
    from agent.bench.suite import SampleRecord
    rec = SampleRecord(**asdict(s), message=varies.message)
    doc = {"summary": asdict(summ), "settings": {}, "tasks": [
        {"name": "varies", "format": "tritonbench", "error": None, "samples": [asdict(rec)], "cases_run": 1,
         "cases_skipped": 0, "timed": False}]}
    text = summary_text(doc)
    assert "not checkable" in text and "1 task(s) whose original cannot be checked here" in text
    md = markdown({**doc, "suite": "s", "strategy": "none", "notes": []})
    assert "the original cannot be checked here (not scored)" in md and "## Failures" not in md
    assert "`varies`: test_x: cannot be checked" in md.split("Originals that cannot be checked here")[1]


def test_fast_p_counts_correct_untimed_tasks_only_at_p_zero():
    tasks = [[Sample("ok", True, None)], [Sample("ok", True, 3.0)]]
    assert fast_p(tasks, 0.0) == 1.0 and fast_p(tasks, 1.0) == 0.5
    assert geomean([]) is None and geomean([4.0, 1.0]) == pytest.approx(2.0)


def test_pct_peak_is_the_time_weighted_share_of_each_cases_binding_roof():
    cases = [{"timing": {"cand_ms": 1.0, "bytes_moved": 10, "cand_bw_pct_peak": 90.0, "cand_flops_pct_peak": None}},
             {"timing": {"cand_ms": 3.0, "bytes_moved": 1000, "cand_bw_pct_peak": 40.0, "cand_flops_pct_peak": 70.0}},
             {"timing": None}]
    # (1 ms at 90% of bandwidth + 3 ms at 70% of FLOP/s, the roof that binds it) / 4 ms
    assert metrics.pct_peak(cases) == pytest.approx(75.0)
    s = metrics.sample_from_result({"status": "ok", "correct": True, "timing": {"speedup": 1.5}, "cases": cases})
    assert (s.speedup, s.pct_peak, s.ok) == (1.5, pytest.approx(75.0), True)
    assert metrics.pct_peak([{"timing": {"cand_ms": 1.0, "bytes_moved": 10}}]) is None  # unknown GPU: no guess


# --------------------------------------------------------------------------- cache and report


def test_baseline_cache_is_keyed_by_device_and_digest_and_survives_a_restart(tmp_path):
    path = tmp_path / "c" / "baselines.json"
    c = BaselineCache(path)
    c.put("NVIDIA H200", "eager", "abc", {"speedup": 1.7})
    assert BaselineCache(path).get("NVIDIA H200", "eager", "abc") == {"speedup": 1.7}
    assert BaselineCache(path).get("NVIDIA H100", "eager", "abc") is None
    assert BaselineCache(path).get("NVIDIA H200", "eager", "abd") is None
    path.write_text("{not json")
    assert BaselineCache(path).get("NVIDIA H200", "eager", "abc") is None


def _doc(speedups):
    tasks = []
    for i, sp in enumerate(speedups):
        tasks.append({"name": f"t{i}", "format": "geak", "samples": [
            {"status": "ok", "correct": True, "speedup": sp, "pct_peak": 50.0, "message": "", "source": None}],
            "cases_run": 2, "cases_skipped": 1, "baselines": {"eager": {"speedup": 2.0, "correct": True}},
            "notes": [], "error": None})
    per = [[Sample("ok", True, sp)] for sp in speedups]
    from dataclasses import asdict
    return {"suite": "s", "strategy": "tune", "command": "geak bench s", "device": {"name": "GPU", "backend": "cuda"},
            "summary": asdict(summarize(per)), "tasks": tasks, "notes": []}


def test_report_table_and_plot(tmp_path):
    doc = _doc([1.5, 0.8, None])
    md = markdown(doc, "r.png")
    assert "| `t0` | geak | correct | 2 / 1 | 1.500x | 50.0% | 2.000x | 3.000x |" in md
    assert "geometric-mean speedup | 1.095x" in md  # sqrt(1.5 * 0.8)
    assert "![speedup per task](r.png)" in md
    png = tmp_path / "r.png"
    assert plot(doc, png) is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot(_doc([None]), tmp_path / "none.png") is False and not (tmp_path / "none.png").exists()


def test_tune_summary_takes_the_confirmations_times_only_when_an_edit_was_offered():
    from agent.bench.suite import tune_summary
    conf = {"timing": {"ref_ms": 2.0, "cand_ms": 0.5}}
    original = {"timing": {"ref_ms": 2.1, "cand_ms": 2.05}, "duration_s": 1.5}
    offered = {"source": "...", "confirmation": conf, "trials": [{}] * 5, "screened": [{}] * 2, "space_size": 40,
               "search_s": 10.0, "confirm_s": 2.34, "original_pct_peak": 20.0, "best_pct_peak": 80.0,
               "peak_basis": "bandwidth", "stopped": "task budget", "stopped_after": 5, "budget_s": 13.0}
    assert tune_summary(offered, original) == {
        "first_ms": 2.0, "final_ms": 0.5, "configs_run": 5, "configs_pruned": 2, "space": 40, "search_s": 12.3,
        "pct_peak_first": 20.0, "pct_peak_final": 80.0, "peak_basis": "bandwidth", "stopped": "task budget",
        "stopped_after": 5, "budget_s": 13.0, "original_s": 1.5}
    # Refused on confirmation: the user keeps the first version, whatever the confirmation measured.
    kept = {**offered, "source": None}
    assert tune_summary(kept, original)["final_ms"] == tune_summary(kept, original)["first_ms"] == 2.05
    assert tune_summary(kept, original)["pct_peak_final"] == 20.0  # the original's share: what is kept


def test_an_evaluation_that_ran_out_of_gpu_memory_is_recognised():
    from agent.bench.suite import _out_of_memory
    assert _out_of_memory({"samples": [{"status": "ok"}, {"error": {"kind": "out_of_memory"}}]})
    assert not _out_of_memory({"samples": [{"error": {"kind": "illegal_memory_access"}}, {"error": None}]})
    assert not _out_of_memory({})
