"""geak bench with the real runner (CPU interpreter): the fixture formats end to end, candidates
and pass@k, the tuner, resume, the CLI's outputs and exit codes, a remote runner, and every task
of the project's own suite checked against its PyTorch reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.bench.suite import Bench, Settings
from agent.bench.tasks import load_suite
from conftest import ROOT
from runner.schema import EvalOptions

FIX = ROOT / "tests" / "bench_fixtures"


def geak(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "agent.cli", "bench", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def bench(runner, tmp_path, suite, candidates=None, strategy="none", **kw):
    tasks, _ = load_suite(suite, candidates=candidates)
    s = Settings(strategy=strategy, trials=2, **kw)
    b = Bench(runner, tasks, s, EvalOptions(trials=2, device="interpreter"), tmp_path / "out", jobs=2,
              stream=open(os.devnull, "w"))
    records, _ = b.run()
    return {r.name: r for r in records}


def test_candidates_in_each_external_format(runner, tmp_path):
    tb = bench(runner, tmp_path / "tb", FIX / "tritonbench", FIX / "tritonbench_candidates")["scaled_add"]
    assert [(s.status, s.correct) for s in tb.samples] == [("ok", True)]
    assert tb.cases_run == 1  # test_scaled_add, with the three calls it makes compared inside it
    rocm = bench(runner, tmp_path / "rocm", FIX / "rocm", FIX / "rocm_candidates")["row_scale"]
    assert rocm.cases_run == 4  # 2 shapes x 2 dtypes from the stacked parametrize marks
    assert [(s.status, s.correct) for s in rocm.samples] == [("mismatch", False)]
    kb = bench(runner, tmp_path / "kb", FIX / "kernelbench", FIX / "kernelbench_candidates")
    assert [(s.status, s.correct) for s in kb["19_ReLU"].samples] == [("ok", True)]
    # A ModelNew that hands the work back to PyTorch is rejected, not counted as correct.
    assert [(s.status, s.correct) for s in kb["23_Softmax"].samples] == [("rejected", False)]


def test_tune_strategy_verifies_configs_and_keeps_the_original_without_timing(runner, tmp_path):
    r = bench(runner, tmp_path, FIX / "geak", strategy="tune", max_configs=3, tune_trials=1)["scale_shift"]
    (s,) = r.samples
    assert s.correct and s.source == "original" and s.speedup is None  # nothing timed on a CPU
    assert any("config(s) verified" in n for n in r.notes)
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    assert state["tasks"]["scale_shift"]["samples"][0]["source"] == "original"
    # The tuner's line of the report: configs run and pruned, the space, the search's time;
    # no times on a CPU.
    assert r.search["configs_run"] + r.search["configs_pruned"] == 3 and r.search["space"] >= 3
    assert r.search["search_s"] > 0 and r.search["first_ms"] is None and r.search["final_ms"] is None
    from agent.bench.report import markdown
    from agent.bench.suite import document
    md = markdown(document([r], Settings(strategy="tune"), None, "geak", []))
    assert "## The tuner per task" in md and f"| `scale_shift` | - | - | - | - → - | {r.search['configs_run']} + " in md


def test_cli_pass_at_k_json_report_and_exit_codes(tmp_path):
    out = tmp_path / "out"
    p = geak(str(FIX / "geak"), "--candidates", str(FIX / "geak_candidates"), "--k", "1,2,3", "--out", str(out),
             "--json", "-", "--report", str(tmp_path / "r.md"))
    assert p.returncode == 0, p.stderr  # the task has a correct sample
    doc = json.loads(p.stdout)
    assert doc["schema"] == "geak.bench/1"
    (t,) = doc["tasks"]
    assert [s["status"] for s in t["samples"]] == ["ok", "mismatch", "runtime_error"]
    pk = doc["summary"]["pass_at_k"]
    assert pk["pass@1"] == pytest.approx(1 / 3) and pk["pass@2"] == pytest.approx(2 / 3) and pk["pass@3"] == 1.0
    assert doc["summary"]["call_accuracy"] == 1.0 and doc["summary"]["execution_accuracy"] == 1.0
    md = (tmp_path / "r.md").read_text()
    assert "| `scale_shift` | geak | 1/3 correct | 2 / 1 |" in md and "Nothing was timed" in md
    assert "[" in p.stderr and "1/1" in p.stderr  # progress on stderr
    # A wrong candidate only: the suite ran, nothing verified -> 1
    p = geak(str(FIX / "rocm"), "--candidates", str(FIX / "rocm_candidates"), "--out", str(tmp_path / "o2"),
             "--no-timing")
    assert p.returncode == 1 and "mismatch" in p.stdout and "[" not in p.stdout  # the table on stdout, progress not
    assert "--no-timing (correctness only)" in p.stdout
    assert "fast_1" not in p.stdout and "unknown" not in p.stdout  # nothing measured is shown as measured


def test_cli_resume_runs_only_what_is_missing_or_changed(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for f in ("scale_shift.py", "scaled_add.py", "19_ReLU.py"):
        (suite / f).write_text((FIX / "mixed" / f).read_text())
    (tmp_path / "pyproject.toml").write_text("")
    out = tmp_path / "out"
    # A time budget that runs out during the first task: the rest waits for --resume (exit 1).
    p = geak(str(suite), "--out", str(out), "--jobs", "1", "--time-budget", "1", cwd=tmp_path)
    assert p.returncode == 1 and "time budget spent: 2 task(s) not started" in p.stderr, p.stderr
    state = json.loads((out / "state.json").read_text())
    assert sorted(state["tasks"]) == ["19_ReLU"]
    p = geak(str(suite), "--out", str(out), "--resume", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resuming: 1 task(s) already done" in p.stderr and "2/2" in p.stderr and "19_ReLU:" not in p.stderr
    # One task file changed: only it runs again.
    (suite / "scale_shift.py").write_text((suite / "scale_shift.py").read_text().replace("dict(n=1000)", "dict(n=999)"))
    p = geak(str(suite), "--out", str(out), "--resume", "--json", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resuming: 2 task(s) already done" in p.stderr and "1/1" in p.stderr and "scale_shift:" in p.stderr
    doc = json.loads(p.stdout)
    assert [t["name"] for t in doc["tasks"]] == ["19_ReLU", "scale_shift", "scaled_add"]
    assert all(t["samples"][0]["correct"] for t in doc["tasks"])
    assert "n=999" in json.dumps(json.loads((out / "results" / "scale_shift.json").read_text()))
    # Other settings: everything runs again.
    p = geak(str(suite), "--out", str(out), "--resume", "--trials", "1", cwd=tmp_path)
    assert p.returncode == 0 and "other settings" in p.stderr and "3/3" in p.stderr


def test_cli_bad_input_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "broken.py").write_text("import triton\n\ndef get_inputs(:\n")
    cases = [
        ((str(tmp_path / "nope"),), "no such directory"),
        ((str(tmp_path),), "broken.py:3: syntax error"),
        ((str(FIX / "kernelbench"), "--format", "rocm"), "looks like the kernelbench format, not rocm"),
        ((str(FIX / "geak"), "--strategy", "llm"), "--provider"),
        ((str(FIX / "geak"), "--baselines", "jit"), "unknown kind 'jit'"),
        ((str(FIX / "geak"), "--k", "0"), "--k takes"),
        ((str(FIX / "geak"), "--eval-timeout", "-3"), "--eval-timeout must be a positive number"),
        ((str(FIX / "geak"), "--strategy", "tune", "--no-timing"), "--no-timing goes with --strategy none"),
    ]
    for args, message in cases:
        p = geak(*args)
        assert p.returncode == 2 and message in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr and p.stdout == ""
    assert "what to do" in geak(str(tmp_path)).stderr


def test_cli_a_task_file_that_does_not_fit_is_a_harness_error_and_the_rest_run(tmp_path):
    import shutil
    suite = tmp_path / "suite"
    shutil.copytree(FIX / "geak", suite)
    (suite / "broken.py").write_text("import triton\n\ndef get_inputs(:\n")
    (suite / "zz_nosymbol.py").write_text("import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n"
                                         "\nINPUT_CASES = [dict()]\n")
    report = tmp_path / "r.md"
    p = geak(str(suite), "--trials", "1", "--out", str(tmp_path / "o"), "--json", "-", "--report", str(report))
    assert p.returncode == 1, p.stderr  # the suite ran; not every task is verified
    assert "Traceback" not in p.stderr
    assert "harness error, not run: broken.py:3: syntax error" in p.stderr
    doc = json.loads(p.stdout)
    by = {t["name"]: t for t in doc["tasks"]}
    assert by["scale_shift"]["samples"][0]["correct"] is True  # the good task ran
    assert "broken.py:3: syntax error" in by["broken"]["error"]
    assert sorted(doc["harness_errors"]) == [n for n in sorted(by) if by[n]["error"]] and "broken" in doc["harness_errors"]
    assert "broken.py:3: syntax error" in report.read_text()
    assert doc["summary"]["execution_accuracy"] == 1.0  # harness errors are not scored


def test_cli_unknown_task_name_lists_the_tasks():
    p = geak(str(ROOT / "benchmarks"), "--tasks", "sofmax")
    assert p.returncode == 2 and "no task in" in p.stderr and "did you mean softmax" in p.stderr, p.stderr
    assert "TritonBench" not in p.stderr and "Traceback" not in p.stderr


def test_cli_through_a_remote_runner(tmp_path):
    from test_daemon import TOKEN, Daemon, free_port
    url = f"http://127.0.0.1:{free_port()}"
    p = geak(str(FIX / "mixed"), "--runner", url, "--jobs", "1", "--out", str(tmp_path / "o0"),
             env={"GEAK_RUNNER_TOKEN": TOKEN})
    # Nothing listening: the first task tells, the runner is asked once more, and the run stops there.
    assert p.returncode == 3 and "cannot run: cannot reach the runner" in p.stderr and "Traceback" not in p.stderr
    assert "stopped before the other 3 task(s)" in p.stderr and p.stderr.count("what to do") == 1, p.stderr
    assert p.stdout == ""
    d = Daemon(tmp_path / "state", TOKEN).start()
    try:
        p = geak(str(FIX / "tritonbench"), "--candidates", str(FIX / "tritonbench_candidates"), "--runner", d.url,
                 "--out", str(tmp_path / "o1"), "--json", "-", env={"GEAK_RUNNER_TOKEN": TOKEN})
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["device"]["backend"] == "interpreter"
        assert doc["tasks"][0]["samples"][0]["correct"] is True
    finally:
        d.stop()


def test_every_suite_task_matches_its_pytorch_reference(runner):
    """Each benchmarks/ task's wrapper, as the candidate of its `<name>_reference` (the eager
    baseline's request), reproduces it on every interpreter-sized case, on one trial of fresh
    seeded inputs each."""
    from agent.bench.baselines import baseline_request
    tasks, _ = load_suite(ROOT / "benchmarks")
    assert len(tasks) >= 25
    results = runner.evaluate_many([baseline_request(t, "eager", EvalOptions(trials=1, device="interpreter"))
                                    for t in tasks])
    bad = []
    for t, r in zip(tasks, results):
        ran = [c for c in r.cases if not c.skipped]
        if not (r.status == "ok" and r.correct and ran and all(c.passed for c in ran)):
            bad.append(f"{t.name}: {r.status}: {r.message}")
        if not r.launches.get("candidate") or r.launches.get("reference"):  # Triton vs plain PyTorch
            bad.append(f"{t.name}: launched {r.launches}")
        # GPU-sized cases are there, and skipped here with the reason.
        if not any(c.skipped and "GPU runner" in c.skipped for c in r.cases):
            bad.append(f"{t.name}: no GPU-sized case")
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_every_suite_task_passes_geak_eval_against_itself(runner):
    """What `geak eval benchmarks/<task>.py::<task>` checks: it runs and gives the same answer twice.
    Every third task (each task's code already runs, as a candidate, in the test above)."""
    tasks, _ = load_suite(ROOT / "benchmarks")
    tasks = tasks[::3]
    results = runner.evaluate_many([t.request(EvalOptions(trials=1, device="interpreter")) for t in tasks])
    bad = [f"{t.name}: {r.status}: {r.message}" for t, r in zip(tasks, results) if r.status != "ok"]
    assert not bad, "\n".join(bad)


def test_llm_strategy_samples_give_pass_at_k(tmp_path, monkeypatch, capsys):
    """--strategy llm against the scripted LLM server: two runs of two iterations; the first run
    gets a candidate that does not compile and a wrong one, the second two correct ones."""
    from agent.commands.bench import run as run_bench
    from agent.cli import build_parser
    from conftest import ADD_RELU
    from llm_server import ScriptedLLM, load_transcript
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "add_relu.py").write_text(ADD_RELU)
    (tmp_path / "pyproject.toml").write_text("")
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    server = ScriptedLLM(load_transcript(ROOT / "tests" / "transcripts" / "add_relu.json")).start()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        args = build_parser().parse_args([
            "bench", str(suite), "--strategy", "llm", "--provider", "openai", "--model", "scripted",
            "--samples", "2", "--iterations", "2", "--k", "1,2", "--trials", "1", "--device", "interpreter",
            "--out", str(tmp_path / "out"), "--json", "-"])
        code = run_bench(args)
    finally:
        server.stop()
    out = capsys.readouterr().out
    doc = json.loads(out[out.index('{\n "schema": "geak.bench/1"'):])
    (t,) = doc["tasks"]
    assert [s["correct"] for s in t["samples"]] == [False, True]
    assert doc["summary"]["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert doc["summary"]["execution_accuracy"] == 1.0 and code == 0
    assert len(server.prompts()) == 4


def test_llm_tasks_run_concurrently_in_process(tmp_path, monkeypatch):
    """--strategy llm runs each task through agent.optimize in this process, --jobs at a time
    (each task's run finishing only once the other has started), and scores its Outcome."""
    import threading

    import agent.optimize
    from agent.outcome import Outcome, Tried
    from agent.llm.records import Report
    from runner.schema import EvalResult, Timing
    tasks, _ = load_suite(FIX / "kernelbench")
    both_started = threading.Barrier(2, timeout=20)
    seen = []

    def fake_optimize(request, strategy, runner, settings, on_progress=None):
        both_started.wait()  # the other task is running too
        seen.append((strategy, request.target.symbol, settings.llm.model, settings.run_dir.parent.name))
        base = EvalResult(status="ok", correct=True, message="ok")
        faster = EvalResult(status="ok", correct=True, message="ok", timing=Timing(
            ref_ms=2.0, cand_ms=1.0, speedup=2.0, speedup_geomean=2.0, spread_pct=1.0, method="events", cases_timed=1))
        return Outcome(strategy="llm", baseline=base, source="src", result=faster, speedup=2.0, timed=True,
                       message="2x", report=Report(target="t", provider="openai", model="m", run_dir="rd"),
                       tried=[Tried("iteration 1, candidate 1", "mismatch"), Tried("iteration 2, candidate 1",
                                                                                  "verified", True, 2.0)])

    monkeypatch.setattr(agent.optimize, "optimize", fake_optimize)
    s = Settings(strategy="llm", trials=1, llm={"provider": "openai", "model": "scripted", "iterations": None})
    b = Bench(object(), tasks, s, EvalOptions(trials=1, device="interpreter"), tmp_path / "out", jobs=2,
              stream=open(os.devnull, "w"))
    records, _ = b.run()
    assert sorted(seen) == [("llm", "Model", "scripted", "llm")] * 2
    for r in records:
        (sample,) = r.samples
        assert (sample.status, sample.correct, sample.speedup, sample.source) == ("ok", True, 2.0, "rd")
