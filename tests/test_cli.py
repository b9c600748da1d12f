"""`geak eval` through its real entry point, as a user runs it."""

import json
import subprocess
import sys

from conftest import ROOT, kernel_variant


def geak(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_eval_verified_candidate_json(project):
    project.write("cand.py", kernel_variant(block=64))
    p = geak("eval", "ref.py::add_relu", "--candidate", "cand.py::add_relu", "--json", cwd=project.root)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # stdout is exactly one JSON document
    assert doc["status"] == "ok" and doc["correct"] is True and doc["schema"] == "geak.eval/1"
    assert "VERIFIED" in p.stderr and "timing     unavailable" in p.stderr


def test_eval_mismatch_exits_1_and_shows_the_case(project):
    project.write("cand.py", kernel_variant(store_mask="mask & (offs < 1000)"))
    p = geak("eval", "ref.py::add_relu", "--candidate", "cand.py::add_relu", cwd=project.root)
    assert p.returncode == 1
    assert "MISMATCH" in p.stdout and "n=2048: output[1000]" in p.stdout  # the report is the product: stdout
    assert "MISMATCH" not in p.stderr


def test_bad_input_exits_2_with_file_and_line(project):
    project.write("broken.py", "def f(:\n")
    p = geak("eval", "broken.py::f", cwd=project.root)
    assert p.returncode == 2
    assert "broken.py:1: syntax error" in p.stderr
    assert "Traceback" not in p.stderr
    p = geak("eval", "nope.py::f", cwd=project.root)
    assert p.returncode == 2 and "nope.py: no such file" in p.stderr
    p = geak("eval", "ref.py", cwd=project.root)
    assert p.returncode == 2 and "PATH::SYMBOL" in p.stderr
    p = geak("eval", "ref.py::add_relu", "--trials", "0", cwd=project.root)
    assert p.returncode == 2 and "--trials" in p.stderr


def test_reference_that_fails_its_inputs_exits_2(project):
    project.write("k.py", (project.root / "ref.py").read_text().replace(
        "    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)\n    1 / 0\n"))
    p = geak("eval", "k.py::add_relu", cwd=project.root)
    assert p.returncode == 2
    assert "ZeroDivisionError" in p.stdout and 'File "k.py", line' in p.stdout


def test_project_settings_are_validated(project):
    (project.root / "pyproject.toml").write_text("[tool.geak]\ntrials = 'many'\n")
    p = geak("eval", "ref.py::add_relu", cwd=project.root)
    assert p.returncode == 2 and "trials" in p.stderr and "expected an integer" in p.stderr
    (project.root / "pyproject.toml").write_text("[tool.geak]\ntrails = 2\n")
    p = geak("eval", "ref.py::add_relu", cwd=project.root)
    assert p.returncode == 2 and "unknown setting 'trails'" in p.stderr
    (project.root / "pyproject.toml").write_text(
        "[tool.geak]\ntrials = 1\n[tool.geak.tolerance]\nfloat32 = { atol = 1.0, rtol = 0.0 }\n")
    project.write("cand.py", kernel_variant(value="tl.maximum(x + y, 0.0) + 0.5"))
    p = geak("eval", "ref.py::add_relu", "--candidate", "cand.py::add_relu", "--json", cwd=project.root)
    assert p.returncode == 0, p.stderr  # the project's tolerance admits the 0.5 error
    assert json.loads(p.stdout)["cases"][0]["trials"] == 1


def test_asking_for_a_gpu_that_is_not_there_is_bad_usage(project):
    import pytest
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    p = geak("eval", "ref.py::add_relu", "--device", "cuda", cwd=project.root)
    assert p.returncode == 3  # the runner cannot be used as asked: a configuration error, not the code's
    assert "geak: cannot run: " in p.stderr and "torch sees no GPU" in p.stderr and "CRASHED" not in p.stdout
    assert "what to do: " in p.stderr


def test_geak_runner_info_reports_the_device():
    p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "info", "--device", "interpreter", "--json"],
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["backend"] == "interpreter" and doc["torch"] and doc["triton"]


# ----------------------------------------------------------------------------- a new user's first mistakes


