"""From a result module to the smallest honest edit of the user's document.

A strategy returns a whole module (the target file as it was evaluated). The edit replaces only
the target's source spans: every top-level function or class that the result changed (the
wrapper, its kernels, helpers), inserts the ones it added before the first replaced span, and
adds the imports it needs. The file's inputs (``get_inputs``, ``INPUT_CASES``, tests) stay the
user's. ``merge`` returns the new text too, so the caller can check that the text it is about
to write is the text that was verified (or verify it again).

Standard library only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from geak_lsp.targets import INPUT_NAMES


class MergeError(Exception):
    pass


@dataclass
class LineEdit:
    start: int
    """0-based first line replaced."""
    end: int
    """0-based line after the last one replaced (== start for an insertion)."""
    text: str


@dataclass
class Merge:
    edits: list[LineEdit]
    text: str
    """The document after the edits."""
    changed: list[str]
    added: list[str]


def _defs(tree: ast.Module) -> dict[str, tuple[int, int]]:
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            out[node.name] = (start, node.end_lineno or node.lineno)
    return out


def _imports(tree: ast.Module, lines: list[str]) -> list[tuple[str, int]]:
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(("".join(lines[node.lineno - 1:node.end_lineno]).strip(), node.end_lineno))
    return out


def _keep(name: str) -> bool:
    return name not in INPUT_NAMES and not name.startswith("test")


def merge(original: str, result: str) -> Merge:
    """Edits that turn ``original`` into ``original`` with ``result``'s definitions."""
    try:
        otree = ast.parse(original)
    except SyntaxError as e:
        raise MergeError(f"the document does not parse (line {e.lineno}: {e.msg})") from None
    try:
        rtree = ast.parse(result)
    except SyntaxError as e:
        raise MergeError(f"the result does not parse (line {e.lineno}: {e.msg})") from None
    olines = original.splitlines(keepends=True)
    rlines = result.splitlines(keepends=True)
    if olines and not olines[-1].endswith("\n"):
        olines[-1] += "\n"
    if rlines and not rlines[-1].endswith("\n"):
        rlines[-1] += "\n"
    odefs, rdefs = _defs(otree), _defs(rtree)

    def text_of(lines, span):
        return "".join(lines[span[0]:span[1]])

    changed = [n for n in rdefs if n in odefs and _keep(n)
               and text_of(rlines, rdefs[n]) != text_of(olines, odefs[n])]
    added = [n for n in rdefs if n not in odefs and _keep(n)]
    edits: list[LineEdit] = []
    for n in changed:
        s, e = odefs[n]
        edits.append(LineEdit(s, e, text_of(rlines, rdefs[n])))
    if added:
        # New definitions go before the first definition the result changed (kernels before
        # the wrapper that launches them), else after the last original definition.
        anchor = min((odefs[n][0] for n in changed), default=None)
        if anchor is None:
            anchor = max((e for _, e in odefs.values()), default=len(olines))
            block = "".join("\n\n" + text_of(rlines, rdefs[n]) for n in added)
        else:
            block = "".join(text_of(rlines, rdefs[n]) + "\n\n" for n in added)
        edits.append(LineEdit(anchor, anchor, block))
    have = {t for t, _ in _imports(otree, olines)}
    need = [t for t, _ in _imports(rtree, rlines) if t not in have]
    if need:
        after = max((e for _, e in _imports(otree, olines)), default=0)
        edits.append(LineEdit(after, after, "".join(t + "\n" for t in need)))
    # An insertion where a replacement starts is made one edit with it (insertion first), so
    # that no client has to order two edits at one position.
    folded: list[LineEdit] = []
    for ed in sorted(edits, key=lambda x: (x.start, x.end)):
        prev = folded[-1] if folded else None
        if prev is not None and prev.start == prev.end == ed.start:
            folded[-1] = LineEdit(ed.start, ed.end, prev.text + ed.text)
        else:
            folded.append(ed)
    edits = folded
    # Apply back to front.
    new = list(olines)
    for ed in sorted(edits, key=lambda x: (x.start, x.end), reverse=True):
        new[ed.start:ed.end] = [ed.text]
    text = "".join(new)
    if not original.endswith("\n") and text.endswith("\n") and original:
        pass  # the last line gained its newline: harmless, and what editors write anyway
    try:
        ast.parse(text)
    except SyntaxError as e:
        raise MergeError(f"merging the result into the document gives code that does not parse "
                         f"(line {e.lineno}: {e.msg})") from None
    return Merge(edits=sorted(edits, key=lambda x: (x.start, x.end)), text=text, changed=changed, added=added)


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def line_range(lines: list[str], start: int, end: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """LSP (line, character) positions for whole lines [start, end) of a document."""
    n = len(lines)
    if end < n:
        return (start, 0), (end, 0)
    last = lines[-1] if lines else ""
    last_len = utf16_len(last.rstrip("\r\n"))
    if last.endswith("\n"):
        return (min(start, n), 0), (n, 0)
    # The last line has no newline: the document ends at its last character.
    begin = (start, 0) if start < n else (n - 1, last_len)
    return begin, (n - 1, last_len)


def describe(m: Merge) -> str:
    parts = []
    if m.changed:
        parts.append("replaces " + ", ".join(m.changed))
    if m.added:
        parts.append("adds " + ", ".join(m.added))
    return "; ".join(parts) or "no change"


ANNOTATION = "geak-result"


def workspace_edit(uri: str, version: Optional[int], text: str, m: Merge, title: str, message: Optional[str],
                   caps, confirm: bool = True):
    """The LSP edit of a merge into ``text``: a versioned document edit with a change annotation
    that asks for confirmation where the client takes them (``caps``: its workspace
    capabilities), else plain changes."""
    from lsprotocol import types as t
    lines = text.splitlines(keepends=True)
    plain = []
    for ed in m.edits:
        (sl, sc), (el, ec) = line_range(lines, ed.start, ed.end)
        plain.append((t.Range(start=t.Position(line=sl, character=sc), end=t.Position(line=el, character=ec)),
                      ed.text))
    we = caps.workspace_edit if caps is not None else None
    doc_changes = bool(we and we.document_changes)
    annotations = bool(we and we.change_annotation_support is not None)
    desc = f"GEAK {describe(m)}" + (f": {message}" if message is not None else "")
    if doc_changes:
        if annotations:
            edits = [t.AnnotatedTextEdit(range=r, new_text=s, annotation_id=ANNOTATION) for r, s in plain]
        else:
            edits = [t.TextEdit(range=r, new_text=s) for r, s in plain]
        return t.WorkspaceEdit(
            document_changes=[t.TextDocumentEdit(
                text_document=t.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                edits=edits)],
            change_annotations={ANNOTATION: t.ChangeAnnotation(label=title, needs_confirmation=confirm,
                                                               description=desc)} if annotations else None)
    return t.WorkspaceEdit(changes={uri: [t.TextEdit(range=r, new_text=s) for r, s in plain]})
