"""The local runner: static checks, then a worker pool on this machine.

A remote runner (the daemon's client) offers the same methods (``runners.Runner``):
``evaluate``, ``evaluate_many``, ``device_info`` and ``close``.
"""

from __future__ import annotations

import concurrent.futures
import os
import uuid
from typing import Optional

from .pool import WorkerPool
from .schema import DeviceInfo, ErrorInfo, EvalRequest, EvalResult
from .source import SourceError, analyze_target, no_inputs_error


def check_request(req: EvalRequest) -> Optional[EvalResult]:
    """What can be told without running anything: a result to return at once, or None."""
    try:
        arch = req.options.aot_arch
        if arch is not None and arch != "device":
            from .aot import ARCHS  # noqa: imports no torch at module level
            if arch not in ARCHS:
                raise SourceError(ErrorInfo(kind="bad_request", side="harness",
                                            message=f"unknown arch '{arch}'",
                                            hint="use one of " + ", ".join(sorted(ARCHS)) + ", or device"))
        if req.target.path not in req.files:
            raise SourceError(ErrorInfo(kind="bad_request", side="harness",
                                        message=f"the request carries no text for {req.target.path}"))
        info = analyze_target(req.files[req.target.path], req.target.path, req.target.symbol)
        if info.symbol != req.target.symbol:  # a kernel was named: evaluate its wrapper
            req.target.symbol = info.symbol
        if not info.conventions:
            raise no_inputs_error(req.target.path, req.target.symbol)
        if req.candidate is not None:
            tree = {**req.files, **req.candidate_files}
            if req.candidate.path not in tree:
                raise SourceError(ErrorInfo(kind="bad_request", side="harness",
                                            message=f"the request carries no text for {req.candidate.path}"))
            cinfo = analyze_target(tree[req.candidate.path], req.candidate.path, req.candidate.symbol,
                                   "candidate")
            req.candidate.symbol = cinfo.symbol
    except SourceError as e:
        status = "compile_error" if e.info.kind in ("syntax_error", "missing_symbol", "no_inputs") \
            else "rejected"
        return EvalResult(status=status, correct=False, id=req.id, message=e.info.message, error=e.info)
    return None


def default_workers() -> int:
    return max(2, min(4, (os.cpu_count() or 2) // 2))


class LocalRunner:
    def __init__(self, workers: Optional[int] = None, device: str = "auto", **pool_kwargs):
        self.pool = WorkerPool(size=workers or default_workers(), device=device, **pool_kwargs)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        request.id = request.id or uuid.uuid4().hex[:12]
        early = check_request(request)
        if early is not None:
            return early
        return self.pool.evaluate(request)

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.pool.size) as ex:
            return list(ex.map(self.evaluate, requests))

    def device_info(self) -> DeviceInfo:
        return self.pool.device_info()

    def close(self) -> None:
        self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


