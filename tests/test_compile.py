"""The ``compile`` strategy: PyTorch's compiler (Inductor) writes the Triton, GEAK makes it a
standalone file, and the evaluator verifies it against the original on the CPU interpreter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from agent.compile.standalone import CannotWrite, write
from agent.optimize import optimize
from conftest import ROOT, Project

FIXTURES = ROOT / "tests" / "compile_fixtures"


def _project(tmp_path, *names: str) -> Project:
    p = Project(tmp_path / "proj")
    for n in names:
        shutil.copy(FIXTURES / n, p.root / n)
    return p


def _generated(runner, project: Project, target: str) -> dict:
    r = runner.evaluate(project.request(target).with_candidate(None, trials=1, timing=False, inductor=True))
    assert r.correct, r.message
    assert r.phases.get("generate", 0) > 0
    return r.generated


def test_a_fused_function_becomes_a_verified_standalone_triton_file(runner, tmp_path):
    p = _project(tmp_path, "functions.py")
    gen = _generated(runner, p, "functions.py::gelu_sum")
    w = write((p.root / "functions.py").read_text(), "gelu_sum", gen)
    assert len(w.kernels) == 1 and "gelu" in w.kernels[0].fuses and "sum" in w.kernels[0].fuses
    assert "torch._inductor" not in w.text and "triton_helpers" not in w.text
    assert "@triton.jit" in w.text and "def gelu_sum(x, y):" in w.text
    # The other functions of the file are left as they were.
    assert "def branchy(x, y):\n    if x.sum() > 0:" in w.text
    req = p.request("functions.py::gelu_sum")
    r = runner.evaluate(req.with_candidate(w.text))
    assert r.verified, r.message
    assert r.launches["candidate"] == [w.kernels[0].name]


def test_two_outputs_and_a_module_with_a_library_convolution(runner, tmp_path):
    p = _project(tmp_path, "functions.py", "fused_module.py")
    out = optimize(p.request("functions.py::norm_and_max"), "compile", runner)
    assert out.source and out.untimed and out.result.verified, out.message
    out = optimize(p.request("fused_module.py::Model"), "compile", runner)
    assert out.source and out.result.verified, out.message
    assert "torch.convolution" in out.source and any("torch.convolution" in n for n in out.notes)
    assert "self.conv.weight" in out.source  # the module's own parameters, by name


def test_nothing_for_triton_is_said(runner, tmp_path):
    p = _project(tmp_path, "functions.py")
    out = optimize(p.request("functions.py::only_matmul"), "compile", runner)
    assert out.source is None and "no Triton kernel" in out.message, out.message


def test_the_writer_refuses_what_it_cannot_write():
    with pytest.raises(CannotWrite, match="graph break here"):
        write("def f(x):\n    return x\n", "f", {"error": "graph break here"})
    with pytest.raises(CannotWrite, match="no Triton kernel"):
        write("def f(x):\n    return x\n", "f", {"code": "def call(args):\n    return ()\n", "inputs": [],
                                                   "returns": {"kind": "tensor", "n": 1}})


@pytest.mark.parametrize("task", ["softmax", "rmsnorm"])
def test_the_suites_pytorch_references_become_verified_triton(runner, tmp_path, task):
    p = Project(tmp_path / "proj")
    shutil.copy(ROOT / "benchmarks" / f"{task}.py", p.root / f"{task}.py")
    out = optimize(p.request(f"{task}.py::{task}_reference", trials=1), "compile", runner)
    assert out.source and out.result.verified, out.message


def test_the_cli_writes_the_file_and_a_graph_break_is_one_clear_message_with_the_line(tmp_path):
    p = _project(tmp_path, "functions.py")
    cmd = [sys.executable, "-m", "agent.cli", "optimize", "functions.py::gelu_sum", "--strategy", "compile",
           "--device", "interpreter", "--json"]
    r = subprocess.run(cmd, cwd=p.root, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["strategy"] == "compile" and doc["untimed"] and "@triton.jit" in doc["source"]
    assert "verified" in r.stderr
    bad = subprocess.run([sys.executable, "-m", "agent.cli", "optimize", "functions.py::branchy", "--strategy",
                          "compile", "--device", "interpreter"], cwd=p.root, capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    # A graph break: no file, one clear message with the line (the strategy's message, as printed).
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "Traceback" not in bad.stdout
    assert "cannot take this function as one graph at functions.py:17" in bad.stderr, bad.stderr
