"""geak bench in parts (agent/bench/parts.py): which tasks a part runs (--order, --first, --shard,
--resume), parts merged into one table and parts of other settings, code or device refused,
--gpus N running one geak bench per GPU as subprocesses, and the tuner against Triton's own
@triton.autotune over the same space (agent/bench/autotune.py), on the CPU interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.bench import parts
from agent.bench.autotune import comparison, verdict
from agent.bench.suite import Bench, Settings, State, TaskRecord, document
from agent.bench.tasks import load_suite
from conftest import ROOT
from runner.schema import EvalOptions

FIX = ROOT / "tests" / "bench_fixtures"
QUICK = ("--device", "interpreter", "--no-timing", "--trials", "1", "--workers", "1")
"""A part that checks each task once and times nothing: the parts machinery is what is tested."""


def geak(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "agent.cli", "bench", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.fixture
def suite(tmp_path):
    """Three small tasks (the fixture's kernel under three names: three files, three digests)."""
    d = tmp_path / "suite"
    d.mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    src = (FIX / "geak" / "scale_shift.py").read_text()
    for name in ("add_a", "add_b", "add_c"):
        (d / f"{name}.py").write_text(src.replace("scale_shift", name))
    return d


def rec(name, stopped=None, error=None, speedup=1.0, digest="d"):
    from agent.bench.suite import SampleRecord
    return TaskRecord(name, "geak", name, f"{name}.py", digest, samples=[SampleRecord("ok", True, speedup)],
                      stopped=stopped, error=error)


def part(records, settings=None, code="abc", device=None, path="p"):
    return parts.Part(Path(path), settings or Settings(strategy="tune").fingerprint(), code,
                      device or {"name": "NVIDIA H200", "backend": "cuda", "arch": "sm_90", "torch": "2.9.1",
                                 "triton": "3.6.0"}, records)


# --------------------------------------------------------------------------- without a runner


def test_a_complete_record_wins_over_a_cut_one_whatever_the_order():
    done, cut = rec("a", speedup=1.2), rec("a", stopped="time budget")
    later, broken = rec("b", speedup=1.1), rec("b", error="runner gone")
    assert parts.complete(done) and not parts.complete(cut) and not parts.complete(broken)
    assert parts.merge([part([done, broken], path="p1"), part([cut, later], path="p2")]) == [done, later]
    assert parts.merge([part([cut]), part([done])]) == [done]
    again = rec("a", speedup=1.05)
    assert parts.merge([part([done]), part([again])]) == [again]  # both complete: the later part's
    # Records of another version of a file are left out when the files' digests are given.
    assert parts.merge([part([done]), part([rec("a", digest="old")])], digests={"a": "d"}) == [done]


@pytest.mark.parametrize("other,says", [
    (dict(settings=Settings(strategy="tune", max_configs=16).fingerprint()),
     "settings: max_configs 48 in p1, 16 in p2"),
    (dict(code="0123456789ab"), "code: abc in p1, 0123456789ab in p2"),
    (dict(device={"name": "NVIDIA H100", "backend": "cuda", "arch": "sm_90", "torch": "2.9.1", "triton": "3.6.0"}),
     "device: name NVIDIA H200 in p1, NVIDIA H100 in p2"),
    (dict(device={"name": "NVIDIA H200", "backend": "cuda", "arch": "sm_90", "torch": "2.9.1", "triton": "3.5.0"}),
     "device: triton 3.6.0 in p1, 3.5.0 in p2"),
])
def test_parts_of_other_settings_code_or_device_are_refused_and_what_differs_is_said(other, says):
    with pytest.raises(parts.PartsError) as e:
        parts.merge([part([rec("a")], path="p1"), part([rec("b")], path="p2", **other)])
    assert says in str(e.value) and "one table needs one code, settings and device" in str(e.value)


def test_a_seeded_order_is_the_same_each_time_excludes_what_it_is_told_and_deals_round():
    tasks = [SimpleNamespace(name=f"t{i:02d}") for i in range(30)]
    first = [t.name for t in parts.select(list(reversed(tasks)), "t0*,t29", 18)]
    assert first == [t.name for t in parts.select(tasks, "t0*,t29", 18)]  # whatever order they load in
    assert len(first) == 19 and "t05" not in first and "t29" not in first
    assert first != sorted(first) and [t.name for t in parts.select(tasks)] == sorted(t.name for t in tasks)
    assert parts.deal(list("abcde"), 2) == [list("ace"), list("bd")]
    assert parts.deal(list("ab"), 4) == [["a"], ["b"]]  # no GPU left without a task
    assert parts.parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "x", "-1/2"):
        with pytest.raises(ValueError, match="--shard"):
            parts.parse_shard(bad)


