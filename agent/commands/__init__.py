"""The ``geak`` subcommands: ``eval``, ``optimize`` and ``bench``, one module each.

Each turns its command line into the agent's and the runner's calls and prints the outcome:
people's output on stderr, ``--json`` on stdout. Exit codes: 0 success, 1 the work ran but found
no verified result, 2 bad usage or bad input. Only ``agent.cli`` imports these modules.
"""

from __future__ import annotations

import sys

from runner.schema import EvalResult
from runner.source import SourceError

EXIT_OK, EXIT_UNVERIFIED, EXIT_BAD_INPUT = 0, 1, 2

BAD_INPUT_KINDS = ("bad_request", "syntax_error", "missing_symbol", "no_inputs", "bad_inputs",
                   "signature_mismatch", "runner_unavailable")
"""Error kinds that are the user's input (or the runner) rather than the candidate's doing."""


def err(msg: str = "") -> None:
    print(msg, file=sys.stderr)


def tell_source_error(e: SourceError) -> None:
    """What cannot be told from the code's text, said before anything ran."""
    err(f"geak: {e.info.message}")
    if e.info.hint:
        err(f"  what to do: {e.info.hint}")


def exit_code(result: EvalResult) -> int:
    if result.verified:
        return EXIT_OK
    if result.error and (result.error.side == "reference" or result.error.kind in BAD_INPUT_KINDS):
        return EXIT_BAD_INPUT
    return EXIT_UNVERIFIED
