"""The terminal side of the CLI: a ticker for calls that may take long, and a progress bar.

Both write to stderr (``--json`` output alone goes to stdout).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Optional, TextIO

from runner.schema import Limits


class Ticker:
    """While a call that may take long runs, say on stderr what is running and for how long:
    after ``first_s``, then every ``every_s`` (a terminal gets one line, updated each second).
    ``limits``, when given, are said once, on a line of their own when the ticker first shows (a
    command that runs several tickers gives them to the first only)."""

    def __init__(self, what: str, limits: Optional[Limits] = None, option: str = "--timeout",
                 first_s: float = 5.0, every_s: float = 15.0, stream=None):
        self.what, self.first_s, self.every_s = what, first_s, every_s
        self.stream = stream or sys.stderr
        self.tail = limits_text(limits, option) if limits is not None else ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._shown = False
        self.said_limits = False
        """The limits were said (the command need not say them again)."""
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def _run(self):
        t0 = time.monotonic()
        if self._stop.wait(self.first_s):
            return
        last = 0.0
        if self.tail:  # once, on a line of its own
            print(f"  ({self.tail})", file=self.stream, flush=True)
            self.said_limits = True
        while not self._stop.is_set():
            el = time.monotonic() - t0
            if self._tty:
                width = shutil.get_terminal_size((80, 24)).columns - 1
                self.stream.write(f"\r\x1b[2K  ... {self.what}: {el:.0f} s so far"[:width + 5])
                self.stream.flush()
                self._shown = True
                self._stop.wait(1.0)
            else:
                if not self._shown or el - last >= self.every_s:
                    print(f"  ... {self.what}: {el:.0f} s so far", file=self.stream, flush=True)
                    self._shown, last = True, el
                self._stop.wait(min(1.0, self.every_s))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)
        if self._tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def limits_text(limits: Limits, option: str) -> str:
    """The phase limits of every evaluation, and the option that changes them."""
    return (f"limits per evaluation phase: import {limits.import_s:g} s, run {limits.run_s:g} s, "
            f"timing {limits.timing_s:g} s; {option} S to change")


class Bar:
    """A bar of iterations, redrawn in place on a terminal; one line per event otherwise."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, width: int = 24):
        self.total, self.width = max(1, total), width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._bar = False

    def _clear(self) -> None:
        if self.tty and self._bar:
            self.stream.write("\r\033[K")
            self._bar = False

    def line(self, text: str) -> None:
        self._clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def bar(self, done: int, status: str) -> None:
        filled = int(self.width * min(done, self.total) / self.total)
        text = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} iterations  {status}"
        if self.tty:
            self._clear()
            self.stream.write(text)
            self._bar = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        self._clear()
        self.stream.flush()
