"""Input conventions, project-local imports and bad input, through the real runner."""

from __future__ import annotations

import pytest

from conftest import ADD_RELU, Project, kernel_variant
from runner.source import SourceError

KERNEL_ONLY = ADD_RELU.split("def add_relu(")[0]


# ----------------------------------------------------------------------------- conventions


def test_kernelbench_module_with_init_inputs(tmp_path, runner):
    p = Project(tmp_path)
    p.write("model.py", """
        import torch
        class Model(torch.nn.Module):
            def __init__(self, features):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.randn(features))
            def forward(self, x):
                return x * self.weight
        def get_init_inputs():
            return [32]
        def get_inputs():
            return [torch.randn(4, 32)]
    """)
    p.write("new.py", KERNEL_ONLY + """

class ModelNew(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(features))
    def forward(self, x):
        out = torch.empty_like(x)
        w = self.weight.expand_as(x).contiguous()
        n = x.numel()
        # x * w == relu(x*w) only when positive: use add_relu on (x*w, 0) is wrong; do it honestly
        mul_kernel[(triton.cdiv(n, 128),)](x, w, out, n, BLOCK=128)
        return out

@triton.jit
def mul_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * tl.load(w_ptr + offs, mask=m), mask=m)
""")
    r = p.evaluate(runner, "model.py::Model", "new.py::ModelNew")
    assert r.inputs_convention == "kernelbench"
    # Same seed, same parameter names and shapes: the candidate gets the reference's weights.
    assert r.status == "ok", r.message
    assert r.launches["candidate"] == ["mul_kernel"]


def test_tritonbench_style_test_function(tmp_path, runner):
    p = Project(tmp_path)
    p.write("tb.py", ADD_RELU.split("INPUT_CASES")[0] + """
def test_add_relu():
    results = {}
    for n in (100, 700):
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        results[n] = add_relu(x, y)
    return results
""")
    p.write("cand.py", kernel_variant(block=64))
    r = p.evaluate(runner, "tb.py::add_relu", "cand.py::add_relu")
    assert r.inputs_convention == "tritonbench"
    assert [c.label for c in r.cases] == ["test_add_relu call 1", "test_add_relu call 2"]
    assert "float32[100]" in r.cases[0].shapes and "float32[700]" in r.cases[1].shapes
    assert r.status == "ok", r.message
    bad = kernel_variant(store_mask="mask & (offs < 512)")
    p.write("bad.py", bad)
    r = p.evaluate(runner, "tb.py::add_relu", "bad.py::add_relu")
    assert r.status == "mismatch"
    assert r.cases[0].passed and not r.cases[1].passed


def test_pytest_parametrize_style(tmp_path, runner):
    p = Project(tmp_path)
    p.write("pt.py", ADD_RELU.split("INPUT_CASES")[0] + """
import pytest

@pytest.mark.parametrize("n", [64, 333])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_add_relu(n, dtype):
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.randn(n, device="cuda", dtype=dtype)
    out = add_relu(x, y)
    torch.testing.assert_close(out, torch.relu(x + y))
""")
    r = p.evaluate(runner, "pt.py::add_relu")
    assert r.inputs_convention == "pytest"
    assert len(r.cases) == 4
    assert {"float16[333]", "float32[64]"} <= {c.shapes.split(": ")[1].split(",")[0] for c in r.cases}
    assert r.status == "ok", r.message


def test_users_own_test_failing_is_reported(tmp_path, runner):
    p = Project(tmp_path)
    p.write("tb.py", ADD_RELU.split("INPUT_CASES")[0] + """
def test_add_relu():
    x = torch.randn(50, device="cuda")
    out = add_relu(x, x)
    assert torch.allclose(out, x), "add_relu disagrees with the user's expectation"
""")
    r = p.evaluate(runner, "tb.py::add_relu")
    assert r.status == "ok"
    assert any("fails on the current code" in f.message for f in r.flags)


def test_wrapper_in_one_file_kernel_in_another(tmp_path, runner):
    p = Project(tmp_path)
    p.write("pkg/__init__.py", "")
    p.write("pkg/kernels.py", KERNEL_ONLY)
    p.write("pkg/ops.py", """
        import torch
        import triton
        from .kernels import add_relu_kernel

        def add_relu(x, y):
            out = torch.empty_like(x)
            add_relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
            return out

        def get_inputs():
            return [torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")]
    """)
    req = p.request("pkg/ops.py::add_relu")
    assert set(req.files) == {"pkg/__init__.py", "pkg/kernels.py", "pkg/ops.py"}
    r = runner.evaluate(req)
    assert r.status == "ok", r.message
    assert r.launches["reference"] == ["add_relu_kernel"]


