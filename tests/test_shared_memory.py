"""The evaluator's cheaper path for many configs: inputs and outputs in sealed shared memory,
the reference's runs kept for the next evaluations of the same target (whatever their
options), comparisons of identical results without the error arithmetic, and compiles for a
GPU under the interpreter in a compile worker."""

from __future__ import annotations

import fcntl
import math
import os
import tempfile

import torch

from runner.worker.compare import bitwise_equal, compare
from runner.judge.process import sealed as _sealed

STATEFUL = '''
import torch

CALLS = [0]


def bump(x):
    """Its result depends on how many times this process called it before."""
    CALLS[0] += 1
    return x + CALLS[0]


def get_inputs():
    return [torch.randn(64)]
'''


ONCE_ODD = '''
import torch

CALLS = [0]


def bump(x):
    """Its second run in this process, and only that one, gives another result."""
    CALLS[0] += 1
    return x + (100.0 if CALLS[0] == 2 else 1.0)


def get_inputs():
    return [torch.randn(64)]
'''

WRONG = '''
import torch


def bump(x):
    return x + 5.0
'''


def test_the_pool_passes_on_only_sealed_shared_memory():
    fd = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.write(fd, b"data")
    assert not _sealed(fd)  # the writer could still change it
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    assert _sealed(fd)
    os.close(fd)
    with tempfile.TemporaryFile() as f:
        assert not _sealed(f.fileno())  # a plain file: no seals at all
    r, w = os.pipe()
    assert not _sealed(r)
    os.close(r)
    os.close(w)


def test_equal_values_compare_equal_and_an_infinity_is_no_large_number():
    x = torch.tensor([1.0, float("nan"), float("inf"), -0.0])
    c = compare(x, x.clone())
    assert c.ok and c.max_abs == 0 and c.max_rel == 0
    big = torch.tensor([torch.finfo(torch.float32).max])
    assert not bitwise_equal(torch.tensor([math.inf]), big)
    assert not compare(torch.tensor([math.inf]), big).ok
    assert bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    z = torch.tensor([1 + 2j, complex(float("nan"), 1.0)])
    assert bitwise_equal(z, z.clone()) and not bitwise_equal(z, z.conj())


def test_the_reference_runs_once_per_draw_for_every_evaluation_of_the_target(runner, project):
    """The reference worker keeps a draw's record for later evaluations, whatever their options:
    a reference whose result depends on how often its process ran it gives the same record to
    each. Without that, its second evaluation would expect x + 2 of a fresh candidate giving
    x + 1."""
    project.write("stateful.py", STATEFUL)
    for options in ({"trials": 1}, {"trials": 1, "tolerance": {}}, {"trials": 2}, {"trials": 1, "aot_arch": "sm_90"}):
        r = project.evaluate(runner, "stateful.py::bump", None, timing=False, **options)
        assert r.correct, (options, r.status, r.message)


def test_compiles_for_a_gpu_under_the_interpreter_report_resources(runner, project):
    r = project.evaluate(runner, "ref.py::add_relu", None, trials=1, timing=False, aot_arch="sm_90")
    assert r.correct, r.message
    assert r.resources and all(k.error is None and k.registers for k in r.resources), r.resources
    assert "compile" in r.phases


CONFIGURED = '''
import torch


class Scale:
    """An argument of the file's own class (KernelBench's get_inputs may return one)."""

    def __init__(self, factor):
        self.factor = factor


def scaled(x, scale):
    return x * scale.factor


def get_inputs():
    return [torch.randn(32), Scale(3.0)]
'''

OPAQUE = '''
import threading

import torch


def locked(x, lock):
    with lock:
        return x + 1


def get_inputs():
    return [torch.randn(8), threading.Lock()]
'''


def test_an_input_of_the_files_own_class_reaches_the_candidate_as_its_own_class(runner, project):
    project.write("scaled.py", CONFIGURED)
    project.write("scaled2.py", CONFIGURED.replace("return x * scale.factor", "return scale.factor * x"))
    r = project.evaluate(runner, "scaled.py::scaled", "scaled2.py::scaled", trials=1, timing=False,
                         require_triton=False)
    assert r.correct, (r.status, r.message)
    project.write("scaled3.py", CONFIGURED.replace("return x * scale.factor", "return x * (scale.factor + 1)"))
    r = project.evaluate(runner, "scaled.py::scaled", "scaled3.py::scaled", trials=1, timing=False,
                         require_triton=False)
    assert r.status == "mismatch", (r.status, r.message)


def test_an_input_that_cannot_cross_is_said_in_the_users_terms(runner, project):
    project.write("locked.py", OPAQUE)
    r = project.evaluate(runner, "locked.py::locked", None, trials=1, timing=False)
    assert r.status != "crashed" and r.error is not None and r.error.kind == "bad_inputs", (r.status, r.message)
    assert "cannot be handed to the candidate's process" in r.message and "lock" in r.message.lower(), r.message


def test_every_config_that_mismatches_is_judged_against_the_same_reruns(runner, project):
    """A mismatch makes the reference run again on the same draw, to find what varies. The
    reruns are kept with the draw's record: a second wrong candidate is judged against the
    same reruns as the first, so both get the same verdict ('cannot be checked': the original
    gave another result on its second run), and the search pays for them once. Were the second
    judged against a fresh rerun (the third run: x + 1 again), nothing would vary, and it alone
    would get a plain mismatch."""
    project.write("odd.py", ONCE_ODD).write("wrong.py", WRONG)
    kinds = []
    for _ in range(2):
        r = project.evaluate(runner, "odd.py::bump", "wrong.py::bump", timing=False, trials=1)
        assert not r.correct
        kinds.append((r.status, r.error.kind if r.error else None))
    assert kinds[0] == kinds[1] == ("runtime_error", "original_varies"), kinds


def test_a_case_s_timing_inputs_are_written_once_and_handed_again(runner, project):
    # On a GPU every evaluation hands the candidate's process the inputs to time a case on. The
    # reference worker writes them once per draw, kept with the draw's run, and hands the same
    # sealed memfd to every later candidate. Driven here op by op on a kept reference worker
    # (the interpreter has no timing stage to call it).
    from runner.judge.pool import reference_digest
    from runner.judge.process import Budget
    from runner.judge.session import _request_dict
    req = project.request("ref.py::add_relu", None, trials=1)
    assert runner.evaluate(req).correct
    pool = runner.pool
    ref = pool._take_reference(reference_digest(req))
    try:
        assert ref.loaded is not None  # the worker of the evaluation above, with its memo
        xdir = os.path.join(ref.scratch, "x-test")
        os.mkdir(xdir, 0o700)
        base = {"request": _request_dict(req), "layer": ref.digest, "exchange": xdir}
        assert "failure" not in ref.call({"op": "attach", **base}, None, Budget(30))
        ref.new_evaluation()
        inodes = []
        for _ in range(2):
            r = ref.call({"op": "reference", "case": 0, "trial": 0}, None, Budget(30))
            assert r.get("memo"), r
            ref.discard_outbox()
            t = ref.call({"op": "time_inputs", "case": 0}, None, Budget(30))
            assert t.get("calls") == 1 and "failure" not in t, t
            fd = ref.outbox["time-0.pt"]
            assert _sealed(fd)
            inodes.append(os.fstat(fd).st_ino)
            ref.discard_outbox()
        assert inodes[0] == inodes[1]  # written once, handed twice
    finally:
        ref.close()
