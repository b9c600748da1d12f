"""Structural comparison: each way a wrong answer could slip through."""

import math

import torch

from runner.worker.compare import bitwise_equal, clone, compare, summarize
from runner.schema import Tolerance


def test_equal_structures_pass():
    x = torch.randn(4, 5)
    out = {"a": x, "b": [x * 2, (x.sum(), None)], "n": 3, "s": "ok", "f": 1.5}
    assert compare(out, clone(out)).ok


def test_shape_dtype_device_must_match():
    x = torch.randn(4)
    assert "shape (5,)" in compare(x, torch.randn(5)).detail
    assert "dtype float16" in compare(x, x.half()).detail
    assert "expected a tensor" in compare(x, x.tolist()).detail


def test_no_truncation_of_sequences_or_dicts():
    x = torch.randn(3)
    assert "1 items, expected 2" in compare([x, x], [x]).detail
    assert "keys differ" in compare({"a": x, "b": x}, {"a": x}).detail


def test_tolerances_are_per_dtype_and_overridable():
    e = torch.ones(100)
    a = e + 5e-4
    assert not compare(e, a).ok  # float32: rtol 1e-4
    assert compare(e.half(), a.half()).ok  # float16: rtol 2e-3
    assert compare(e, a, {"float32": Tolerance(atol=1e-3, rtol=0)}).ok
    assert compare(e, a, {"default": Tolerance(atol=1e-3, rtol=0)}).ok


def test_nan_and_inf():
    e = torch.tensor([1.0, math.nan, math.inf])
    assert compare(e, e.clone()).ok
    assert not compare(e, torch.tensor([1.0, 2.0, math.inf])).ok  # NaN expected, number given
    assert not compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.nan])).ok
    assert not compare(e, torch.tensor([1.0, math.nan, -math.inf])).ok


def test_integers_and_bools_exact():
    e = torch.arange(10)
    a = e.clone()
    a[7] = 8
    c = compare(e, a)
    assert not c.ok and "output[7]: 8, expected 7" in c.detail
    assert not compare(True, False).ok
    assert not compare(3, 4).ok


def test_report_names_the_worst_place_and_counts():
    e = torch.zeros(4, 4)
    a = e.clone()
    a[2, 3] = 1.0
    c = compare(e, a)
    assert "output[2, 3]" in c.detail and "1 of 16 elements" in c.detail
    assert c.max_abs == 1.0


def test_python_floats_use_float32_tolerance():
    assert compare(1.0, 1.0 + 1e-6).ok
    assert not compare(1.0, 1.01).ok


def test_bitwise_equal_and_summary():
    x = torch.tensor([1.0, math.nan])
    assert bitwise_equal(x, x.clone())
    assert not bitwise_equal(x, torch.tensor([1.0, 0.0]))
    assert summarize([torch.zeros(2, 3, dtype=torch.float16), 4], ["x", "dim"]) == "x: float16[2, 3], dim: 4"


def test_reductions_in_another_order_pass_and_a_dropped_term_does_not():
    # Column sums of 16384 rows: fp32 sums in two orders differ by ~1e-4 where a column
    # cancels to near zero, far outside a fixed atol of 1e-5 but tiny against the sums' size.
    torch.manual_seed(0)
    x = torch.randn(16384, 512)
    exact = x.double().sum(0)
    pairwise = x.sum(0)  # torch's blocked order
    sequential = torch.zeros(512)
    for chunk in x.split(1024):  # another order: 16 partial sums added one after another
        sequential += chunk.sum(0)
    near_zero = exact.abs().argmin()
    assert (pairwise - sequential).abs().max() > 1e-5 + 1e-4 * exact[near_zero].abs()  # the old test fails
    assert compare(pairwise, sequential).ok
    assert compare(exact.float(), sequential).ok
    # A column that missed one term, or a single wrong element, is still caught.
    dropped = sequential.clone()
    dropped[near_zero] -= x[-1, near_zero]
    c = compare(pairwise, dropped)
    assert not c.ok and "mean magnitude" in c.detail
    wrong = sequential.clone()
    wrong[7] += 0.05
    assert not compare(pairwise, wrong).ok
    # Outputs of magnitude 1 or less keep atol as it is.
    e = torch.full((100,), 0.01)
    assert not compare(e, e + 2e-5).ok and compare(e, e + 5e-6).ok
