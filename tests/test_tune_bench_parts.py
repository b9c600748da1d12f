"""The tune harness's table in parts (scripts/gpu_tune_bench.py): which rows count, how parts
merge, and that parts of other code are refused rather than mixed into one table."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_tune_bench.py"
FIXTURES = ROOT / "tests" / "bench_fixtures" / "tritonbench"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_tune_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def part(rows, source="abc", settings="--task-budget 30.0 s", device="H200", versions=None):
    return {"source": source, "settings": settings, "device": device, "rows": rows,
            "versions": versions or {"torch": "2.9.1", "triton": "3.6.0"},
            "device_lock": {"wall": 10.0, "write": 2.0, "read": 3.0, "writer_waiting": 1.0}}


def test_a_complete_row_wins_over_a_cut_one_whatever_the_order(bench):
    done = {"task": "a", "verdict": "the same within 1%", "speedup": 1.0}
    cut = {"task": "a", "verdict": "geak only", "stopped": "time budget", "speedup": 1.0}
    unstarted = {"task": "b", "verdict": "not started: the wall limit was reached"}
    later = {"task": "b", "verdict": "geak faster than Triton's autotune", "speedup": 1.1}
    assert not bench.complete(cut) and not bench.complete(unstarted) and bench.complete(done)
    # the wall ended the original's check, or Triton's side before it started: measured again
    assert not bench.complete({"task": "c", "verdict": "the time budget was spent while the original was checked"})
    assert not bench.complete({"task": "d", "verdict": "geak only (Triton's autotune: the wall limit was reached)"})
    assert bench.complete({"task": "e", "verdict": "the task budget was spent while the original was checked"})
    assert bench.merge_parts([part([done, unstarted]), part([cut, later])]) == [done, later]
    assert bench.merge_parts([part([cut]), part([done])]) == [done]
    again = dict(done, speedup=1.05)
    assert bench.merge_parts([part([done]), part([again])]) == [again]  # both complete: the later part's


@pytest.mark.parametrize("key", ["source", "settings", "device", "versions"])
def test_parts_of_other_code_settings_device_or_versions_are_refused(bench, key):
    row = {"task": "a", "verdict": "the same within 1%"}
    other = {"torch": "2.9.1", "triton": "3.5.0"} if key == "versions" else "other"
    with pytest.raises(ValueError, match=key):
        bench.merge_parts([part([row]), part([row], **{key: other})])


def test_skip_done_runs_nothing_measured_by_the_same_code_and_refuses_other_code(bench, tmp_path):
    names = sorted(p.stem for p in FIXTURES.glob("*.py"))
    prior = tmp_path / "prior"
    prior.mkdir()
    rows = [{"task": n, "verdict": "the same within 1%"} for n in names]
    (prior / "tbg_tune_bench.json").write_text(json.dumps(part(rows, source=bench.source_digest())))
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--tasks-dir", str(FIXTURES),
           "--device", "interpreter", "--skip-done", str(prior)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"{len(names)} task(s) already measured; 0 to run" in r.stderr, r.stderr
    (prior / "tbg_tune_bench.json").write_text(json.dumps(part(rows, source="0123456789ab")))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "measured other code (0123456789ab" in r.stderr, r.stderr


def test_a_folder_without_a_table_is_named_not_a_traceback(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--merge", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"--merge {tmp_path}: cannot read {tmp_path}/tbg_tune_bench.json" in r.stderr


def test_a_seeded_order_is_the_same_each_time_and_excludes_what_it_is_told(bench):
    from types import SimpleNamespace
    tasks = [SimpleNamespace(name=f"t{i:02d}") for i in range(30)]
    first = [t.name for t in bench.select(list(reversed(tasks)), "t0*,t29", 18)]
    assert first == [t.name for t in bench.select(tasks, "t0*,t29", 18)]  # whatever order they load in
    assert len(first) == 19 and "t05" not in first and "t29" not in first
    assert first != sorted(first) and [t.name for t in bench.select(tasks, None, None)] == sorted(t.name for t in tasks)


def test_a_task_folder_holding_a_file_twice_is_refused_before_anything_runs(bench, tmp_path):
    # cp -r TASKS into a folder that already held TASKS: each file listed as NAME and TASKS/NAME
    tasks = tmp_path / "tasks"
    (tasks / "tbg").mkdir(parents=True)
    for f in FIXTURES.glob("*.py"):
        (tasks / f.name).write_bytes(f.read_bytes())
        (tasks / "tbg" / f.name).write_bytes(f.read_bytes())
    (tasks / "other.py").write_text((FIXTURES / "scaled_add.py").read_text() + "\n# not the same bytes\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--tasks-dir", str(tasks),
                        "--device", "interpreter"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "1 file(s) are there twice, under two names (scaled_add and tbg/scaled_add)" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_an_untimed_original_s_reason_is_in_its_verdict(bench):
    row = {"task": "a", "speedup": None, "verified": 0, "tried": 0, "device": "NVIDIA H200 (cuda, sm_90)",
           "original_untimed": "case 'test_a': scale() takes a _thread.lock"}
    assert bench._verdict(row) == ("untimed: 0 of 0 configs verified correct (the original was not timed: "
                                   "case 'test_a': scale() takes a _thread.lock)")
    assert bench._verdict({**row, "original_untimed": None}).endswith("(the original was not timed)")


def test_workers_start_before_the_first_task_and_the_part_says_so(tmp_path):
    # A cold pool's start (seconds per worker on a GPU) would be paid by the first task's budget,
    # in its original's check: the harness starts them first, as a running server has them.
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--tasks-dir", str(FIXTURES),
                        "--device", "interpreter", "--skip-triton", "--workers", "2", "--max-configs", "2",
                        "--task-budget", "20", "--wall", "100"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    table = json.loads((out / "tbg_tune_bench.json").read_text())
    assert table["started"]["workers"] == 2 and table["started"]["s"] > 0
    (row,) = table["rows"]
    assert row["task"] == "scaled_add" and row["original_s"] is not None, row
    assert "started before the first task, in " in (out / "tbg_tune_bench.md").read_text()


def test_gpus_deal_the_tasks_round_the_gpus_in_their_order_and_the_parts_merge(bench, tmp_path):
    # --gpus N runs one harness per GPU, each task alone on its GPU: every task in exactly one
    # part, dealt in the seeded order, and the parts merge into one table (same settings).
    # On the interpreter the dealing is what runs; CUDA_VISIBLE_DEVICES is set only on a GPU.
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    src = (FIXTURES / "scaled_add.py").read_text()
    for name in ("add_a", "add_b", "add_c"):
        (tasks / f"{name}.py").write_text(f"# {name}\n" + src.replace("scaled_add", name))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--tasks-dir", str(tasks), "--order", "3",
                        "--device", "interpreter", "--skip-triton", "--workers", "1", "--max-configs", "2",
                        "--task-budget", "20", "--wall", "200", "--gpus", "2"], capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    order = [t.name for t in bench.select(bench_tasks(tasks), None, 3)]
    parts = {i: json.loads((out / f"gpu{i}" / "tbg_tune_bench.json").read_text()) for i in (0, 1)}
    assert [row["task"] for row in parts[0]["rows"]] == sorted(order[0::2])
    assert [row["task"] for row in parts[1]["rows"]] == sorted(order[1::2])
    assert f"--shard 1/2: 1 task(s): {order[1]}" in (out / "gpu1" / "run.log").read_text()
    assert parts[0]["settings"] == parts[1]["settings"] and "gpu1: exit 0" in r.stderr
    assert {row["task"] for row in bench.merge_parts(list(parts.values()))} == set(order)


def bench_tasks(folder):
    from agent.bench.tasks import load_suite
    return load_suite(folder, "auto", None)[0]


def test_gpus_are_refused_past_what_the_machine_shows(bench, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert bench.visible_gpus(2, "cuda") == ["2", "5"]
    with pytest.raises(SystemExit, match=r"--gpus 3: this machine shows 2 GPU\(s\) \(CUDA_VISIBLE_DEVICES=2,5\); "
                                         r"ask for at most 2"):
        bench.visible_gpus(3, "cuda")