def test_unsaved_editor_text_is_what_runs(project, runner):
    from runner.source import build_request
    project.write("cand.py", kernel_variant())
    # The editor holds an unsaved ref.py without the ReLU; the file on disk has it.
    unsaved = ADD_RELU.replace("tl.maximum(x + y, 0.0)", "x + y")
    req, _, _ = build_request("ref.py::add_relu", "cand.py::add_relu", root=project.root,
                              cwd=project.root, overrides={"ref.py": unsaved})
    assert req.files["ref.py"] == unsaved
    r = runner.evaluate(req)
    assert r.status == "mismatch"  # the candidate matches the disk, not the buffer


def test_naming_the_kernel_evaluates_its_wrapper(project, runner):
    req = project.request("ref.py::add_relu_kernel")
    assert req.target.symbol == "add_relu"
    r = runner.evaluate(req)
    assert r.status == "ok"


def test_bf16_cases_are_skipped_under_the_interpreter(tmp_path, runner):
    p = Project(tmp_path)
    p.write("k.py", ADD_RELU.replace('INPUT_CASES = [dict(n=300), dict(n=2048)]',
                                     'INPUT_CASES = [dict(n=300), dict(n=300, dtype=torch.bfloat16)]')
            .replace('def get_inputs(n=300):\n    return [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]',
                     'def get_inputs(n=300, dtype=torch.float32):\n    return [torch.randn(n, device="cuda", dtype=dtype), '
                     'torch.randn(n, device="cuda", dtype=dtype)]'))
    r = p.evaluate(runner, "k.py::add_relu")
    assert r.status == "ok", r.message
    assert r.cases[0].passed
    assert "bfloat16" in r.cases[1].skipped and "GPU" in r.cases[1].skipped


def test_bf16_only_is_upcast_rather_than_nothing_checked(tmp_path, runner):
    p = Project(tmp_path)
    p.write("k.py", ADD_RELU.replace('INPUT_CASES = [dict(n=300), dict(n=2048)]\n', '').replace(
        'torch.randn(n, device="cuda"), torch.randn(n, device="cuda")',
        'torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)'))
    r = p.evaluate(runner, "k.py::add_relu")
    assert r.status == "ok", r.message
    assert "upcast" in r.cases[0].detail


# ----------------------------------------------------------------------------- bad input


def test_syntax_error_names_file_and_line(project):
    project.write("bad.py", "def add_relu(x, y):\n    return (x +\n")
    with pytest.raises(SourceError) as e:
        project.request("bad.py::add_relu")
    assert e.value.info.kind == "syntax_error"
    assert e.value.info.file == "bad.py" and e.value.info.line in (2, 3)


def test_candidate_syntax_error(project):
    project.write("cand.py", "def add_relu(x, y)\n    pass\n")
    with pytest.raises(SourceError) as e:
        project.request("ref.py::add_relu", "cand.py::add_relu")
    assert e.value.info.side == "candidate" and e.value.info.line == 1


def test_missing_symbol_lists_what_is_there(project):
    with pytest.raises(SourceError) as e:
        project.request("ref.py::add_gelu")
    assert e.value.info.kind == "missing_symbol"
    assert "add_relu" in e.value.info.hint


def test_no_input_convention(project):
    project.write("noin.py", ADD_RELU.split("INPUT_CASES")[0])
    with pytest.raises(SourceError) as e:
        project.request("noin.py::add_relu")
    assert e.value.info.kind == "no_inputs"
    assert "get_inputs()" in e.value.info.hint


def test_get_inputs_that_fails(project, runner):
    project.write("k.py", ADD_RELU.replace('return [torch.randn(n, device="cuda")',
                                           'return [torch.randn(n, device="cuda").reshape(7, -1)'))
    r = project.evaluate(runner, "k.py::add_relu")
    assert r.status == "runtime_error" and r.error.kind == "bad_inputs"
    assert r.error.side == "reference"
    assert "building inputs" in r.message and "RuntimeError" in r.message
    assert 'File "k.py"' in r.error.traceback


def test_bad_input_cases_value(project, runner):
    project.write("k.py", ADD_RELU.replace("INPUT_CASES = [dict(n=300), dict(n=2048)]", "INPUT_CASES = [300]"))
    r = project.evaluate(runner, "k.py::add_relu")
    assert r.error.kind == "bad_inputs" and "INPUT_CASES" in r.message


