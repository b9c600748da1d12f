"""What the editor's layer says when a request cannot be served: problems the user can fix, and
arguments that do not fit a command (answered with JSON-RPC error -32602)."""

from __future__ import annotations

import json
from typing import Any

TARGET = '{"uri": ..., "name": ...}'
"""The argument of geak.optimize, geak.benchmark and geak.results, in their error messages."""


class UserFacing(Exception):
    """A problem the user can fix, in words (bad input, bad settings, no runner)."""


class BadArguments(UserFacing):
    """A geak command's arguments do not fit it: answered with JSON-RPC error -32602 (Invalid
    params), not a result, so that a client cannot mistake it for an answer."""


def shown(arg: Any) -> str:
    """An argument as the client sent it (JSON), shortened."""
    try:
        text = json.dumps(arg)
    except (TypeError, ValueError):
        text = repr(arg)
    return text if len(text) <= 200 else text[:200] + "..."


def target_argument(command: str, args: tuple) -> Any:
    """The one argument of a command that takes a target (None when there is none; its shape is
    checked where it is read)."""
    if len(args) > 1:
        raise BadArguments(f"{command}: expected one argument {TARGET}, got {len(args)} arguments")
    return args[0] if args else None


def target_of(command: str, arg: Any) -> tuple[str, str]:
    """``{"uri", "name"}``, checked: (uri, name)."""
    if not isinstance(arg, dict) or not isinstance(arg.get("uri"), str) or not isinstance(arg.get("name"), str):
        raise BadArguments(f"{command}: expected one argument {TARGET}, got {shown(arg)}")
    return arg["uri"], arg["name"]
