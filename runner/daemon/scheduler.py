"""Lanes and dispatchers: one worker pool per GPU, fed from the durable queue.

A lane is a ``LocalRunner`` (worker pool) pinned to one device with ``CUDA_VISIBLE_DEVICES``
(HIP honours it on ROCm). Each lane runs as many dispatcher threads as it has workers: a
dispatcher claims the oldest queued job, evaluates it and commits the result. Workers of one
lane import and compile in parallel; the pool's device lock keeps timing exclusive per device.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
from typing import Callable, Optional

from ..local import LocalRunner
from ..pool import PoolError
from ..schema import DeviceInfo, ErrorInfo, EvalResult, SchemaError, request_from_json, to_json
from .store import Store

log = logging.getLogger("geak-runner")

MAX_ATTEMPTS = 3
"""A job that was running when the daemon died this many times is given up with an error
instead of being started again (it may be what kills the daemon)."""


def detect_gpus(device: str, gpus: Optional[str]) -> list[Optional[str]]:
    """Device ids for the lanes: ``[None]`` means one lane with the environment as it is."""
    if device == "interpreter":
        return [None]
    if gpus:
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        if not ids:
            raise ValueError("--gpus takes comma-separated device indices, e.g. 0,1")
        return ids
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [g.strip() for g in visible.split(",") if g.strip()]
        return ids if len(ids) > 1 else [None]
    try:  # in a child, so the daemon itself never initialises a GPU
        p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=180)
        n = int(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        n = 0
    return [str(i) for i in range(n)] if n > 1 else [None]


def _crashed(jid: str, message: str, kind: str = "internal") -> EvalResult:
    return EvalResult(status="crashed", correct=False, id=jid, message=message,
                      error=ErrorInfo(kind=kind, side="harness", message=message))


class Lane:
    def __init__(self, index: int, gpu: Optional[str], workers: int, device: str):
        self.index = index
        self.gpu = gpu
        self.workers = workers
        env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}
        self.runner = LocalRunner(workers=workers, device=device, env=env)
        self._info: Optional[DeviceInfo] = None

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            self._info = self.runner.device_info()
        return self._info


class Scheduler:
    def __init__(self, store: Store, gpus: list[Optional[str]], workers: int, device: str,
                 max_queue: int = 256):
        self.store = store
        self.lanes = [Lane(i, g, workers, device) for i, g in enumerate(gpus)]
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._stopping = False
        self._running = 0
        self._threads: list[threading.Thread] = []
        self._listeners: list[Callable[[str], None]] = []
        self._ema_s = 5.0  # running estimate of one evaluation's duration, for Retry-After
        self.completed = 0

    @property
    def slots(self) -> int:
        return sum(lane.workers for lane in self.lanes)

    @property
    def running(self) -> int:
        return self._running

    @property
    def draining(self) -> bool:
        return self._stopping

    def on_done(self, fn: Callable[[str], None]):
        self._listeners.append(fn)

    def retry_after(self, queued: int) -> int:
        return int(max(1, min(120, round(self._ema_s * (queued + 1) / max(1, self.slots)))))

    # ------------------------------------------------------------------ life cycle

    def recover(self) -> int:
        """Jobs left running by a crash go back to the queue (call before ``start``)."""
        back = self.store.recover()
        for jid, attempts in back:
            log.info("job %s was running when the runner stopped; queued again (attempt %d)", jid,
                     attempts + 1)
        return len(back)

    def start(self):
        for lane in self.lanes:
            for k in range(lane.workers):
                t = threading.Thread(target=self._dispatch, args=(lane,), daemon=True,
                                     name=f"lane{lane.index}-{k}")
                t.start()
                self._threads.append(t)

    def wake(self):
        with self._cond:
            self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Stop taking jobs; wait for running ones to finish. True if all finished in time."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def close(self):
        for lane in self.lanes:
            lane.runner.close()

    # ------------------------------------------------------------------ work

    def _dispatch(self, lane: Lane):
        while True:
            with self._cond:
                if self._stopping:
                    return
            claimed = self.store.claim(lane.index)
            if claimed is None:
                with self._cond:
                    if self._stopping:
                        return
                    self._cond.wait(timeout=1.0)
                continue
            jid, text, attempts = claimed
            with self._cond:
                self._running += 1
            t0 = time.monotonic()
            try:
                result = self._evaluate(lane, jid, text, attempts)
            finally:
                with self._cond:
                    self._running -= 1
            self._ema_s = 0.8 * self._ema_s + 0.2 * (time.monotonic() - t0)
            if self.store.finish(jid, to_json(result)):
                self.completed += 1
                for fn in self._listeners:
                    try:
                        fn(jid)
                    except Exception:  # a listener must never stop a dispatcher
                        log.exception("result listener failed for job %s", jid)

    def _evaluate(self, lane: Lane, jid: str, text: str, attempts: int) -> EvalResult:
        if attempts > MAX_ATTEMPTS:
            return _crashed(jid, f"the runner stopped {attempts - 1} times while evaluating this request; "
                                 "it was not started again", kind="worker_died")
        try:
            req = request_from_json(text)
        except SchemaError as e:  # validated at submission; only a changed schema gets here
            return EvalResult(status="rejected", correct=False, id=jid, message=str(e),
                              error=ErrorInfo(kind="bad_request", side="harness", message=str(e)))
        req.id = jid
        try:
            return lane.runner.evaluate(req)
        except PoolError as e:
            return _crashed(jid, str(e), kind="runner_unavailable")
        except Exception as e:
            log.error("job %s: %s", jid, traceback.format_exc())
            return _crashed(jid, f"internal error in the runner: {type(e).__name__}: {e}")


