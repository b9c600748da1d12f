"""The ``geak`` subcommands: ``eval``, ``optimize``, ``bench`` and ``asm``, one module each.

Each turns its command line into the agent's and the runner's calls and prints the outcome:
the command's product (its report, the diff of ``--preview``; with ``--json`` the JSON instead)
on stdout, progress and notes on stderr. Exit codes: 0 success, 1 the work ran but found no
verified result, 2 bad usage or bad input, 3 the runner cannot be used (unreachable, a token
missing or refused, no device of the kind asked for), 4 the model provider cannot be used
(unreachable, a key or model refused, every call failing). Only ``agent.cli`` imports these
modules.
"""

from __future__ import annotations

import sys
from typing import Optional

from runner.schema import EvalResult
from runner.source import SourceError

EXIT_OK, EXIT_UNVERIFIED, EXIT_BAD_INPUT, EXIT_RUNNER, EXIT_PROVIDER = 0, 1, 2, 3, 4

BAD_INPUT_KINDS = ("bad_request", "syntax_error", "missing_symbol", "no_inputs", "bad_inputs",
                   "signature_mismatch")
"""Error kinds that are the user's input rather than the candidate's doing."""


def err(msg: str = "") -> None:
    print(msg, file=sys.stderr)


def product(text: str, json_too: bool = False) -> None:
    """The command's product for people: on stdout, unless ``--json`` owns stdout (then stderr)."""
    print(text, file=sys.stderr if json_too else sys.stdout, flush=True)


def tell_source_error(e: SourceError) -> None:
    """What cannot be told from the code's text, said before anything ran."""
    err(f"geak: {e.info.message}")
    if e.info.hint:
        err(f"  what to do: {e.info.hint}")


def runner_unavailable(result: Optional[EvalResult]) -> bool:
    """The evaluation did not run because the runner could not be used (a configuration error,
    not the code's doing)."""
    return bool(result is not None and result.error and result.error.kind == "runner_unavailable")


def tell_unavailable(result: EvalResult) -> None:
    """One message for a runner that cannot be used, and what to do."""
    err(f"geak: cannot run: {result.error.message if result.error else result.message}")
    if result.error and result.error.hint:
        err(f"  what to do: {result.error.hint}")


def exit_code(result: EvalResult) -> int:
    if result.verified:
        return EXIT_OK
    if runner_unavailable(result):
        return EXIT_RUNNER
    if result.error and (result.error.side == "reference" or result.error.kind in BAD_INPUT_KINDS):
        return EXIT_BAD_INPUT
    return EXIT_UNVERIFIED