def test_gpus_are_those_the_process_sees_and_no_more():
    assert parts.visible_gpus(2, "cuda", {"CUDA_VISIBLE_DEVICES": "2,5"}) == ["2", "5"]
    assert parts.visible_gpus(2, "interpreter", {}) == ["", ""]  # on a CPU the parts still run apart
    with pytest.raises(parts.PartsError, match=r"--gpus 3: this machine shows 2 GPU\(s\) \(CUDA_VISIBLE_DEVICES=2,5\); "
                                               r"ask for at most 2"):
        parts.visible_gpus(3, "cuda", {"CUDA_VISIBLE_DEVICES": "2,5"})


def test_resume_keeps_only_records_of_the_same_code(tmp_path):
    tasks, _ = load_suite(FIX / "geak")
    s = Settings()
    st = State(tmp_path, s, False, code="aaa")
    st.records = {"scale_shift": rec("scale_shift", digest=tasks[0].digest)}
    st.write()
    assert State(tmp_path, s, True, code="aaa").done(tasks[0]) is not None
    other = State(tmp_path, s, True, code="bbb")
    assert other.done(tasks[0]) is None and other.stale_why == "other code (aaa; this is bbb)"
    assert State(tmp_path, Settings(trials=1), True, code="aaa").stale_why == "other settings"
    assert len(parts.code_digest()) == 12 and parts.code_digest() == parts.code_digest(ROOT)


def test_the_verdict_against_autotune_and_its_summary():
    assert verdict(1.2, {"speedup": 1.0}) == "the tuner faster"
    assert verdict(1.0, {"speedup": 1.005}) == "the same within 1%"
    assert verdict(1.0, {"speedup": 1.3}) == "Triton's autotune faster"
    assert verdict(1.1, {"skipped": "fewer than two configs"}) == (
        "the tuner only (Triton's autotune: fewer than two configs)")
    assert verdict(None, {"speedup": None}, "the original was not timed: case 'a' takes a lock") == (
        "untimed (the original was not timed: case 'a' takes a lock)")
    c = comparison([(1.2, {"speedup": 1.0}), (1.0, {"speedup": 1.0}), (1.0, {"speedup": 2.0}), (None, {}),
                    (1.5, {"skipped": "timeout"})])
    assert (c["compared"], c["tuner_faster"], c["same"], c["autotune_faster"]) == (3, 1, 1, 1)
    assert c["autotune_geomean"] == pytest.approx(2 ** (1 / 3))


# --------------------------------------------------------------------------- geak bench, on the interpreter


def test_first_and_resume_run_the_next_tasks_of_a_seeded_order(suite, tmp_path):
    # One task per part in a seeded order; --resume runs the next one not done (the tasks done in
    # --out are kept), and the part's JSON names the code that measured.
    # The tuner, one config a task: its workers are started before the first task.
    out = tmp_path / "p1"
    tune = ("--strategy", "tune", "--max-configs", 1, "--device", "interpreter", "--trials", 1, "--workers", 1)
    order = [t.name for t in parts.select(load_suite(suite)[0], None, 3)]
    p = geak(suite, *tune, "--order", 3, "--first", 1, "--out", out)
    assert p.returncode == 0, p.stderr
    assert "this part: 1 to run" in p.stderr and f"{order[0]}: ok" in p.stderr
    p = geak(suite, *tune, "--order", 3, "--first", 1, "--out", out, "--resume", "--json", "-")
    assert p.returncode == 0 and "1 to run, 1 done before" in p.stderr and f"{order[1]}: ok" in p.stderr, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert [t["name"] for t in doc["tasks"]] == sorted(order[:2]) and doc["code"] == parts.code_digest()
    assert doc["started"]["workers"] == 1  # the workers were started before the first task


