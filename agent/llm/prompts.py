"""Prompt templates live in agent/prompts/*.md; ``{{name}}`` marks a slot.

Rendering is plain text substitution (no format-string escapes, so code with braces is safe);
a slot left unfilled, or a value for a slot the template lacks, is an error.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
_SLOT = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@lru_cache(maxsize=None)
def template(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8")


def slots(name: str) -> set[str]:
    return set(_SLOT.findall(template(name)))


def render(name: str, **values: str) -> str:
    need = slots(name)
    missing, extra = need - set(values), set(values) - need
    if missing or extra:
        raise KeyError(f"prompt {name}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    return _SLOT.sub(lambda m: str(values[m.group(1)]), template(name)).strip() + "\n"
