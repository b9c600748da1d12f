"""Where an optimization stands, as it runs: the ``Progress`` events ``optimize`` sends (their
counts kept by the runner a search holds, ``agent.watch.Watched``).

Every front end gets the same events: the CLI prints them, the language server turns them into
its progress bar and its ``geak/jobStatus`` notification, the benchmark harness ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from runner.schema import DeviceInfo


@dataclass
class Progress:
    stage: str
    """original (checking it) | search (begins) | batch (tuner configs evaluated) | step (a GEAK
    loop attempt evaluated) | iteration (one done) | untimed (checking the untimed edit)"""
    message: str
    """One line for people."""
    evaluated: int = 0
    """Candidates (configs) evaluated so far."""
    verified: int = 0
    """Of them, verified correct."""
    best_speedup: Optional[float] = None
    """The best speedup so far of a candidate verified faster than the original."""
    done: int = 0
    """Work done of ``total``: configs evaluated (tuner), iterations (GEAK loop)."""
    total: Optional[int] = None
    device: Optional[DeviceInfo] = None
    arch: Optional[str] = None
    step: Any = None
    """stage ``step``: the GEAK loop's ``Step``."""
    tokens: Optional[int] = None
    """The GEAK loop: tokens spent so far."""

    @property
    def best_text(self) -> str:
        if self.best_speedup is not None:
            return f"best verified {self.best_speedup:.2f}x"
        return "no verified speedup yet" + (" (nothing timed)" if self.verified else "")
