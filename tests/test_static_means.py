"""The static check of the means of in-process forgery (``runner.source.means_flags``), decided
where the verdict is (``runner.judge.verdict``, ``runner.serve.local.check_request``).

Every candidate in tests/attacks/static/ is right and uses one means, harmlessly; its docstring
says ``Expect: CODE SEVERITY [in FILE]`` and the line of the means carries ``# means``. Each is
checked three ways: the flag (code, severity, file:line) as the client and the runner compute
it; at the runner's front door (a reject ends ``rejected`` before any worker is taken); and
run for real with the front door off (the candidate runs, is judged right, and the verdict is
still ``rejected``). Warnings do not block. Real code (this project's examples and benchmarks)
gets no reject; the third-party corpora are measured by scripts/static_means_corpus.py.
"""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

import pytest
from conftest import ADD_RELU, ROOT, Project, flag_codes

from runner.serve.local import LocalRunner
from runner.schema import EvalRequest, Target, to_json
from runner.source import build_request, candidate_flags, means_flags, static_flags

STATIC = Path(__file__).resolve().parent / "attacks" / "static"
SUPPORT = sorted(p.name for p in STATIC.glob("_*.py"))
CANDIDATES = sorted(p.name for p in STATIC.glob("*.py") if not p.name.startswith("_"))


def expectation(name: str) -> tuple[str, str, str]:
    """(code, severity, file the means is in) from the candidate's docstring."""
    m = re.search(r"^Expect: (\w+) (reject|warning)(?: in ([\w.]+))?", (STATIC / name).read_text(), re.M)
    assert m, f"{name}: no 'Expect: CODE SEVERITY' line"
    return m.group(1), m.group(2), m.group(3) or name


REJECTS = [n for n in CANDIDATES if expectation(n)[1] == "reject"]
WARNINGS = [n for n in CANDIDATES if expectation(n)[1] == "warning"]


def imported_text(path: Path) -> str:
    """The file as an import reads it (its coding cookie honoured)."""
    with open(path, "rb") as f:
        encoding, _ = tokenize.detect_encoding(f.readline)
    return path.read_bytes().decode(encoding)


def staged(tmp_path: Path, name: str) -> Project:
    p = Project(tmp_path).write("ref.py", ADD_RELU)
    for f in [*SUPPORT, name]:
        p.write(f, (STATIC / f).read_text())
    return p


def the_flag(flags, name: str):
    code, severity, where = expectation(name)
    found = [f for f in flags if f.code == code and f.severity == severity]
    assert found, f"{name}: no {code} ({severity}) among {[(f.code, f.severity, f.message) for f in flags]}"
    return found[0], where


@pytest.fixture(scope="module")
def front_door():
    r = LocalRunner(workers=1, device="interpreter", static_reject_first=True)
    yield r
    r.close()


def test_the_folder_has_both_kinds():
    assert len(REJECTS) >= 15 and len(WARNINGS) >= 3, (REJECTS, WARNINGS)
    codes = {expectation(n)[0] for n in REJECTS}
    assert {"reaches_evaluator", "heap_walk", "raw_memory", "hidden_thread", "spawns_process", "raw_socket",
            "raw_fd", "signal_handler", "dynamic_code", "frame_access", "object_internals", "tracing_hook",
            "reads_source"} <= codes


# ----------------------------------------------------------------------------- the flags


@pytest.mark.parametrize("name", CANDIDATES)
def test_each_means_is_flagged_where_it_stands(tmp_path, name):
    p = staged(tmp_path, name)
    req, _, flags = build_request("ref.py::add_relu", f"{name}::add_relu", root=p.root, cwd=p.root)
    flag, where = the_flag(flags, name)
    m = re.match(r"([\w.]+):(\d+): ", flag.message)
    assert m and m.group(1) == where, flag.message
    line = imported_text(STATIC / where).splitlines()[int(m.group(2)) - 1]
    assert "# means" in line, (flag.message, line)
    # Nothing else is rejected: each file uses one means.
    others = {f.code for f in flags if f.severity == "reject"} - {flag.code}
    assert not others, [f.message for f in flags if f.code in others]
    if flag.severity == "warning":
        assert not any(f.severity == "reject" for f in flags)
    # The runner computes the same flags from the request alone.
    assert [(f.code, f.severity, f.message) for f in candidate_flags(req)] == \
        [(f.code, f.severity, f.message) for f in flags]


# ----------------------------------------------------------------------------- the verdicts


