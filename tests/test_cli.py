"""`geak eval` through its real entry point, as a user runs it."""

import json
import subprocess
import sys

from conftest import ROOT, kernel_variant


def geak(*args, cwd):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


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
    assert "MISMATCH" in p.stderr and "n=2048: output[1000]" in p.stderr
    assert p.stdout == ""


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
    assert "ZeroDivisionError" in p.stderr and 'File "k.py", line' in p.stderr


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
    assert p.returncode == 2
    assert "torch sees no GPU" in p.stderr


def test_geak_runner_info_reports_the_device():
    p = subprocess.run([sys.executable, "-m", "runner.cli", "info", "--device", "interpreter", "--json"],
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["backend"] == "interpreter" and doc["torch"] and doc["triton"]
