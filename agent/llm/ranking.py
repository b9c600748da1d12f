"""The optimizer: the history of verified candidates, ranked by measured speed, and the choice.

GEAK feeds the best few correct kernels back, sorted from slowest to fastest, each with its
measurements and the model's own account of it. Without timing (the CPU interpreter) the
verified candidates keep the order in which they were found and say they were not timed.
``choose`` takes the fastest candidate that is verified faster than the original
(``EvalResult.verified_speedup``: by more than its timing spread, and at least 1%); nothing
untimed is ever chosen.
"""

from __future__ import annotations

from typing import Optional

from agent.llm.evaluator import CORRECT, speedup
from agent.llm.records import Step

KEEP = 5
MAX_NOTES_CHARS = 600


def verified(steps: list[Step]) -> list[Step]:
    return [s for s in steps if s.outcome == CORRECT and s.result is not None]


def rank(steps: list[Step], keep: int = KEEP) -> list[Step]:
    """The ``keep`` fastest verified candidates, slowest first and fastest last; untimed ones
    (in the order found) come before all timed ones."""
    ok = verified(steps)
    untimed = [s for s in ok if speedup(s.result) is None]
    timed = sorted((s for s in ok if speedup(s.result) is not None), key=lambda s: speedup(s.result))
    return (untimed + timed)[-keep:] if keep else untimed + timed


def choose(steps: list[Step]) -> Optional[Step]:
    faster = [s for s in verified(steps) if s.result.verified_speedup() is not None]
    return max(faster, key=lambda s: s.result.speedup, default=None)


def best_known(steps: list[Step]) -> Optional[Step]:
    ranked = rank(steps, keep=0)
    return ranked[-1] if ranked else None


def history_text(ranked: list[Step]) -> str:
    if not ranked:
        return "(none yet)"
    parts = []
    for n, s in enumerate(ranked, 1):
        sp = speedup(s.result)
        t = s.result.timing
        head = (f"### {n}. {s.id}: {sp:.3f}x the original ({t.cand_ms:.4f} ms vs {t.ref_ms:.4f} ms, "
                f"spread ±{t.spread_pct:.1f}%)" if sp is not None and t is not None else
                f"### {n}. {s.id}: correct, not timed (this runner measures no speed)")
        notes = (s.notes or "").strip()
        if len(notes) > MAX_NOTES_CHARS:
            notes = notes[:MAX_NOTES_CHARS] + " ..."
        parts.append(head + ("\n\nIts author's notes: " + notes if notes else "") +
                     f"\n\n```python\n{s.source.rstrip()}\n```")
    return "\n\n".join(parts)