@pytest.mark.parametrize("name", REJECTS)
def test_rejected_at_the_runners_front_door_before_anything_runs(front_door, tmp_path, name):
    p = staged(tmp_path, name)
    r = p.evaluate(front_door, "ref.py::add_relu", f"{name}::add_relu")
    assert r.status == "rejected" and not r.correct, r.message
    flag, where = the_flag(r.flags, name)
    assert r.message.startswith(flag.message) and r.message.startswith(f"{where}:"), r.message
    # No worker was involved: no case, no log, no sandbox report, no phase.
    assert r.cases == [] and not r.log and not r.sandbox and not r.phases


@pytest.mark.parametrize("name", REJECTS)
def test_rejected_at_the_verdict_when_it_runs(runner, tmp_path, name):
    # The session's runner lets rejected candidates run (conftest): this one runs, computes the
    # right answer, and the verdict, decided in the pool's process, still rejects it.
    p = staged(tmp_path, name)
    r = p.evaluate(runner, "ref.py::add_relu", f"{name}::add_relu", trials=1, cases=[0])
    assert r.status == "rejected" and not r.correct, r.message
    assert r.cases[0].trials >= 1 and r.cases[0].passed, r.cases
    flag, _ = the_flag(r.flags, name)
    assert flag.code in flag_codes(r, "reject") and r.message.startswith(flag.message), r.message


@pytest.mark.parametrize("name", WARNINGS)
def test_a_warning_does_not_block_a_right_candidate(front_door, tmp_path, name):
    p = staged(tmp_path, name)
    r = p.evaluate(front_door, "ref.py::add_relu", f"{name}::add_relu", trials=1, cases=[0])
    assert r.status == "ok" and r.correct, r.message
    the_flag(r.flags, name)
    assert not flag_codes(r, "reject")


def test_a_request_that_skipped_the_client_gets_the_same_flags(front_door, runner, tmp_path):
    name = "gc_referrers.py"
    p = staged(tmp_path, name)
    built, _, client_flags = build_request("ref.py::add_relu", f"{name}::add_relu", root=p.root, cwd=p.root)
    assert sorted(built.candidate_files) == ["_kernel.py", name]
    # Built by hand, as another client (or a forged one) would send it.
    req = EvalRequest(target=Target("ref.py", "add_relu"), files={"ref.py": ADD_RELU},
                      candidate=Target(name, "add_relu"),
                      candidate_files={f: (STATIC / f).read_text() for f in ("_kernel.py", name)})
    r = front_door.evaluate(req)
    assert r.status == "rejected" and not r.correct, r.message
    shown = [(f.code, f.severity, f.message) for f in client_flags]
    assert [(f.code, f.severity, f.message) for f in r.flags] == shown
    # Straight to the pool, past the runner's front door: the verdict rejects it.
    r = runner.pool.evaluate(EvalRequest(target=req.target, files=req.files, candidate=req.candidate,
                                         candidate_files=req.candidate_files))
    assert r.status == "rejected" and not r.correct and "heap_walk" in flag_codes(r, "reject"), r.message
    assert r.cases and r.cases[0].passed  # it ran, and was right


def test_the_daemon_and_a_ray_actor_reject_it_too(tmp_path):
    from test_daemon import Daemon

    from runner.serve.ray import EvalActor
    from runner.schema import result_from_json
    name = "import_runner.py"
    (tmp_path / "p").mkdir()
    p = staged(tmp_path / "p", name)
    req = p.request("ref.py::add_relu", f"{name}::add_relu", trials=1)
    actor = EvalActor("interpreter", 1)  # the class RayRunner makes a Ray actor of
    try:
        r = result_from_json(actor.evaluate(to_json(req)))
    finally:
        actor.close()
    assert r.status == "rejected" and not r.correct and "reaches_evaluator" in flag_codes(r, "reject"), r.message
    d = Daemon(tmp_path / "state").start()
    try:
        r = d.client().evaluate(req)
    finally:
        d.stop()
    assert r.status == "rejected" and not r.correct and "reaches_evaluator" in flag_codes(r, "reject"), r.message


