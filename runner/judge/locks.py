"""The lock that keeps timing exclusive on a device: correctness work of several workers may
overlap (shared), timing takes the device alone (exclusive, writer-preferring)."""

from __future__ import annotations

import threading
import time
from typing import Optional


class RWLock:
    """Many readers or one writer; a waiting writer blocks new readers, and when a writer lets
    go, the readers that were waiting for it go in before the next writer (phase-fair: with
    timings queued back to back, correctness checks still get a turn after each, instead of
    waiting for the whole queue). It keeps account of its use (``usage``): seconds held for
    writing, seconds with at least one reader, and seconds a writer waited while readers held
    it."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._turn = 0  # readers still let in before the next writer, after the last writer let go
        self._since = time.monotonic()
        self._mark = self._since  # the last change of state, for the accounts below
        self._acct = {"write": 0.0, "read": 0.0, "writer_waiting": 0.0}

    def _account(self) -> None:
        """Add the time since the last change to the state that held (under ``_cond``)."""
        now = time.monotonic()
        dt, self._mark = now - self._mark, now
        if self._writer:
            self._acct["write"] += dt
        elif self._readers:
            self._acct["read"] += dt
            if self._writers_waiting:
                self._acct["writer_waiting"] += dt

    def usage(self) -> dict[str, float]:
        """Seconds since it was made (``wall``), held for writing (``write``), held by readers
        (``read``), and of those, with a writer waiting (``writer_waiting``)."""
        with self._cond:
            self._account()
            return {"wall": round(time.monotonic() - self._since, 3),
                    **{k: round(v, 3) for k, v in self._acct.items()}}

    def acquire_read(self, until: Optional[float] = None) -> bool:
        """Held for reading (True), or ``time.monotonic()`` reached ``until`` first (False)."""
        with self._cond:
            self._readers_waiting += 1
            try:
                while self._writer or (self._writers_waiting and not self._turn):
                    if not self._wait(until):
                        self._turn = max(0, self._turn - 1)  # one fewer to wait for
                        self._cond.notify_all()
                        return False
                self._turn = max(0, self._turn - 1)
                self._account()
                self._readers += 1
                return True
            finally:
                self._readers_waiting -= 1

    def _wait(self, until: Optional[float]) -> bool:
        if until is None:
            self._cond.wait()
            return True
        left = until - time.monotonic()
        if left <= 0:
            return False
        self._cond.wait(left)
        return True

    def release_read(self):
        with self._cond:
            self._account()
            self._readers -= 1
            self._cond.notify_all()

    def acquire_write(self, until: Optional[float] = None) -> bool:
        """Held for writing (True), or ``time.monotonic()`` reached ``until`` first (False)."""
        with self._cond:
            self._account()
            self._writers_waiting += 1
            try:
                while self._writer or self._readers or self._turn:
                    if not self._wait(until):
                        return False
                self._account()
                self._writer = True
                return True
            finally:
                self._account()
                self._writers_waiting -= 1
                self._cond.notify_all()  # readers held back by this writer may go on

    def release_write(self):
        with self._cond:
            self._account()
            self._writer = False
            self._turn = self._readers_waiting
            self._cond.notify_all()
