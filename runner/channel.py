"""The worker's end of its protocol socket (JSON lines), and the phase announcements.

Messages to the pool:

  -> {"event": "hello", "device": DeviceInfo, "sandbox": {...}}
  -> {"event": "at", "side": ..., "case": ...}         what runs now (for crash reports)
  -> {"event": "phase", "phase": "compile" | "run"}    a Triton compile leaves the device lock;
  <- {"grant": true}                                    "run" waits for the lock to come back
  -> {"event": "reply", "op": NAME, ...}                the answer to an op
  -> {"event": "reply", "op": NAME, "failure": {...}}   or the failure of the user's code

The pool holds the device lock an op needs before it sends the op. Nothing the worker says
decides a verdict by itself: the pool treats a candidate worker's messages as claims, and the
verdict comes from the reference worker's comparison (``runner.verdict``).
"""

from __future__ import annotations

import json
import os
from typing import Optional

_sock_file = None
_current_phase: list[Optional[str]] = [None]


def open_channel(fd: int) -> None:
    global _sock_file
    _sock_file = os.fdopen(fd, "rb+", buffering=0)


def send(msg: dict) -> None:
    data = (json.dumps(msg, allow_nan=False) + "\n").encode()
    view = memoryview(data)
    while view:
        n = _sock_file.write(view)
        view = view[n:]


def recv() -> Optional[dict]:
    line = _readline()
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return {}


_buf = bytearray()


def _readline() -> bytes:
    while True:
        i = _buf.find(b"\n")
        if i >= 0:
            line = bytes(_buf[:i])
            del _buf[:i + 1]
            return line
        chunk = _sock_file.read(1 << 16)
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


def at(side: str, case: str) -> None:
    send({"event": "at", "side": side, "case": case})