def test_what_the_original_already_does_is_a_warning(front_door, tmp_path):
    # The user's own code runs generated code (as FlagGems does); a candidate that keeps doing
    # so is told, not rejected. A means the original does not use is still a reject.
    ref = ADD_RELU.replace("def add_relu(x, y):\n", "exec('_GENERATED = 1')\n\n\ndef add_relu(x, y):\n", 1)
    p = Project(tmp_path).write("ref.py", ref)
    p.write("_kernel.py", (STATIC / "_kernel.py").read_text())
    p.write("keeps.py", (STATIC / "exec_code.py").read_text())
    r = p.evaluate(front_door, "ref.py::add_relu", "keeps.py::add_relu", trials=1, cases=[0])
    assert r.status == "ok" and r.correct, r.message
    assert any(f.code == "dynamic_code" and f.severity == "warning" and "as the original does" in f.message
               for f in r.flags), r.flags
    p.write("adds.py", (STATIC / "getframe.py").read_text())
    r = p.evaluate(front_door, "ref.py::add_relu", "adds.py::add_relu")
    assert r.status == "rejected" and "frame_access" in flag_codes(r, "reject"), r.message


def test_the_target_against_itself_gets_no_static_flags(front_door, tmp_path):
    p = Project(tmp_path).write("ref.py", ADD_RELU.replace("import torch\n", "import torch\nimport gc\n", 1))
    r = p.evaluate(front_door, "ref.py::add_relu", trials=1, cases=[0])
    assert r.status == "ok" and r.correct, r.message
    assert not any(f.code == "suspicious_import" for f in r.flags), r.flags


def test_this_projects_examples_and_benchmarks_get_no_reject():
    files = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(files) > 20
    for f in files:
        rejects = [x.message for x in static_flags(f.read_text(), f.name, "", "") if x.severity == "reject"]
        assert not rejects, rejects
    _, _, flags = build_request("examples/softmax.py::softmax", "examples/softmax_fast.py::softmax", root=ROOT,
                                cwd=ROOT)
    assert not [f for f in flags if f.severity == "reject"], flags


# ----------------------------------------------------------------------------- the resolver


def codes(src: str) -> dict[str, str]:
    """code -> the strongest severity the means scan gives ``src``."""
    out: dict[str, str] = {}
    for f in means_flags(src, "c.py"):
        if out.get(f.code) != "reject":
            out[f.code] = f.severity
    return out


@pytest.mark.parametrize("src, code", [
    ("from os import fork as f\nf()", "spawns_process"),
    ("import os\nf = os.fork\ng = f\ng()", "spawns_process"),
    ("import os\ngetattr(os, 'fork')()", "spawns_process"),
    ("import os as o\no.execvp('x', ['x'])", "spawns_process"),
    ("import pty", "spawns_process"),
    ("import subprocess\nsubprocess.Popen(['x'], pass_fds=(3,))", "spawns_process"),
    ("__builtins__['exec']('1')", "dynamic_code"),
    ("import builtins\nbuiltins.exec('1')", "dynamic_code"),
    ("compile('1', 'x', 'eval')", "dynamic_code"),
    ("exec('import runner')", "reaches_evaluator"),
    ("eval('__import__(\"runner\")')", "reaches_evaluator"),
    ("import importlib\nimportlib.import_module('runner')", "reaches_evaluator"),
    ("import sys\nsys.modules.get('runner.worker.guards')", "reaches_evaluator"),
    ("NAME = 'runner.worker.exchange'", "reaches_evaluator"),
    ("import runner.worker.channel as ch", "reaches_evaluator"),
    ("__import__(f\"{'run'}ner\")", "reaches_evaluator"),
    ("__import__(''.join(['run', 'ner']))", "reaches_evaluator"),
    ("from gc import get_objects", "heap_walk"),
    ("x.get_referents(y)", "heap_walk"),
    ("import ctypes\nctypes.cast(id(x), ctypes.POINTER(ctypes.c_char))", "raw_memory"),
    ("import ctypes\nctypes.c_long.from_address(a)", "raw_memory"),
    ("import ctypes\nctypes.pythonapi.Py_IncRef", "raw_memory"),
    ("import threading\nthreading._start_new_thread(f, ())", "hidden_thread"),
    ("import socket\nsocket.socket(fileno=3)", "raw_socket"),
    ("open(3, 'wb')", "raw_fd"),
    ("import os\nos.dup2(1, 3)", "raw_fd"),
    ("import signal\nsignal.setitimer(signal.ITIMER_REAL, 1)", "signal_handler"),
    ("def f(e):\n    return e.__traceback__.tb_frame.f_back", "frame_access"),
    ("import inspect\ninspect.currentframe()", "frame_access"),
    ("import builtins\nsetattr(builtins, 'len', f)", "object_internals"),
    ("f.__code__ = g.__code__", "object_internals"),
    ("f.__closure__[0].cell_contents", "object_internals"),
    ("import sys\nsys.setprofile(f)", "tracing_hook"),
    ("import threading\nthreading.settrace(f)", "tracing_hook"),
    ("import gc\ngc.callbacks.append(f)", "tracing_hook"),
    ("from pathlib import Path\nPath('ref' + '.py').read_text()", "reads_source"),
    ("import linecache", "reads_source"),
    ("import runpy", "reads_source"),
    ("import importlib.util\nimportlib.util.spec_from_file_location('m', 'ref.py')", "reads_source"),
    ("import importlib\nimportlib.reload(m)", "dynamic_import"),
    # names reached through another module, or given as strings
    ("import threading\nthreading._thread.start_new(f, ())", "hidden_thread"),
    ("import os\nos.sys._getframe(1)", "frame_access"),
    ("getattr(f, '__globals__')", "object_internals"),
    ("vars(type)['__subclasses__'](object)", "object_internals"),
    ("import inspect\ninspect.getclosurevars(f)", "object_internals"),
    ("import ctypes\nctypes.CDLL(None).memcpy(a, b, 3)", "raw_memory"),
    # what Python decodes, not the text: a line break in UTF-7
    ("# -*- coding: utf-7 -*-\nx = 1  # +AAo-import gc; gc.get_objects()\n", "heap_walk"),
])
def test_means_found_through_aliases_and_folding(src, code):
    assert codes(src).get(code) == "reject", (src, means_flags(src, "c.py"))


