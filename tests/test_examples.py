"""The shipped examples work through the evaluator, as a new user would first run them."""

import pytest

from conftest import ROOT
from runner.schema import EvalOptions
from runner.source import build_request

EXAMPLES = ["add_relu", "softmax", "rmsnorm", "layernorm", "matmul"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_checks_against_itself(name, runner):
    req, info, _ = build_request(f"examples/{name}.py::{name}", None, EvalOptions(trials=2),
                                 root=ROOT, cwd=ROOT)
    assert info.kind == "wrapper" and info.kernels
    r = runner.evaluate(req)
    assert r.status == "ok", r.message
    ran = [c for c in r.cases if not c.skipped]
    assert len(ran) >= 2 and all(c.passed for c in ran)
    # GPU-sized cases are skipped on the interpreter, with the reason.
    assert any(c.skipped and "GPU runner" in c.skipped for c in r.cases)


def test_fast_softmax_is_verified_against_the_first_version(runner):
    req, _, _ = build_request("examples/softmax.py::softmax", "examples/softmax_fast.py::softmax",
                              EvalOptions(), root=ROOT, cwd=ROOT)
    r = runner.evaluate(req)
    assert r.status == "ok" and r.correct, r.message
    assert r.launches["candidate"] == ["softmax_kernel"]
    assert not [f for f in r.flags if f.severity == "reject"]
