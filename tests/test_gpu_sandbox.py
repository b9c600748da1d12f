"""The sandbox's two GPU-only attacks, end to end (run on a GPU box: ``pytest -m gpu -n 0
tests/test_gpu_sandbox.py``): a forged timing reply, and a compiled binary planted in the
shared compile cache under another kernel's key."""

from __future__ import annotations

import pytest

from conftest import ADD_RELU, Project, kernel_variant
from test_gpu import gpu_runner  # noqa: F401  the GPU runner of that module, a fixture

pytestmark = pytest.mark.gpu

BIG = ADD_RELU.replace("INPUT_CASES = [dict(n=300), dict(n=2048)]",
                       "INPUT_CASES = [dict(n=1 << 24), dict(n=1 << 16)]")


FORGE_TIME = '''
import json as _json, os as _os, stat as _stat
_calls = [0]


def _forge():
    """From the candidate's own process, during the timed runs: a "time" reply that says 4x."""
    lie = {"event": "reply", "op": "time", "timing": {"ref_ms": 1.0, "cand_ms": 0.25, "reps": 3,
           "ref_spread_pct": 0.1, "cand_spread_pct": 0.1, "method": "events"}}
    for fd in range(3, 64):
        try:
            if _stat.S_ISSOCK(_os.fstat(fd).st_mode):
                _os.write(fd, (_json.dumps(lie) + "\\n").encode())
        except OSError:
            pass
'''


def test_a_forged_time_reply_from_the_candidate_is_refused(tmp_path, gpu_runner):
    p = Project(tmp_path).write("ref.py", BIG)
    p.write("cand.py", kernel_variant(extra=FORGE_TIME, pre="    _calls[0] += 1\n    if _calls[0] == 40:\n        _forge()"))
    r = p.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert not (r.timing and r.timing.speedup > 2), r.timing
    assert r.status != "ok" or r.timing is None or r.timing.speedup < 1.5, (r.status, r.message)
    # The same evaluation without the forgery is still timed: the pool itself is fine.
    p.write("plain.py", kernel_variant())
    ok = p.evaluate(gpu_runner, "ref.py::add_relu", "plain.py::add_relu")
    assert ok.status == "ok" and ok.timing is not None, ok.message


POISON = '''
import glob
import os
import shutil

import torch
import triton
import triton.language as tl

from wrong_kernel import add_relu_kernel as _wrong


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0), mask=mask)


def _plant():
    """Compile the honest kernel (the same source as the victim's) and a wrong one of the same
    name, then put the wrong binary in the honest one's cache entry."""
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    add_relu_kernel[(16,)](x, x, out, 4096, BLOCK=256)
    _wrong[(16,)](x, x, out, 4096, BLOCK=256)
    torch.cuda.synchronize()
    cache = os.environ["TRITON_CACHE_DIR"]
    entries = glob.glob(os.path.join(cache, "*", "add_relu_kernel.cubin")) + \\
        glob.glob(os.path.join(cache, "*", "add_relu_kernel.hsaco"))
    honest = [e for e in entries if "1.000000e+00" not in open(e[:e.rfind(".")] + ".ttir").read()]
    wrong = [e for e in entries if e not in honest]
    for h in honest:
        shutil.copyfile(wrong[0], h)


_plant()


def add_relu(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out


INPUT_CASES = [dict(n=300)]


def get_inputs(n=300):
    return [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]
'''

WRONG_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0) + 1.0, mask=mask)
'''


def test_a_binary_one_reference_planted_is_never_loaded_for_another(tmp_path, gpu_runner):
    attacker = Project(tmp_path / "a").write("poison.py", POISON).write("wrong_kernel.py", WRONG_KERNEL)
    attacker.evaluate(gpu_runner, "poison.py::add_relu")  # its own evaluation: promotes its cache
    victim = Project(tmp_path / "b").write("ref.py", ADD_RELU)
    victim.write("cand.py", kernel_variant(value="tl.maximum(x + y, 0.0) + 1.0"))  # what the planted binary computes
    r = victim.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert not r.correct and r.status == "mismatch", (r.status, r.message)
    own = victim.evaluate(gpu_runner, "ref.py::add_relu")
    assert own.status == "ok", own.message


def test_the_self_test_confines_jobs_on_the_gpu_box(gpu_runner):
    facts = gpu_runner.device_info().sandbox
    assert facts.get("filesystem", "").startswith("host read-only"), facts
    assert facts.get("runner_state") == "hidden from the job", facts