@pytest.mark.parametrize("src", [
    "model.eval()", "import re\nre.compile('x')", "import torch\ntorch.compile(f)",
    "def compile(x):\n    return x\ncompile(1)", "def f(signal):\n    signal.signal(1)",
    "import torch\ntorch.random.fork_rng()", "open('configs.json')",
    "from pathlib import Path\n(Path(__file__).parent / 'cfg.yaml').read_text()",
    "print('the runner says hi', 'runner.py')", "self.exec(x)", "x.f_backward",
    "import threading\nthreading.Thread(target=f).start()", "import os\nos.environ.get('X')",
    "import os\nos.path.join(os.path.dirname(__file__), 'kernels.json')",
    "def f(code):\n    return code.co_name", "import sys\nsys.exit(0)",
])
def test_ordinary_kernel_code_is_not_rejected(src):
    assert "reject" not in codes(src).values(), means_flags(src, "c.py")


@pytest.mark.parametrize("src, code", [
    ("import sys\nsys.modules[__name__]", "dynamic_import"),
    ("import importlib\nimportlib.import_module(name)", "dynamic_import"),
    ("eval(s)", "dynamic_code"),
    ("import subprocess\nsubprocess.run(['nvidia-smi'])", "runs_program"),
    ("import os\nos.system('true')", "runs_program"),
    ("import multiprocessing\nmultiprocessing.Pool(2)", "spawns_process"),
    ("import ctypes\nctypes.CDLL('libcuda.so')", "native_code"),
    ("f.__closure__", "object_internals"),
    ("import inspect\ninspect.getmembers(m)", "object_internals"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "signal_handler"),
    ("import importlib.util\nimportlib.util.spec_from_file_location(name, path)", "dynamic_import"),
])
def test_means_with_legitimate_uses_are_warnings(src, code):
    assert codes(src).get(code) == "warning", means_flags(src, "c.py")


def test_switching_off_the_dispatch_modes_is_rejected_however_it_is_imported():
    for src in ("from torch.utils._python_dispatch import _disable_current_modes",
                "import torch\nwith torch.utils._python_dispatch._disable_current_modes():\n    pass",
                "import torch\ng = torch._C._DisableTorchDispatch()"):
        assert ("hides_torch_ops", "reject") in {(f.code, f.severity) for f in static_flags(src, "c.py", "", "")}, src


def test_a_file_too_deep_to_read_is_rejected_and_one_that_does_not_parse_is_left_to_the_import():
    deep = "x = a" + ".b" * 2000 + "\n"
    compile(deep, "c.py", "exec")  # Python runs it
    assert codes(deep) == {"unreadable": "reject"}
    assert means_flags("def f(:\n", "c.py") == []


def test_one_flag_per_kind_names_the_first_line_and_counts_the_rest():
    src = "import os\nos.fork()\nos.fork()\nos.forkpty()\n"
    (flag,) = [f for f in means_flags(src, "k.py") if f.code == "spawns_process"]
    assert flag.message.startswith("k.py:2: uses os.fork (and 2 more lines like it): ") and \
        flag.message.endswith("a candidate may not do this")
