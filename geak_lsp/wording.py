"""The runner's and the agent's advice, in the editor's words.

Their messages are written for the command line (``--runner URL``, ``GEAK_RUNNER_URL``,
``--untimed``); in the editor the same things are the ``geak.runner.url`` and
``geak.applyUntimed`` settings. Every text the server shows that may
carry such advice (diagnostics, job ends, hovers) passes through ``editor_words``.
"""

from __future__ import annotations

import re

_RULES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"connect a GPU runner \(--runner URL or GEAK_RUNNER_URL\)"),
     "set geak.runner.url to a GPU runner"),
    (re.compile(r"Run the same command on a GPU box, or point it at a runner there: "
                r"--runner (\S+) \(geak-runner serve on that box\)"),
     r"Set geak.runner.url to a runner on a GPU box (\1: geak-runner serve there)"),
    (re.compile(r"\(?--runner URL or \$?GEAK_RUNNER_URL\)?"), "the geak.runner.url setting"),
    (re.compile(r"a GPU runner: --runner URL"), "a GPU runner: the geak.runner.url setting"),
    (re.compile(r"\(--runner URL\)"), "(the geak.runner.url setting)"),
    (re.compile(r"--runner (URL|\S+://\S+)"), r"geak.runner.url \1"),
    (re.compile(r"--untimed\b"), "geak.applyUntimed"),
]


def editor_words(text: str) -> str:
    """``text`` with command-line advice about runners said as the editor's setting."""
    if not text or ("runner" not in text.lower() and "--untimed" not in text):
        return text
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text
