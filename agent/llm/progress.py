"""Progress on stderr: a bar redrawn in place on a terminal, one line per event otherwise."""

from __future__ import annotations

import sys
from typing import Optional, TextIO


class Progress:
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
