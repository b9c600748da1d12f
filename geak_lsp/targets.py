"""Targets in a document, from its syntax tree: Triton kernels, their launching wrappers,
PyTorch functions and ``nn.Module`` classes.

Standard library only (``ast``), and nothing is imported from the user's code: this runs on
every code action and hover, so it must be fast and must never import torch. A document that
does not parse keeps the targets of its last good version (flagged ``stale_tree``), or has
none.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from typing import Optional

from runner.source import input_conventions, is_triton_kernel, launched_kernels, top_level_names

INPUT_NAMES = {"get_inputs", "get_init_inputs", "get_flops", "INPUT_CASES"}


@dataclass
class Span:
    """Whole lines, 0-based, end inclusive (decorators included)."""

    start: int
    end: int


@dataclass
class Target:
    name: str
    kind: str
    """kernel | wrapper | function | module"""
    span: Span
    header: Span
    """The decorators and the ``def``/``class`` line(s) up to the body: where hovers answer."""
    name_line: int
    name_col: int
    """0-based, in characters, where the name is written on its ``def``/``class`` line."""
    kernels: list[str] = field(default_factory=list)
    """For a wrapper: the kernels of this file it launches."""
    wrappers: list[str] = field(default_factory=list)
    """For a kernel: the functions of this file that launch it."""
    params: list[str] = field(default_factory=list)
    """The function's (or ``forward``'s / ``__init__``'s for a module) parameter names."""
    init_params: list[str] = field(default_factory=list)

    @property
    def evaluated(self) -> str:
        """The symbol that is evaluated: a kernel's first launching wrapper, else itself."""
        return self.wrappers[0] if self.kind == "kernel" and self.wrappers else self.name


@dataclass
class DocumentTargets:
    targets: list[Target]
    conventions: list[str]
    """Input conventions the file follows (``runner.source.input_conventions``)."""
    lines: list[str]
    """The text the targets were found in, split into lines (keepends)."""
    syntax_error: Optional[str] = None
    """Set when the current text does not parse; ``targets`` then come from the last good text."""
    stale_tree: bool = False
    has_torch_import: bool = False

    def by_name(self, name: str) -> Optional[Target]:
        return next((t for t in self.targets if t.name == name), None)

    def at_line(self, line: int) -> Optional[Target]:
        """The innermost target whose span holds ``line``."""
        hits = [t for t in self.targets if t.span.start <= line <= t.span.end]
        return min(hits, key=lambda t: t.span.end - t.span.start, default=None)

    def at_header(self, line: int) -> Optional[Target]:
        return next((t for t in self.targets if t.header.start <= line <= t.header.end), None)

    def source_of(self, target: Target) -> str:
        """The target's own text and that of the kernels it launches (what its results depend on)."""
        names = [target.evaluated]
        t = self.by_name(target.evaluated)
        if t is not None:
            names += t.kernels
        parts = []
        for n in names:
            tt = self.by_name(n)
            if tt is not None:
                parts.append("".join(self.lines[tt.span.start:tt.span.end + 1]))
        return "\n".join(parts)

    def source_hash(self, target: Target) -> str:
        return hashlib.sha256(self.source_of(target).encode()).hexdigest()[:16]


def _uses_torch(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in ("torch", "F", "nn"):
            return True
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("torch", "F", "nn"):
            return True
    return False


def _is_module_class(node: ast.ClassDef) -> bool:
    for b in node.bases:
        text = ast.unparse(b)
        if text in ("nn.Module", "torch.nn.Module", "Module"):
            return True
    return False


def _params(fn: Optional[ast.AST], skip_self: bool = False) -> list[str]:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if skip_self and names and names[0] == "self":
        names = names[1:]
    return names


def _method(node: ast.ClassDef, name: str) -> Optional[ast.FunctionDef]:
    return next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == name), None)


def _header_end(node: ast.AST) -> int:
    body = getattr(node, "body", None)
    if body:
        first = body[0]
        # A docstring or statement on the line after the signature: the header ends before it.
        return max(node.lineno, first.lineno - 1) - 1
    return node.lineno - 1


def _name_col(lines: list[str], node: ast.AST) -> int:
    line = lines[node.lineno - 1] if node.lineno - 1 < len(lines) else ""
    col = line.find(" " + node.name, node.col_offset)
    return col + 1 if col >= 0 else node.col_offset


def find_targets(text: str) -> DocumentTargets:
    """Parse ``text`` and list its targets. Raises SyntaxError (and ValueError for NUL bytes)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    names = top_level_names(tree)
    kernels = {n for n, d in names.items() if is_triton_kernel(d)}
    has_torch = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
        (a.name or "").split(".")[0] == "torch" for a in n.names) or
        (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch")
        for n in tree.body)
    out: list[Target] = []
    launches: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        if node.name in INPUT_NAMES or node.name.startswith("test"):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        span = Span(start, (node.end_lineno or node.lineno) - 1)
        header = Span(start, _header_end(node))
        t = Target(name=node.name, kind="function", span=span, header=header,
                   name_line=node.lineno - 1, name_col=_name_col(lines, node))
        if node.name in kernels:
            t.kind = "kernel"
            t.params = _params(node)
        elif isinstance(node, ast.ClassDef):
            if not _is_module_class(node):
                continue
            t.kind = "module"
            t.params = _params(_method(node, "forward"), skip_self=True)
            t.init_params = _params(_method(node, "__init__"), skip_self=True)
        else:
            launched = launched_kernels(node) & kernels
            if launched:
                t.kind = "wrapper"
                t.kernels = sorted(launched)
                launches[node.name] = launched
            elif not (has_torch and _uses_torch(node)):
                continue  # plain Python: not something GEAK optimizes
            t.params = _params(node)
        out.append(t)
    for t in out:
        if t.kind == "kernel":
            t.wrappers = [w for w, ks in launches.items() if t.name in ks]
    return DocumentTargets(targets=out, conventions=input_conventions(tree), lines=lines,
                           has_torch_import=has_torch)


class TargetCache:
    """Targets per document: recomputed when the text changes, the last good result kept for
    texts that do not parse."""

    def __init__(self):
        self._by_uri: dict[str, tuple[str, DocumentTargets]] = {}
        self._good: dict[str, DocumentTargets] = {}

    def get(self, uri: str, text: str) -> DocumentTargets:
        key = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
        hit = self._by_uri.get(uri)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            found = find_targets(text)
            self._good[uri] = found
        except (SyntaxError, ValueError) as e:
            line = getattr(e, "lineno", None)
            msg = f"line {line}: {getattr(e, 'msg', str(e))}" if line else str(e)
            good = self._good.get(uri)
            found = DocumentTargets(targets=list(good.targets) if good else [],
                                    conventions=list(good.conventions) if good else [],
                                    lines=text.splitlines(keepends=True), syntax_error=msg,
                                    stale_tree=good is not None,
                                    has_torch_import=good.has_torch_import if good else False)
        self._by_uri[uri] = (key, found)
        return found

    def forget(self, uri: str) -> None:
        self._by_uri.pop(uri, None)
        self._good.pop(uri, None)