def test_what_the_symbol_and_path_must_be_is_said_early(project):
    project.write("consts.py", "N = 7\nSIZES: list = [1, 2]\nimport torch\nrelu = torch.relu\n"
                               "def get_inputs():\n    return [torch.randn(4)]\n")
    p = geak("eval", "consts.py::N", cwd=project.root)
    assert p.returncode == 2 and "consts.py:1: 'N' is an int constant, not a function or class" in p.stderr
    assert "SYMBOL must name a function" in p.stderr and "not callable" not in p.stderr
    p = geak("eval", "consts.py::SIZES", cwd=project.root)
    assert p.returncode == 2 and "'SIZES' is a list value" in p.stderr
    project.write("notes.txt", "some notes\n")
    p = geak("eval", "notes.txt::X", cwd=project.root)
    assert p.returncode == 2 and "notes.txt is not a Python file (.py)" in p.stderr
    assert "syntax error" not in p.stderr


def test_cases_out_of_range_are_named_against_what_the_file_declares(project):
    p = geak("eval", "ref.py::add_relu", "--cases", "0,9", cwd=project.root)
    assert p.returncode == 2, p.stderr
    assert "--cases 9: ref.py declares 2 input cases (INPUT_CASES, indices 0-1)" in p.stderr
    assert "COMPILE_ERROR" not in p.stderr and "evaluating" not in p.stderr  # before any worker starts
    p = geak("eval", "ref.py::add_relu", "--cases", "-1", cwd=project.root)
    assert p.returncode == 2 and "indices from 0" in p.stderr
    project.write("one.py", (project.root / "ref.py").read_text().replace("INPUT_CASES = [dict(n=300), dict(n=2048)]\n", ""))
    p = geak("eval", "one.py::add_relu", "--cases", "1", cwd=project.root)
    assert p.returncode == 2 and "declares 1 input case (get_inputs() without INPUT_CASES: index 0)" in p.stderr


def test_an_endless_candidate_shows_progress_and_timeout_bounds_it(project):
    project.write("loop.py", kernel_variant(pre="    while True:\n        pass"))
    p = geak("eval", "ref.py::add_relu", "--candidate", "loop.py::add_relu", "--cases", "0", "--trials", "1",
             "--timeout", "8", cwd=project.root)
    assert p.returncode == 1, p.stderr
    assert "... evaluating ref.py::add_relu against loop.py::add_relu: 5 s so far" in p.stderr
    assert "run 8 s" in p.stderr and "--timeout S to change" in p.stderr
    assert "TIMEOUT" in p.stdout and "timed out after 8 s in the run phase" in p.stdout
    assert p.stderr.count("limits per evaluation phase") == 1  # said once, not on every ticker line
    p = geak("eval", "ref.py::add_relu", "--timeout", "0", cwd=project.root)
    assert p.returncode == 2 and "--timeout must be a positive number" in p.stderr


def test_the_report_reads_cleanly(project):
    project.write("torchy.py", "import torch\n\ndef add_relu(x, y):\n    return torch.relu(x + y)\n")
    p = geak("eval", "ref.py::add_relu", "--candidate", "torchy.py::add_relu", "--cases", "0", "--trials", "1",
             cwd=project.root)
    assert p.returncode == 1, p.stderr
    assert "verdict    REJECTED: " in p.stdout and "REJECTED: rejected:" not in p.stdout
    assert "device     Triton CPU interpreter   inputs" in p.stdout and "(interpreter)" not in p.stdout
    project.write("short.py", kernel_variant(ret="out[:-1]"))
    p = geak("eval", "ref.py::add_relu", "--candidate", "short.py::add_relu", "--cases", "0", "--trials", "1",
             cwd=project.root)
    assert p.returncode == 1
    row = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("n=300") and "FAIL" in ln)
    assert row.split("FAIL")[1].split()[:2] == ["-", "-"], row  # a shape mismatch has no numeric error
    # A configuration error's "what to do: " line: test_asking_for_a_gpu_that_is_not_there_is_bad_usage.


