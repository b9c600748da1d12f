"""Checks on what a client sends, shared by the HTTP API and the spool directory.

Everything here runs before a request is stored or evaluated, on the parsed JSON, and before
anything in the daemon parses the sources (the worker does that): sizes against this runner's
limits, file paths, symbols, the schema, and the request's limits against this runner's
ceilings. A problem is an ``Invalid`` with a 4xx status that names the field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from runner.schema import (EvalRequest, Flag, Limits, SchemaError, check_schema, clamp_limits, from_dict,
                      to_json)
from .store import ID_RE

MAX_FILES = 1000
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255


class Invalid(ValueError):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Policy:
    """What this runner accepts (``geak-runner serve`` flags)."""

    ceilings: Limits = field(default_factory=Limits)
    """The most each limit may be: a request may ask for less, never more, and null or absent
    means the ceiling."""
    max_file_bytes: int = 512 << 10
    """One source file (``--max-file-kb``)."""
    max_request_bytes: int = 8 << 20
    """All the source files of one request together (``--max-request-mb``)."""


def _shown(value, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "...'"


def check_id(jid, where: str = "id") -> str:
    if not isinstance(jid, str) or not ID_RE.fullmatch(jid):
        raise Invalid(400, "bad_request", (f"{where} must be 1-128 characters of letters, digits, '.', '_' "
                                           f"or '-', starting with a letter or digit; got {_shown(jid)}"))
    return jid


def check_path(path, where: str) -> str:
    """A project-relative POSIX path that any file system here can hold."""
    def bad(why: str):
        raise Invalid(422, "invalid_request", f"{where}: the path {_shown(path)} {why}")
    if not isinstance(path, str) or not path:
        bad("is not a non-empty string")
    if "\x00" in path:
        bad("contains a NUL byte")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        bad("contains a control character")
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        bad("is not valid UTF-8 (a lone surrogate)")
    if len(raw) > MAX_PATH_BYTES:
        bad(f"is longer than {MAX_PATH_BYTES} bytes")
    if path.startswith("/") or "\\" in path:
        bad("must be relative to the project, with '/' between folders")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            bad("has an empty, '.' or '..' part")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            bad(f"has a name longer than {MAX_NAME_BYTES} bytes")
    return path


def _check_sources(data: dict, where: str, policy: Policy) -> None:
    """Paths and sizes of ``files`` and ``candidate_files``, before anything else reads them."""
    total = 0
    count = 0
    for key in ("files", "candidate_files"):
        files = data.get(key, {} if key == "candidate_files" else None)
        if not isinstance(files, dict):
            raise Invalid(422, "invalid_request", f"{where}.{key}: expected an object of path -> text")
        count += len(files)
        if count > MAX_FILES:
            raise Invalid(422, "invalid_request", f"{where}: more than {MAX_FILES} files")
        for path, text in files.items():
            at = f"{where}.{key}"
            check_path(path, at)
            if not isinstance(text, str):
                raise Invalid(422, "invalid_request", f"{at}[{_shown(path)}]: expected the file's text, "
                              f"got {type(text).__name__}")
            if len(text) > policy.max_file_bytes:  # characters <= bytes: too large before encoding
                size = len(text)
            else:
                try:
                    size = len(text.encode("utf-8"))
                except UnicodeEncodeError:
                    raise Invalid(422, "invalid_request", f"{at}[{_shown(path)}]: the text is not valid "
                                  "UTF-8 (a lone surrogate)") from None
            if size > policy.max_file_bytes:
                raise Invalid(413, "source_too_large", f"{at}[{_shown(path)}] is {size:,} bytes; this runner "
                              f"takes source files of at most {policy.max_file_bytes >> 10:,} KiB "
                              "(the daemon's --max-file-kb)")
            if path.endswith(".py") and "\x00" in text:
                raise Invalid(422, "invalid_request", f"{at}[{_shown(path)}]: Python source cannot "
                              "contain a NUL byte")
            total += size
            if total > policy.max_request_bytes:
                raise Invalid(413, "source_too_large", f"{where}: its source files are more than "
                              f"{policy.max_request_bytes >> 20:,} MiB together; this runner's limit "
                              "(the daemon's --max-request-mb)")


def _check_target(target, where: str) -> None:
    if not isinstance(target, dict):
        return  # from_dict names it
    check_path(target.get("path"), f"{where}.path")
    if not target["path"].endswith(".py"):
        raise Invalid(422, "invalid_request", f"{where}.path: {_shown(target['path'])} is not a Python "
                      "file (.py)")
    sym = target.get("symbol")
    if not isinstance(sym, str) or not sym.isidentifier():
        raise Invalid(422, "invalid_request", f"{where}.symbol: {_shown(sym)} is not a Python name")


def parse_request(data, where: str = "EvalRequest", jid: str = "",
                  policy: Policy = Policy()) -> tuple[str, str, list[Flag]]:
    """A parsed JSON value -> ``(job id, canonical request JSON, flags)``; raises ``Invalid``.
    ``jid`` (from a spool file name) overrides the request's own id. The canonical request
    carries the limits that apply (the request's, under this runner's ceilings); ``flags``
    say which were lowered."""
    if not isinstance(data, dict):
        raise Invalid(400, "bad_request", f"{where}: expected a JSON object (an EvalRequest)")
    try:
        check_schema(data)
    except SchemaError as e:
        raise Invalid(400, "schema_mismatch", f"{where}: {e}") from None
    if "target" not in data or "files" not in data:
        raise Invalid(422, "invalid_request", f"{where}: missing required field "
                      f"'{'target' if 'target' not in data else 'files'}'")
    _check_sources(data, where, policy)
    _check_target(data["target"], f"{where}.target")
    if data.get("candidate") is not None:
        _check_target(data["candidate"], f"{where}.candidate")
    options = data.get("options")
    try:
        limits, flags = clamp_limits(options.get("limits") if isinstance(options, dict) else None,
                                     policy.ceilings, f"{where}.options.limits")
        if isinstance(options, dict) and "limits" in options:
            # The limits were read above (null is the ceiling); from_dict would take a null
            # memory_mb for a missing integer.
            data = {**data, "options": {k: v for k, v in options.items() if k != "limits"}}
        req = from_dict(EvalRequest, data, where)
    except SchemaError as e:
        raise Invalid(422, "invalid_request", str(e)) from None
    req.options.limits = limits
    if jid:
        req.id = jid
    req.id = check_id(req.id, f"{where}.id") if req.id else uuid.uuid4().hex
    return req.id, to_json(req), flags
