"""The worker's end of its protocol socket (JSON lines), and the phase announcements.

Messages to the pool:

  -> {"event": "hello", "device": DeviceInfo, "sandbox": {...}}
  -> {"event": "at", "side": ..., "case": ...}         what runs now (for crash reports)
  -> {"event": "phase", "phase": "compile" | "run"}    a Triton compile leaves the device lock;
  <- {"grant": true}                                    "run" waits for the lock to come back
  -> {"event": "reply", "op": NAME, ...}                the answer to an op ("steps_s": seconds
                                                        per step of it, ``step``)
  -> {"event": "reply", "op": NAME, "failure": {...}}   or the failure of the user's code

A message may carry shared-memory files (sealed memfds, SCM_RIGHTS) named in its "fds" list:
a reply, what its side hands the other (inputs, outputs: ``runner.worker.exchange.save``); an op from
the pool, what the other side handed this one (``received``).

The pool holds the device lock an op needs before it sends the op. Nothing the worker says
decides a verdict by itself: the pool treats a candidate worker's messages as claims, and the
verdict comes from the reference worker's comparison (``runner.judge.verdict``).
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import time
from typing import Iterator, Optional

_sock: Optional[socket.socket] = None
_current_phase: list[Optional[str]] = [None]
MAX_FDS = 64
"""The most shared-memory files one message carries."""

_outbox: dict[str, int] = {}
"""What this side hands the other (``runner.worker.exchange.save``): name -> sealed memfd, sent with
the next message and then closed here."""
_inbox: dict[str, int] = {}
"""What the other side handed this one (through the pool): name -> memfd."""
_fd_queue: list[int] = []

_perf = time.perf_counter  # bound before any user code runs in this process
_steps: dict[str, float] = {}
"""Seconds per step of the op under way (``step``), sent with its reply as ``steps_s``: where an
op's time goes, for ``EvalResult.phases``. A claim like any other the worker makes: the pool
keeps only plausible names and numbers, and no verdict reads them."""


def open_channel(fd: int) -> None:
    global _sock
    _sock = socket.socket(fileno=fd)


def hand(name: str, fd: int) -> None:
    """Send ``fd`` (a sealed memfd) as ``name`` with the next message."""
    old = _outbox.pop(name, None)
    if old is not None:
        os.close(old)
    _outbox[name] = fd


def received(name: str) -> Optional[int]:
    """The memfd the other side handed as ``name`` (kept until the next evaluation)."""
    return _inbox.get(name)


def loop_back() -> None:
    """What this process handed over, as if the other side had handed it (a warm-up)."""
    while _outbox:
        name, fd = _outbox.popitem()
        old = _inbox.pop(name, None)
        if old is not None:
            os.close(old)
        _inbox[name] = fd


def forget_received() -> None:
    for fd in _inbox.values():
        os.close(fd)
    _inbox.clear()


def send(msg: dict) -> None:
    names = list(_outbox)[:MAX_FDS]
    if names:
        msg = {**msg, "fds": names}
    data = (json.dumps(msg, allow_nan=False) + "\n").encode()
    view = memoryview(data)
    if names:
        fds = [_outbox.pop(n) for n in names]
        try:
            n = _sock.sendmsg([view], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        finally:
            for fd in fds:
                os.close(fd)
        view = view[n:]
    if view:
        _sock.sendall(view)


def recv() -> Optional[dict]:
    line = _readline()
    if not line:
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return {}
    names = msg.get("fds") if isinstance(msg, dict) else None
    if isinstance(names, list):
        for name in names:
            if not _fd_queue:
                break
            fd = _fd_queue.pop(0)
            old = _inbox.pop(str(name), None)
            if old is not None:
                os.close(old)
            _inbox[str(name)] = fd
    return msg


_buf = bytearray()


def _readline() -> bytes:
    while True:
        i = _buf.find(b"\n")
        if i >= 0:
            line = bytes(_buf[:i])
            del _buf[:i + 1]
            return line
        chunk, anc, _, _ = _sock.recvmsg(1 << 16, socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
                for fd in fds:
                    os.set_inheritable(fd, False)  # not for the user's subprocesses
                _fd_queue.extend(fds)
        if not chunk:
            return b""
        _buf.extend(chunk)


def wait_grant() -> None:
    msg = recv()
    if not msg or not msg.get("grant"):
        os._exit(0)  # the pool went away, or said stop


def phase(name: str) -> None:
    _current_phase[0] = name
    send({"event": "phase", "phase": name})
    if name == "run":
        wait_grant()


def current_phase() -> Optional[str]:
    return _current_phase[0]


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Time a step of the op under way (added to ``name``'s seconds)."""
    t0 = _perf()
    try:
        yield
    finally:
        add_step(name, _perf() - t0)


def add_step(name: str, seconds: float) -> None:
    _steps[name] = _steps.get(name, 0.0) + seconds


def take_steps() -> dict[str, float]:
    """The steps timed since the last call, rounded to microseconds; the record starts again."""
    out = {k: round(v, 6) for k, v in _steps.items()}
    _steps.clear()
    return out


def at(side: str, case: str) -> None:
    send({"event": "at", "side": side, "case": case})
