"""Token usage of one run, with an optional budget that stops the run cleanly."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional


class BudgetExceeded(Exception):
    """The run's token budget is spent: no further model calls are made."""


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    failed_calls: int = 0
    budget: Optional[int] = None
    """Total tokens (input + output) this run may spend; None = no limit."""

    def __post_init__(self):
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, input_tokens: int, output_tokens: int) -> None:
        with self._lock:
            self.input_tokens += max(0, input_tokens)
            self.output_tokens += max(0, output_tokens)
            self.calls += 1

    def failed(self) -> None:
        with self._lock:
            self.failed_calls += 1

    @property
    def spent(self) -> bool:
        return self.budget is not None and self.total >= self.budget

    def check(self) -> None:
        """Raise BudgetExceeded when no further call may start."""
        if self.spent:
            raise BudgetExceeded(f"token budget spent: {self.total} of {self.budget} tokens used")

    def as_dict(self) -> dict:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total, "calls": self.calls, "failed_calls": self.failed_calls,
                "budget_tokens": self.budget}