def test_optimize_points_a_pytorch_function_at_the_llm_strategy(project):
    project.write("fn.py", "import torch\n\ndef f(x):\n    return torch.relu(x)\n\n"
                           "def get_inputs():\n    return [torch.randn(16)]\n")
    p = geak("optimize", "fn.py::f", cwd=project.root)
    assert p.returncode == 2, p.stderr
    assert "launches no Triton kernel" in p.stderr and "--strategy llm" in p.stderr
    assert "nothing to tune" not in p.stderr


def test_optimize_out_on_a_cpu_says_why_and_offers_the_untimed_edit(project):
    out = project.root / "tuned.py"
    p = geak("optimize", "ref.py::add_relu", "--max-configs", "3", "--trials", "1", "--out", str(out),
             cwd=project.root, env={"COLUMNS": "120"})
    assert p.returncode == 1, p.stderr
    assert f"wrote nothing to {out}: nothing could be timed here (timing needs a GPU)" in p.stderr
    assert "--untimed --out FILE" in p.stderr and not out.exists()
    assert "original   BLOCK=256" in p.stdout
    table = p.stdout.split("  config (what differs from the original)")[1]
    assert table.splitlines()[1].split()[:6] == ["the", "original", "(its", "config", "above)", "reference"]
    p = geak("optimize", "ref.py::add_relu", "--max-configs", "3", "--trials", "1", "--out", str(out),
             "--untimed", "--preview", cwd=project.root)
    assert p.returncode == 1, p.stderr  # verified correct, but nothing is known to be faster
    assert "preview of the untimed edit" in p.stderr and "+@triton.autotune(" not in p.stderr
    assert p.stdout.startswith("--- a/ref.py\n+++ b/ref.py\n") and "+@triton.autotune(" in p.stdout  # `> x.diff`
    assert "verdict" not in p.stdout and "verdict    NO VERIFIED IMPROVEMENT" in p.stderr
    assert f"wrote {out}: an @triton.autotune over the original config and" in p.stderr
    assert "@triton.autotune(" in out.read_text() and "BLOCK': 256" in out.read_text()
    p = geak("eval", "ref.py::add_relu", "--candidate", "tuned.py::add_relu", "--trials", "1", cwd=project.root)
    assert p.returncode == 0, p.stderr
    p = geak("optimize", "ref.py::add_relu", "--untimed", cwd=project.root)
    assert p.returncode == 2 and "--untimed goes with --out" in p.stderr


def test_version_comes_from_the_package_metadata(project):
    from importlib.metadata import version
    p = geak("--version", cwd=project.root)
    assert p.returncode == 0 and p.stdout.strip() == f"geak {version('geak')}"


def test_the_tuning_table_fits_a_narrow_terminal_and_gives_every_failure_its_reason(project):
    # A block of 64 for a kernel whose output is written in blocks of BLOCK: halving it would
    # still be correct, so make a knob that changes results: a block that must cover the row.
    project.write("rows.py", (ROOT / "examples" / "softmax.py").read_text())
    p = geak("optimize", "rows.py::softmax", "--max-configs", "6", "--trials", "1", cwd=project.root,
             env={"COLUMNS": "80"})
    assert p.returncode == 1, p.stderr
    assert "config(s) to check" in p.stderr and "the first batch tells how long each takes" in p.stderr
    assert all(len(ln) <= 80 for ln in p.stdout.splitlines()), [ln for ln in p.stdout.splitlines() if len(ln) > 80]
    assert "configs verified correct" in p.stdout.replace("\n           ", " ") and \
        "timing needs a GPU" in p.stdout.replace("\n           ", " ")
    rows = p.stdout.split("  config (what differs")[1].split("\n\n")[0]
    assert "num_warps=4" not in rows.split("reference")[1]  # the original's own value is not repeated
    marks = {m for m in __import__("re").findall(r"(?:mismatch|pruned|ruled out) \[(\d+)\]", rows)}
    assert marks, rows  # softmax's halved row block fails: its rows point at their reasons
    for m in marks:
        assert f"  [{m}] " in rows, (m, rows)
    assert "[1] " in rows and ("wrong result" in rows or "spills" in rows)
