"""The wire format: JSON round-trip, versioning, validation messages."""

import json

import pytest

from runner.schema import (SCHEMA, CaseResult, CaseTiming, DeviceInfo, ErrorInfo, EvalOptions,
                           EvalRequest, EvalResult, Flag, SchemaError, Target, Timing, Tolerance,
                           request_from_json, result_from_json, to_json)


def full_result() -> EvalResult:
    return EvalResult(
        status="ok", correct=True, message="correct on 2 case(s)", id="abc",
        cases=[CaseResult(index=0, label="n=4096", shapes="x: float32[4096]", trials=3, passed=True,
                          max_abs_err=1e-7, max_rel_err=2e-6,
                          timing=CaseTiming(ref_ms=0.5, cand_ms=0.25, speedup=2.0, ref_spread_pct=0.4,
                                            cand_spread_pct=0.6, reps=100, method="events",
                                            bytes_moved=49152, cand_bw_pct_peak=12.5))],
        timing=Timing(ref_ms=0.5, cand_ms=0.25, speedup=2.0, speedup_geomean=2.0, spread_pct=0.6,
                      method="events", cases_timed=1),
        flags=[Flag("suspicious_speedup", "warning", "check it")],
        device=DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90", peak_bandwidth_gbs=4800,
                          peak_tflops={"bfloat16": 989.0}),
        error=None, inputs_convention="cases", launches={"candidate": ["k"]})


def test_result_round_trip():
    r = full_result()
    text = to_json(r)
    assert json.loads(text)["schema"] == SCHEMA
    assert result_from_json(text) == r


def test_request_round_trip():
    req = EvalRequest(target=Target("a.py", "f"), files={"a.py": "def f(): pass\n"},
                      candidate=Target("b.py", "f"), candidate_files={"b.py": "x = 1\n"},
                      options=EvalOptions(trials=5, tolerance={"float16": Tolerance(1e-2, 1e-2)}))
    assert request_from_json(to_json(req)) == req


def test_error_result_round_trip():
    r = EvalResult(status="timeout", correct=False, message="timed out",
                   error=ErrorInfo(kind="timeout", side="candidate", message="timed out", line=3))
    assert result_from_json(to_json(r)) == r


def test_nan_and_inf_become_null_not_invalid_json():
    r = full_result()
    r.cases[0].max_abs_err = float("nan")
    r.cases[0].timing.speedup = float("inf")
    data = json.loads(to_json(r))  # allow_nan=False would raise on NaN
    assert data["cases"][0]["max_abs_err"] is None and data["cases"][0]["timing"]["speedup"] is None


def test_other_major_version_is_refused():
    data = json.loads(to_json(full_result()))
    data["schema"] = "geak.eval/2"
    with pytest.raises(SchemaError, match="not supported"):
        result_from_json(json.dumps(data))


def test_missing_and_mistyped_fields_are_named():
    with pytest.raises(SchemaError, match="missing required field 'files'"):
        request_from_json(json.dumps({"target": {"path": "a.py", "symbol": "f"}}))
    with pytest.raises(SchemaError, match=r"EvalRequest.options.trials: expected an integer"):
        request_from_json(json.dumps({"target": {"path": "a.py", "symbol": "f"}, "files": {},
                                      "options": {"trials": "three"}}))
    with pytest.raises(SchemaError, match="not JSON"):
        request_from_json("{")


def test_unknown_fields_are_ignored_for_newer_minor_versions():
    data = json.loads(to_json(full_result()))
    data["something_new"] = 1
    assert result_from_json(json.dumps(data)).status == "ok"


def test_only_this_schema_name_and_major_are_read():
    data = json.loads(to_json(full_result()))
    for other in ("geak.whatever/1", "geak/1", "geak.eval/1x", "geak.eval/", "geak.eval/1\n", 1):
        with pytest.raises(SchemaError, match="not supported"):
            result_from_json(json.dumps({**data, "schema": other}))
    assert result_from_json(json.dumps({**data, "schema": "geak.eval/1.3"})).status == "ok"  # a newer minor


