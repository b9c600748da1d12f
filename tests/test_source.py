"""Static analysis: targets, local imports, conventions, source-level suspicions."""

from pathlib import Path

import pytest

from runner.source import (SourceError, analyze_target, collect_files, input_conventions, parse,
                           parse_spec, static_flags)


def test_parse_spec():
    assert parse_spec("a/b.py::f") == ("a/b.py", "f")
    for bad in ("a.py", "a.py::", "::f", "a.py::1f"):
        with pytest.raises(SourceError):
            parse_spec(bad)


def test_kernel_resolves_to_wrapper_and_kinds():
    src = '''
import triton
import triton.language as tl
import torch

@triton.autotune(configs=[], key=["n"])
@triton.jit
def k(x_ptr, n, B: tl.constexpr):
    pass

def wrapper(x):
    k[(1,)](x, x.numel(), B=128)
    return x

class M(torch.nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return []
'''
    info = analyze_target(src, "f.py", "k")
    assert info.symbol == "wrapper" and info.kind == "wrapper" and info.kernels == ["k"]
    assert "launching wrapper" in info.note
    assert analyze_target(src, "f.py", "M").kind == "module"
    assert analyze_target(src, "f.py", "wrapper").conventions == ["kernelbench"]


def test_kernel_without_wrapper_is_explained():
    src = "import triton\n@triton.jit\ndef k(x):\n    pass\n"
    with pytest.raises(SourceError, match="no function in this file launches it"):
        analyze_target(src, "f.py", "k")


def test_conventions():
    assert input_conventions(parse("def get_inputs(): pass\nINPUT_CASES = []\n", "f")) == ["cases"]
    assert input_conventions(parse("def test_a(): pass\n", "f")) == ["tritonbench"]
    assert input_conventions(parse("def test_a(n): pass\n", "f")) == ["pytest"]
    assert input_conventions(parse("def f(): pass\n", "f")) == []


def test_collect_files_follows_local_imports_only(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("from .helpers import h\n")
    (tmp_path / "lib" / "helpers.py").write_text("import torch\nimport numpy\ndef h(): pass\n")
    (tmp_path / "util.py").write_text("X = 1\n")
    (tmp_path / "main.py").write_text("import os\nimport util\nfrom lib import h\n")
    files = collect_files(tmp_path / "main.py", tmp_path)
    assert set(files) == {"main.py", "util.py", "lib/__init__.py", "lib/helpers.py"}
    # Unsaved text wins over the disk.
    files = collect_files(tmp_path / "main.py", tmp_path, {"util.py": "X = 2\n"})
    assert files["util.py"] == "X = 2\n"


def test_collect_files_ships_the_target_under_a_hidden_folder(tmp_path: Path):
    # Task folders such as .ext/tasks/x.py: the file asked for is shipped; what it imports from
    # under hidden folders (a .venv in the project) is installed code and is not.
    (tmp_path / "pyproject.toml").write_text("[project]\nname='p'\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text("X = 1\n")
    (tmp_path / ".tasks").mkdir()
    (tmp_path / ".tasks" / "k.py").write_text("import sys\nsys.path.insert(0, '.venv')\nfrom lib import X\n")
    files = collect_files(tmp_path / ".tasks" / "k.py", tmp_path)
    assert list(files) == [".tasks/k.py"]


def test_static_flags():
    src = '''
import ctypes
import time
import torch
import torch.nn.functional as F
class ModelNew(Model):
    def forward(self, x):
        s = torch.cuda.Stream()
        try:
            return kernel(x)
        except Exception:
            return F.softmax(x, -1)
time.perf_counter = lambda: 0
g = torch._C._DisableTorchDispatch()
'''
    codes = {f.code: f.severity for f in static_flags(src, "c.py", "ModelNew", "Model")}
    assert codes["suspicious_import"] == "warning"
    assert codes["inherits_reference"] == "warning"
    assert codes["side_stream"] == "warning"
    assert codes["fallback_path"] == "warning"
    assert codes["timer_tampering"] == "warning"
    assert codes["hides_torch_ops"] == "reject"
    assert codes["torch_call_in_source"] == "info"