def test_signature_mismatch(project, runner):
    project.write("cand.py", kernel_variant().replace("def add_relu(x, y):", "def add_relu(x, y, alpha):"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and r.error.kind == "signature_mismatch"
    assert "(x, y, alpha)" in r.message and "(x, y)" in r.message


def test_reference_that_raises(project, runner):
    project.write("k.py", ADD_RELU.replace("    out = torch.empty_like(x)\n",
                                           "    out = torch.empty_like(x)\n    raise ValueError('boom')\n"))
    r = project.evaluate(runner, "k.py::add_relu")
    assert r.status == "runtime_error" and r.error.side == "reference"
    assert "ValueError: boom" in r.message
    assert 'File "k.py", line' in r.error.traceback
    assert "runner/" not in r.error.traceback  # trimmed to the user's frames


def test_candidate_import_error(project, runner):
    project.write("cand.py", "import flash_attn_that_is_not_installed\n" + kernel_variant())
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "compile_error" and r.error.kind == "import_error"
    assert "flash_attn_that_is_not_installed" in r.message


def test_triton_kernel_error_in_candidate(project, runner):
    # tl.arange needs a power-of-two range: the interpreter reports it at launch.
    project.write("cand.py", kernel_variant(block=100))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status in ("compile_error", "runtime_error")
    assert r.error.side == "candidate"
    assert "cand.py" in (r.error.traceback or "") or "cand.py" in r.message


def test_out_of_gpu_memory_is_recognised_also_through_the_nvml_assert():
    from runner.worker.errors import out_of_device_memory
    assert out_of_device_memory(RuntimeError(
        'NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
        '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135, please report a bug to PyTorch.'))
    assert out_of_device_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not out_of_device_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))


def test_a_gpu_fault_says_whose_code_faulted(tmp_path):
    """A fault in the original's process is the original's: the message says so, and why a plain run
    of the same code may not fault; a candidate's fault keeps the plain advice."""
    from runner.worker.errors import classify
    from runner.worker.trees import Trees
    trees = Trees(tmp_path, {"k.py": ""}, {}, set(), False)
    exc = RuntimeError("CUDA error: an illegal memory access was encountered")
    ref = classify(exc, "reference", "test_k", trees)
    cand = classify(exc, "candidate", "test_k", trees)
    assert ref.status == cand.status == "crashed" and ref.retire and cand.retire
    assert "fault in the original" in ref.message and "guard bands" in ref.hint
    assert "original" not in cand.message and "guard bands" not in cand.hint


def test_a_candidate_whose_test_raises_is_told_so_not_that_it_launched_nothing(tmp_path, runner):
    """A test that raises on the candidate before its kernel runs is a wrong result that says
    what the test raised; "launched no Triton kernel" is for candidates whose outputs are right."""
    p = Project(tmp_path)
    base = ADD_RELU.split("INPUT_CASES")[0]
    test = """
def test_add_relu():
    x = torch.randn(700, device="cuda")
    return {"a": add_relu(x, torch.randn(700, device="cuda"))}
"""
    p.write("tb.py", base + test)
    p.write("cand.py", base.replace("    add_relu_kernel[", "    raise ValueError('boom')\n    add_relu_kernel[") + test)
    r = p.evaluate(runner, "tb.py::add_relu", "cand.py::add_relu", trials=1, unit="tests")
    assert r.status == "mismatch" and not r.correct, r.message
    assert "the test raises ValueError" in r.message and "boom" in r.message, r.message


def test_a_module_whose_constructor_raises_is_the_users_error_not_the_evaluators(runner, tmp_path):
    from conftest import Project
    p = Project(tmp_path / "p").write("m.py", '''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, channels, groups):
                super().__init__()
                self.norm = nn.GroupNorm(groups, channels)

            def forward(self, x):
                return self.norm(x)


        def get_inputs():
            return [torch.randn(2, 12, 4)]


        def get_init_inputs():
            return [12, 8]
        ''')
    r = p.evaluate(runner, "m.py::Model")
    assert r.status == "runtime_error" and not r.correct
    assert r.message.startswith("building Model(*get_init_inputs()): ValueError"), r.message
    assert "internal error" not in r.message


def test_the_interpreter_device_maps_cuda_devices_and_leaves_sizes_alone():
    """Code written for the GPU, under the CPU interpreter: devices become the CPU, and
    ``new_empty``'s sizes stay sizes (on a machine with a GPU, ``torch.device(100)`` is
    ``cuda:100``, and a size once read as a device was replaced by "cpu")."""
    import torch

    from runner.worker.guards import InterpreterDevice
    x = torch.zeros(3)
    with InterpreterDevice():
        a = x.new_empty(100)
        b = x.new_empty((2, 5), device="cuda")
        c = torch.ones(4, device="cuda")
        d = x.to("cuda")
    assert a.shape == (100,) and b.shape == (2, 5)
    assert {t.device.type for t in (a, b, c, d)} == {"cpu"}