def test_limits_are_clamped_to_ceilings():
    from runner.schema import Limits, clamp_limits
    ceilings = Limits(import_s=60, run_s=30, timing_s=30, memory_mb=4096)
    got, flags = clamp_limits(None, ceilings)
    assert got == ceilings and flags == []  # absent: the ceilings
    got, flags = clamp_limits({"run_s": None, "import_s": 10, "timing_s": 1e9, "memory_mb": 8192}, ceilings)
    assert (got.run_s, got.import_s, got.timing_s, got.memory_mb) == (30, 10, 30, 4096)
    assert sorted(f.message.split(":")[0] for f in flags) == ["limits.memory_mb", "limits.timing_s"]
    assert all(f.code == "limit_lowered" and f.severity == "info" for f in flags)
    for bad in (0, -1, float("nan"), float("inf"), float("-inf"), "10", True):
        with pytest.raises(SchemaError, match=r"options.limits.run_s: expected a positive number"):
            clamp_limits({"run_s": bad}, ceilings)
    with pytest.raises(SchemaError, match="options.limits.memory_mb: expected an integer"):
        clamp_limits({"memory_mb": 100.5}, ceilings)


def test_project_limits_must_be_positive(tmp_path):
    from runner.config import ConfigError, options_from_settings
    with pytest.raises(ConfigError, match=r"\[tool.geak\].limits.run_s: expected a positive number"):
        options_from_settings({"limits": {"run_s": 0}})
    assert options_from_settings({"limits": {"run_s": 5}}).limits.run_s == 5


def test_device_description_does_not_repeat_the_backend():
    assert DeviceInfo(name="CPU (Triton interpreter)", backend="interpreter").__str__() == "CPU (Triton interpreter)"
    assert DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90").__str__() == "NVIDIA H200 (cuda, sm_90)"


def test_statuses_and_backends_outside_the_vocabulary_are_refused_when_read():
    data = json.loads(to_json(full_result()))
    with pytest.raises(SchemaError, match=r"EvalResult.status: expected one of ok, compile_error, .*got 'passed'"):
        result_from_json(json.dumps({**data, "status": "passed"}))
    with pytest.raises(SchemaError, match=r"EvalResult.device.backend: expected one of cuda, rocm, interpreter, got 'hip'"):
        result_from_json(json.dumps({**data, "device": {**data["device"], "backend": "hip"}}))


def test_with_candidate_is_a_copy_that_rewrites_the_target_file():
    req = EvalRequest(target=Target("a.py", "f"), files={"a.py": "def f(): pass\n"},
                      options=EvalOptions(trials=5, tolerance={"float16": Tolerance(1e-2, 1e-2)}, allow_torch_ops=["aten.mm"]))
    cand = req.with_candidate("def f(): return 1\n", id="c1", trials=1)
    assert (cand.candidate, cand.candidate_files, cand.id) == (Target("a.py", "f"), {"a.py": "def f(): return 1\n"}, "c1")
    assert cand.options.trials == 1 and req.options.trials == 5
    cand.options.tolerance["float16"].atol = 1.0
    cand.options.allow_torch_ops.append("aten.bmm")
    cand.options.limits.run_s = 1.0
    cand.files["b.py"] = ""
    cand.target.symbol = "g"
    assert req.options.tolerance["float16"].atol == 1e-2 and req.options.allow_torch_ops == ["aten.mm"]
    assert req.options.limits.run_s == 300.0 and set(req.files) == {"a.py"} and req.target.symbol == "f"
    itself = req.with_candidate(None, timing=False)
    assert itself.candidate is None and itself.candidate_files == {} and itself.options.timing is False
    with pytest.raises(TypeError):
        req.with_candidate(None, no_such_option=1)


def test_verified_speedup_is_the_one_rule_for_faster():
    def result(speedup, spread=1.0, status="ok", correct=True):
        return EvalResult(status=status, correct=correct, message="", timing=Timing(
            ref_ms=1.0, cand_ms=1.0 / speedup, speedup=speedup, speedup_geomean=speedup, spread_pct=spread,
            method="events", cases_timed=1))
    assert result(1.3).verified_speedup() == 1.3
    assert result(1.005, spread=0.1).verified_speedup() is None  # inside 1%
    assert result(1.04, spread=6.0).verified_speedup() is None  # inside its own spread
    assert result(1.04, spread=6.0).verified_speedup(min_gain=0.001) is None  # the spread still counts
    assert result(1.3, status="mismatch", correct=False).verified_speedup() is None
    assert result(1.3, status="rejected", correct=False).verified_speedup() is None
    assert result(float("nan")).verified_speedup() is None and result(float("nan")).speedup is None
    assert EvalResult(status="ok", correct=True, message="").verified_speedup() is None  # not timed
    assert EvalResult(status="crashed", correct=False, message="").ran is False
    assert EvalResult(status="mismatch", correct=False, message="").ran is True
