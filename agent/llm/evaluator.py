"""The cascaded evaluator: the runner checks, in order, that a candidate runs (call), that it
computes the reference's outputs (correctness, anti-cheat included), and how fast it is
(performance, on a GPU). This module turns a candidate's source into the runner's request and
an ``EvalResult`` into the stage of the cascade it reached."""

from __future__ import annotations

from typing import Optional

from runner.schema import EvalRequest, EvalResult

# Outcomes of one attempt, in cascade order.
PROVIDER_ERROR, NO_CODE, DID_NOT_RUN, REJECTED, WRONG, CORRECT = (
    "provider_error", "no_code", "did_not_run", "rejected", "wrong", "correct")


def candidate_request(base: EvalRequest, source: str, request_id: str = "") -> EvalRequest:
    """The target file replaced by ``source`` in the candidate's tree; same symbol, same inputs."""
    return base.with_candidate(source, id=request_id)


def outcome(result: EvalResult) -> str:
    if result.verified:
        return CORRECT
    if result.status == "rejected":
        return REJECTED
    if result.status == "mismatch":
        return WRONG
    return DID_NOT_RUN


def speedup(result: Optional[EvalResult]) -> Optional[float]:
    """The measured speedup of a candidate (None: not timed, or no result)."""
    return result.speedup if result is not None else None
