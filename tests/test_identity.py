"""The same computation gets the same verdict under any file name: the user's own objects
(a config object, a dataclass, an nn.Module) are compared by what they hold, not by the name of
the module their class lives in (which a copy of the file changes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Project

OBJECTS = (Path(__file__).parent / "identity" / "objects.py").read_text()


@pytest.fixture
def p(tmp_path) -> Project:
    return Project(tmp_path).write("objects.py", OBJECTS)


@pytest.mark.parametrize("name", ["dup_objects.py", "other/kernels_v2.py"])
def test_a_byte_identical_copy_under_another_name_is_correct(p, runner, name):
    p.write(name, OBJECTS)
    r = p.evaluate(runner, "objects.py::axpb", f"{name}::axpb")
    assert r.status == "ok" and r.correct, r.message


def test_an_object_left_in_another_state_is_still_wrong(p, runner):
    # The copy changes the config object it is given: what the object holds is compared.
    p.write("mutates.py", OBJECTS.replace("    out = torch.empty_like(x)\n",
                                          "    out = torch.empty_like(x)\n    cfg.block = 64\n", 1))
    r = p.evaluate(runner, "objects.py::axpb", "mutates.py::axpb")
    assert r.status == "mismatch" and not r.correct, r.message
    assert "['fields']['block']" in r.message and "64" in r.message, r.message


def test_a_module_left_in_another_mode_is_wrong(p, runner):
    p.write("trains.py", OBJECTS.replace("    out = torch.empty_like(x)\n",
                                         "    out = torch.empty_like(x)\n    mod.train(False)\n", 1))
    r = p.evaluate(runner, "objects.py::axpb", "trains.py::axpb")
    assert r.status == "mismatch" and "['fields']['training']" in r.message, r.message


def test_a_candidate_named_like_a_standard_library_module_is_told_so(p, runner):
    p.write("copy.py", OBJECTS)
    r = p.evaluate(runner, "objects.py::axpb", "copy.py::axpb")
    assert r.status == "compile_error" and r.error.kind == "shadows_stdlib", r.message
    assert "named like the standard library's module 'copy'" in r.message and "rename copy.py" in r.error.hint


def test_an_original_that_cannot_run_here_is_not_blamed_on_its_copy(p, runner):
    # As three TritonBench-G files do on the CPU ("CUDA tensors only"): the original's own test
    # fails before any kernel runs, and a byte-identical copy fails the same way.
    text = OBJECTS.replace("    x = torch.randn(300, device=\"cuda\")\n",
                           "    raise RuntimeError(\"CUDA tensors only\")\n")
    p.write("gpu_only.py", text).write("dup_gpu_only.py", text)
    r = p.evaluate(runner, "gpu_only.py::axpb", "dup_gpu_only.py::axpb")
    assert r.status == "runtime_error" and r.error.kind == "original_fails_here" and r.error.side == "reference"
    assert "the original's own test fails on this device (" in r.message and "CUDA tensors only" in r.message
    assert "no Triton kernel" not in r.message

