"""The cascaded evaluator: the runner checks, in order, that a candidate runs (call), that it
computes the reference's outputs (correctness, anti-cheat included), and how fast it is
(performance, on a GPU). This module turns a candidate's source into the runner's request and
an ``EvalResult`` into the stage of the cascade it reached."""

from __future__ import annotations

from typing import Optional

from runner.schema import EvalOptions, EvalRequest, EvalResult, Target

DID_NOT_RUN = ("compile_error", "runtime_error", "timeout", "crashed")

# Outcomes of one attempt, in cascade order.
PROVIDER_ERROR, NO_CODE, DID_NOT_RUN_, REJECTED, WRONG, CORRECT = (
    "provider_error", "no_code", "did_not_run", "rejected", "wrong", "correct")


def candidate_request(base: EvalRequest, source: str, options: Optional[EvalOptions] = None,
                      request_id: str = "") -> EvalRequest:
    """The target file replaced by ``source`` in the candidate's tree; same symbol, same inputs."""
    path, symbol = base.target.path, base.target.symbol
    opts = EvalOptions(**{**(options or base.options).__dict__})
    return EvalRequest(target=Target(path, symbol), files=base.files, candidate=Target(path, symbol),
                       candidate_files={path: source}, options=opts, id=request_id)


def outcome(result: EvalResult) -> str:
    if result.status == "ok" and result.correct:
        return CORRECT
    if result.status == "rejected":
        return REJECTED
    if result.status == "mismatch":
        return WRONG
    return DID_NOT_RUN_


def speedup(result: Optional[EvalResult]) -> Optional[float]:
    if result is None or result.timing is None:
        return None
    s = result.timing.speedup
    return s if s == s else None  # NaN: not measured