def test_merge_puts_parts_into_one_table_and_refuses_parts_of_other_settings(runner, suite, tmp_path):
    # Parts are run directories (here made by the bench on the session's runner, as geak bench
    # makes them); --merge reads their state, so a part whose run was cut short counts too.
    tasks, _ = load_suite(suite)

    def run_part(name, tasks, **settings):
        b = Bench(runner, tasks, Settings(timing=False, **settings), EvalOptions(trials=1, timing=False,
                  device="interpreter"), tmp_path / name, stream=open(os.devnull, "w"), code=parts.code_digest())
        b.run()
        return tmp_path / name

    p1, p2 = run_part("p1", tasks[:2], trials=1), run_part("p2", tasks[2:], trials=1)
    other = run_part("p3", tasks[2:], trials=2)
    p = geak("--merge", p1, other, "--out", tmp_path / "table")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"the parts differ in settings: trials 1 in {p1}, 2 in {other}" in p.stderr
    assert not (tmp_path / "table").exists()
    p = geak("--merge", p1, tmp_path / "nothing", "--out", tmp_path / "table")
    assert p.returncode == 2 and f"cannot read {tmp_path / 'nothing' / 'state.json'}" in p.stderr
    p = geak("--merge", p1, p2, "--out", tmp_path / "table", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert [t["name"] for t in doc["tasks"]] == ["add_a", "add_b", "add_c"] and doc["settings"]["trials"] == 1
    assert doc["device"]["backend"] == "interpreter" and doc["code"] == parts.code_digest()
    # The merged table is a run directory: --resume goes on from it (nothing left to run here).
    p = geak(suite, "--device", "interpreter", "--no-timing", "--trials", 1, "--out", tmp_path / "table", "--resume")
    assert p.returncode == 0 and "resuming: 3 task(s) already done" in p.stderr, p.stderr


def test_gpus_run_a_part_per_gpu_as_subprocesses_and_merge_them(suite, tmp_path):
    # --gpus 2 on a machine that shows GPUs 3 and 7: two geak bench subprocesses, each told its
    # GPU, the tasks dealt in their seeded order; the parts merged into --out.
    out = tmp_path / "out"
    p = geak(suite, *QUICK, "--order", 3, "--gpus", 2, "--out", out, "--report", tmp_path / "r.md",
             env={"CUDA_VISIBLE_DEVICES": "3,7"})
    assert p.returncode == 0, p.stderr
    order = [t.name for t in parts.select(load_suite(suite)[0], None, 3)]
    for i, gpu in enumerate(("3", "7")):
        log = (out / f"gpu{i}" / "run.log").read_text()
        assert f"a part of a --gpus run, on CUDA_VISIBLE_DEVICES={gpu}" in log, log
        assert (out / f"gpu{i}" / "tasks.txt").read_text().split() == order[i::2]
        assert sorted(json.loads((out / f"gpu{i}" / "state.json").read_text())["tasks"]) == sorted(order[i::2])
        assert f"gpu{i} (CUDA_VISIBLE_DEVICES={gpu}): {len(order[i::2])} task(s), exit 0" in p.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert [t["name"] for t in doc["tasks"]] == sorted(order) and doc["summary"]["execution_accuracy"] == 1.0
    assert [(x["cuda_visible_devices"], x["tasks"], x["exit"]) for x in doc["parts"]] == [("3", 2, 0), ("7", 1, 0)]
    assert "* gpu1: CUDA_VISIBLE_DEVICES=7, 1 task(s), exit 0" in (tmp_path / "r.md").read_text()
    # Again with --resume: every task is done in --out, nothing runs, the table stays whole.
    p = geak(suite, *QUICK, "--order", 3, "--gpus", 2, "--out", out, "--resume", env={"CUDA_VISIBLE_DEVICES": "3,7"})
    assert p.returncode == 0 and "0 to run (3 done before)" in p.stderr, p.stderr
    assert len(json.loads((out / "bench.json").read_text())["tasks"]) == 3
    # The parts merge by hand too, into a run directory --resume can go on from.
    p = geak("--merge", out / "gpu0", out / "gpu1", "--out", tmp_path / "table")
    assert p.returncode == 0 and "3 task(s) from 2 part(s)" in p.stderr, p.stderr
    assert sorted(json.loads((tmp_path / "table" / "state.json").read_text())["tasks"]) == sorted(order)


def test_bad_part_options_are_refused_before_anything_runs(suite, tmp_path):
    cases = [((suite, "--gpus", 2, "--shard", "0/2"), "--gpus deals the tasks itself"),
             ((suite, "--strategy", "none", "--against-autotune"), "--against-autotune goes with --strategy tune"),
             ((suite, "--shard", "2/2"), "I must be at least 0 and less than N"),
             ((suite, "--device", "cuda", "--gpus", 3), "--gpus 3: this machine shows 2 GPU(s)"),
             (("--merge", tmp_path), "--out OUT for the merged table")]
    for args, says in cases:
        p = geak(*args, "--out", tmp_path / "o", env={"CUDA_VISIBLE_DEVICES": "2,5"}) if "--merge" not in args \
            else geak(*args)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    (suite / "copy").mkdir()  # a folder copied into an earlier copy of itself: every file twice
    (suite / "copy" / "add_a.py").write_bytes((suite / "add_a.py").read_bytes())
    p = geak(suite, "--out", tmp_path / "o")
    assert p.returncode == 2 and "1 file(s) are there twice, under two names (add_a and copy/add_a)" in p.stderr
    assert not (tmp_path / "o").exists()


def test_the_tuner_against_triton_s_autotune_on_a_suite_kernel(runner, tmp_path):
    # benchmarks/gelu.py: the tuner's space written as an @triton.autotune (two configs sampled,
    # keyed on the shape argument) and evaluated against the original by the same evaluator.
    # Nothing is timed on the CPU: both sides are verified, and the verdict says why no speedup.
    tasks, _ = load_suite(ROOT / "benchmarks", pattern="gelu")
    s = Settings(strategy="tune", trials=1, max_configs=2, tune_trials=1, against_autotune=True)
    b = Bench(runner, tasks, s, EvalOptions(trials=1, device="interpreter"), tmp_path / "out",
              stream=open(os.devnull, "w"))
    (r,), _ = b.run()
    at = r.autotune
    assert (at["status"], at["correct"], at["configs"], at["sampled"], at["key"]) == ("ok", True, 2, True,
                                                                                       ["n_elements"]), at
    assert at["speedup"] is None and at["verdict"] == "untimed (timing needs a GPU)"
    results = json.loads((tmp_path / "out" / "results" / "gelu.json").read_text())
    assert results["autotune"]["status"] == "ok" and results["tune"]["timeline"]  # where the search's time went
    assert r.search["original_s"] > 0
    from agent.bench.report import markdown
    doc = document([r], s, None, "benchmarks", [])
    assert doc["against_autotune"]["compared"] == 0
    md = markdown(doc)
    assert "## Against Triton's autotune over the same space" in md
    assert "| Triton's autotune: speedup, search s (configs) | verdict |" in md
    assert "| ok, correct, untimed (2 sampled) | untimed (timing needs a GPU) |" in md
    # The record, as the state file keeps it, reads back (what --resume and --merge read).
    from agent.bench.suite import record_from_dict
    assert record_from_dict(json.loads(json.dumps(asdict(r)))).autotune == at
