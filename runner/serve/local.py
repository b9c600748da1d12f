"""The local runner: static checks, then a worker pool on this machine.

A remote runner (the daemon's client) offers the same methods (``runners.Runner``):
``evaluate``, ``evaluate_many``, ``device_info`` and ``close``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import uuid
from typing import Optional

from runner.judge.pool import WorkerPool
from ..schema import DeviceInfo, ErrorInfo, EvalRequest, EvalResult
from ..source import SourceError, analyze_target, no_inputs_error


def check_request(req: EvalRequest, static_reject: bool = True) -> Optional[EvalResult]:
    """What can be told without running anything: a result to return at once, or None. With
    ``static_reject``, a candidate that the static check rejects (``source.candidate_flags``)
    is ``rejected`` here, before any worker is taken or any of its code runs."""
    try:
        arch = req.options.aot_arch
        if arch is not None and arch != "device":
            from ..aot import ARCHS  # noqa: imports no torch at module level
            if arch not in ARCHS:
                raise SourceError(ErrorInfo(kind="bad_request", side="harness",
                                            message=f"unknown arch '{arch}'",
                                            hint="use one of " + ", ".join(sorted(ARCHS)) + ", or device"))
        stage = req.options.aot_stage
        if stage is not None and stage != "default":
            from ..aot import ARCHS, STAGES
            known = STAGES[ARCHS[arch].backend] if arch in ARCHS else (*STAGES["cuda"], "amdgcn")
            if stage not in known:
                where = f" for {arch}" if arch in ARCHS else ""
                raise SourceError(ErrorInfo(kind="bad_request", side="harness",
                                            message=f"no compile stage '{stage}'{where}",
                                            hint="use one of " + ", ".join(known)))
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
            if static_reject:
                from runner.judge.verdict import static_rejection
                early = static_rejection(req)
                if early is not None:
                    return early
    except SourceError as e:
        status = "compile_error" if e.info.kind in ("syntax_error", "missing_symbol", "no_inputs") \
            else "rejected"
        return EvalResult(status=status, correct=False, id=req.id, message=e.info.message, error=e.info)
    return None


NO_INTERPRETER_LIMIT = 1 << 62
"""``interpreter_max_elements`` for an evaluation that no Triton code can take part in."""


def without_interpreter_limit(req: EvalRequest) -> EvalRequest:
    """The request, with no size limit where no file it carries mentions Triton (a PyTorch-only
    reference checked against itself, say): the limit is there for the Triton CPU interpreter,
    which no such evaluation reaches; PyTorch runs at full size on the CPU. A copy: the caller's
    request is left as it was."""
    if any("triton" in text for text in (*req.files.values(), *req.candidate_files.values())):
        return req
    return dataclasses.replace(req, options=dataclasses.replace(req.options,
                                                                interpreter_max_elements=NO_INTERPRETER_LIMIT))


def default_workers() -> int:
    return max(2, min(4, (os.cpu_count() or 2) // 2))


STATIC_REJECT_FIRST_ENV = "GEAK_STATIC_REJECT_FIRST"
"""Set to 0 in the runner's own environment (a daemon's, a Ray actor's) for the default of
``LocalRunner(static_reject_first=...)``: tests of the sandbox and the runtime checks run their
attacks for real. A candidate cannot set it: it runs in a worker, not in the runner's process."""


class LocalRunner:
    def __init__(self, workers: Optional[int] = None, device: str = "auto", *,
                 static_reject_first: Optional[bool] = None, **pool_kwargs):
        """``static_reject_first`` (default: yes, unless ``GEAK_STATIC_REJECT_FIRST=0``): a
        candidate the static check rejects is ``rejected`` before any worker is taken. With
        False it runs, and its verdict says ``rejected`` at the end unless the run found it
        wrong, crashed or rejected it first (how tests exercise the runtime checks with plain
        means); never correct either way."""
        self.pool = WorkerPool(size=workers or default_workers(), device=device, **pool_kwargs)
        if static_reject_first is None:
            static_reject_first = os.environ.get(STATIC_REJECT_FIRST_ENV, "1").strip() != "0"
        self.static_reject_first = static_reject_first

    @property
    def device(self) -> str:
        return self.pool.device

    @property
    def parallelism(self) -> int:
        return self.pool.size

    def evaluate(self, request: EvalRequest) -> EvalResult:
        request.id = request.id or uuid.uuid4().hex[:12]
        early = check_request(request, self.static_reject_first)
        if early is not None:
            return early
        return self.pool.evaluate(without_interpreter_limit(request))

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.pool.size) as ex:
            return list(ex.map(self.evaluate, requests))

    def device_info(self) -> DeviceInfo:
        return self.pool.device_info()

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        return self.pool.warm(n)

    def device_time(self) -> dict[str, float]:
        """Seconds the device was held alone (timing) and shared (correctness work), since the
        runner started (the device lock's ``usage``)."""
        return self.pool.device_lock.usage()

    def close(self) -> None:
        self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


