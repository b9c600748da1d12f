"""Diagnostics on targets: what the last job found, kept per document and per target.

Information: a verified result (speedup, or "correct, not timed"), a correct benchmark.
Warning: the original failing its own inputs, a job that could not run, a result that was not
applied because the document changed. Candidates that failed are about GEAK's attempts, not the
user's code: a Hint (no squiggle, not in VS Code's Problems panel), dropped once a result is
applied; the results view lists them. When the target's source changes, its findings are marked
stale (Hint, "stale:"), not silently kept as if they still held.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from lsprotocol import types as t

from geak_lsp.edits import utf16_len
from geak_lsp.targets import DocumentTargets

SOURCE = "geak"


@dataclass
class Finding:
    name: str
    """The target the diagnostic sits on."""
    source_hash: str
    severity: t.DiagnosticSeverity
    message: str
    code: str
    """verified | not-timed | benchmark | fails-own-inputs | candidates-failed | not-applied | no-improvement | error"""
    related: list[str] = field(default_factory=list)


class Diagnostics:
    def __init__(self):
        self._by_uri: dict[str, dict[str, list[Finding]]] = {}

    def set(self, uri: str, name: str, findings: list[Finding]) -> None:
        self._by_uri.setdefault(uri, {})[name] = findings

    def clear(self, uri: str, name: Optional[str] = None) -> None:
        if name is None:
            self._by_uri.pop(uri, None)
        else:
            self._by_uri.get(uri, {}).pop(name, None)

    def has(self, uri: str) -> bool:
        return bool(self._by_uri.get(uri))

    def findings(self, uri: str) -> dict[str, list[Finding]]:
        return self._by_uri.get(uri, {})

    def render(self, uri: str, doc: Optional[DocumentTargets]) -> list[t.Diagnostic]:
        """LSP diagnostics for the document's current text (stale ones marked)."""
        out = []
        for name, fs in list(self._by_uri.get(uri, {}).items()):
            target = doc.by_name(name) if doc else None
            if target is None:
                if doc is not None and not doc.syntax_error:
                    self._by_uri[uri].pop(name, None)  # the target is gone: so are its findings
                continue
            line = doc.lines[target.name_line] if target.name_line < len(doc.lines) else ""
            col = utf16_len(line[:target.name_col])
            rng = t.Range(start=t.Position(line=target.name_line, character=col),
                          end=t.Position(line=target.name_line, character=col + utf16_len(target.name)))
            stale = doc.syntax_error is None and doc.source_hash(target) != fs[0].source_hash if fs else False
            for f in fs:
                if stale:
                    out.append(t.Diagnostic(range=rng, severity=t.DiagnosticSeverity.Hint, source=SOURCE,
                                            code=f.code, message="stale (the code changed since): " + f.message))
                else:
                    out.append(t.Diagnostic(range=rng, severity=f.severity, source=SOURCE, code=f.code,
                                            message=f.message))
        return out
