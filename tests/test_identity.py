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
    # geak bench leaves such a task out of every figure, and counts it: it says nothing of the copy.
    from agent.bench.metrics import sample_from_result, summarize
    s = sample_from_result(r)
    assert s.not_checkable and "CUDA tensors only" in s.not_checkable and not s.not_run
    summary = summarize([[s], [sample_from_result(p.evaluate(runner, "objects.py::axpb", "objects.py::axpb"))]])
    assert summary.not_checkable == 1 and summary.tasks == 1 and summary.execution_accuracy == 1.0



TBG = Path(__file__).parent / "identity" / "tbg" / "scaled_rows.py"


def _tbg_verdict(runner, tmp_path, candidate_text: str):
    """A TritonBench-G-style task (its test calls a helper through an autograd.Function)
    judged against a candidate file of another name, as `geak bench` and the sweep do."""
    from agent.bench.tasks import load_suite
    from runner.schema import EvalOptions, Target
    (tmp_path / "scaled_rows.py").write_text(TBG.read_text())
    (tmp_path / "pyproject.toml").write_text("")
    task = load_suite(tmp_path, "tritonbench", "scaled_rows")[0][0]
    req = task.request(EvalOptions(trials=1))
    req.candidate = Target("cand_scaled_rows.py", task.symbol)
    req.candidate_files = {"cand_scaled_rows.py": candidate_text}
    return runner.evaluate(req)


def test_a_helper_the_test_reaches_may_be_renamed_but_not_changed(runner, tmp_path):
    """The test's calls are paired in the order they were made: a renamed helper making the same
    calls with the same values is the same computation (TritonBench-G's fifth_order_sph_harmonics
    in the identity sweep); a renamed helper that returns another value is still wrong, and the
    verdict names both names."""
    text = TBG.read_text()
    renamed = text.replace("lastdim_blocks", "blocks_v2")
    r = _tbg_verdict(runner, tmp_path, renamed)
    assert r.correct, r.message
    wrong = renamed.replace("return triton.cdiv(x.numel(), block)", "return triton.cdiv(x.numel(), block) + 1")
    r = _tbg_verdict(runner, tmp_path, wrong)
    assert r.status == "mismatch", r.message
    assert "lastdim_blocks; in the candidate blocks_v2" in r.message, r.message
    more = text.replace("        out = torch.empty_like(x)\n", "        out = torch.empty_like(x)\n        lastdim_blocks(x, 1)\n")
    r = _tbg_verdict(runner, tmp_path, more)
    assert r.status == "mismatch" and "the test calls" in r.message, r.message


def test_an_object_keeping_an_address_into_its_own_tensor_is_compared_by_the_offset(runner, tmp_path):
    """TritonBench-G's relu_strided_buffer passes a ``StridedBuffer`` that keeps its base
    tensor's ``data_ptr()`` plus an offset as an integer field. Where the base tensor lands
    differs between runs (on an H100 its original was "cannot be checked": the field differed
    between two runs of the original): the field is compared as the offset into the tensor the
    object holds. A copy under another name is correct; a copy that keeps another offset is not."""
    text = (Path(__file__).parent / "identity" / "view.py").read_text()
    p = Project(tmp_path).write("view.py", text).write("dup_view.py", text)
    r = p.evaluate(runner, "view.py::shifted_copy", "dup_view.py::shifted_copy", trials=3)
    assert r.status == "ok" and r.correct, r.message
    other = text.replace("offset * base.element_size()", "(offset + 1) * base.element_size()")
    p.write("off_view.py", other)
    r = p.evaluate(runner, "view.py::shifted_copy", "off_view.py::shifted_copy")
    assert r.status == "mismatch" and "_data_ptr" in r.message and "bytes" in r.message, r.message


def test_an_address_field_is_recorded_as_its_offset():
    import torch
    from runner.worker.exchange import to_plain

    class Holder:
        def __init__(self, base, k):
            self.base, self.ptr, self.n = base, base.data_ptr() + k, 7

    a, b = torch.zeros(4096), torch.zeros(8192)
    ra, rb = to_plain(Holder(a, 40)), to_plain(Holder(b[4096:], 40))
    assert ra["fields"]["ptr"] == "<address in base's memory + 40 bytes>"
    assert rb["fields"]["ptr"] == "<address in base's memory + 16424 bytes>"  # the view's storage: 4096 floats in
    assert ra["fields"]["n"] == 7 and to_plain(Holder(a, 44))["fields"]["ptr"] != ra["fields"]["ptr"]
    far = Holder(a, 0)
    far.ptr = a.data_ptr() + 10 * a.untyped_storage().nbytes()  # not inside: left as the number
    assert to_plain(far)["fields"]["ptr"] == far.ptr
