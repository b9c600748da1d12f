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
import re
from dataclasses import dataclass, field
from typing import Optional

from runner.source import is_triton_kernel, launched_kernels, top_level_names

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


@dataclass
class _Def:
    """One top-level function or class, lines relative to its block (0-based)."""
    name: str
    is_class: bool
    is_kernel: bool
    is_module: bool
    launched: frozenset
    uses_torch: bool
    params: list
    init_params: list
    has_args: bool
    start: int
    end: int
    header_end: int
    name_line: int
    name_col: int


@dataclass
class _Block:
    defs: list
    names: list
    """Top-level names bound in the block, in order (a later binding wins, as in Python)."""
    kinds: dict
    """name -> "def" | "other": what each name is bound to last."""
    torch_import: bool


def _summarize(text: str) -> _Block:
    """Parse one block of top-level statements and keep only what targets need."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    names = top_level_names(tree)
    kinds = {n: ("def" if isinstance(d, ast.FunctionDef) else "other") for n, d in names.items()}
    torch_import = any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names)) or
        (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch")
        for n in tree.body)
    defs = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        is_class = isinstance(node, ast.ClassDef)
        defs.append(_Def(
            name=node.name, is_class=is_class, is_kernel=is_triton_kernel(node),
            is_module=is_class and _is_module_class(node),
            launched=frozenset(launched_kernels(node)) if not is_class else frozenset(),
            uses_torch=_uses_torch(node),
            params=_params(_method(node, "forward"), skip_self=True) if is_class else _params(node),
            init_params=_params(_method(node, "__init__"), skip_self=True) if is_class else [],
            has_args=bool(getattr(getattr(node, "args", None), "args", None)),
            start=start, end=(node.end_lineno or node.lineno) - 1, header_end=_header_end(node),
            name_line=node.lineno - 1, name_col=_name_col(lines, node)))
    return _Block(defs=defs, names=list(names), kinds=kinds, torch_import=torch_import)


_CONTINUATION = re.compile(r"(else|elif|except|finally)\b|[)\]}]")


def _block_starts(lines: list[str]) -> list[int]:
    """Lines where a top-level statement may begin: column 0, not blank, not a comment, not a
    continuation (else/elif/except/finally, a closing bracket), and not the def under a
    decorator. A start inside a string or brackets only makes a block that does not parse
    alone; such a block is joined with the next one."""
    starts, after_decorator = [], False
    for i, line in enumerate(lines):
        c = line[:1]
        if not c or c in " \t\r\n\f#" or _CONTINUATION.match(line):
            continue
        if after_decorator:
            after_decorator = c == "@"
            continue
        starts.append(i)
        after_decorator = c == "@"
    return starts or [0]


_BLOCKS: dict[str, _Block] = {}
_BAD: dict[int, SyntaxError] = {}
"""hash(text) -> its error, for block texts that do not parse alone: not parsed twice."""
MAX_CACHED_BLOCKS = 20000
_CONTINUES = ("never closed", "unterminated triple-quoted", "EOF", "unexpected end")


def _continues(e: SyntaxError, text: str) -> bool:
    """Does the block stop inside something the next lines may close (a string, brackets, a
    backslash), rather than at a mistake of its own?"""
    n = text.count("\n") + (0 if text.endswith("\n") else 1)
    return e.lineno is None or e.lineno >= n or any(c in (e.msg or "") for c in _CONTINUES)


def _shifted(e: SyntaxError, lines_before: int) -> SyntaxError:
    """The block's error at its line in the document."""
    if not lines_before or e.lineno is None:
        return e
    end = e.end_lineno + lines_before if getattr(e, "end_lineno", None) else None
    msg = re.sub(r"\(detected at line (\d+)\)", lambda m: f"(detected at line {int(m.group(1)) + lines_before})",
                 e.msg or "")
    return SyntaxError(msg, (e.filename, e.lineno + lines_before, e.offset, e.text, end,
                               getattr(e, "end_offset", None)))


def _parse_block(text: str) -> _Block:
    h = hash(text)
    bad = _BAD.get(h)
    if bad is not None:
        raise bad
    try:
        return _summarize(text)
    except SyntaxError as e:
        if len(_BAD) > MAX_CACHED_BLOCKS:
            _BAD.clear()
        _BAD[h] = e
        raise


def _parsed_blocks(lines: list[str]) -> list[tuple[int, _Block]]:
    """(first line, summary) for each block; parsed once per distinct block text, so an edit
    re-parses only the block it touches. Raises SyntaxError when the text does not parse.

    A block that stops inside a string or brackets is joined with the following ones (1, 2,
    4, ... of them, so a string that spans many column-0 lines costs a few parses, not one per
    line). A block that fails on a mistake of its own is the document's error: every block
    before it parsed and ended where a statement ends, so the whole file is never parsed."""
    starts = _block_starts(lines) + [len(lines)]
    if starts[0] != 0:
        starts.insert(0, 0)
    last = len(starts) - 1
    out = []
    i = 0
    while i < last:
        j = i + 1
        while True:
            text = "".join(lines[starts[i]:starts[j]])
            block = _BLOCKS.get(text)
            if block is None:
                try:
                    block = _parse_block(text)
                except SyntaxError as e:
                    if j < last and _continues(e, text):
                        j = min(last, i + 2 * (j - i))
                        continue
                    raise _shifted(e, starts[i]) from None
                if len(_BLOCKS) > MAX_CACHED_BLOCKS:
                    _BLOCKS.clear()
                _BLOCKS[text] = block
            break
        out.append((starts[i], block))
        i = j
    return out


def find_targets(text: str) -> DocumentTargets:
    """List the targets of ``text``. Raises SyntaxError (and ValueError for NUL bytes).

    Works block by block (see ``_parsed_blocks``); the result is what one ``ast.parse`` of the
    whole text would give (tests/test_lsp_units.py checks this on real files)."""
    if "\x00" in text:
        raise ValueError("source code string cannot contain null bytes")
    lines = text.splitlines(keepends=True)
    blocks = _parsed_blocks(lines)
    kinds: dict[str, str] = {}
    has_torch = False
    for _, b in blocks:
        kinds.update(b.kinds)
        has_torch = has_torch or b.torch_import
    defs = [(off, d) for off, b in blocks for d in b.defs]
    kernels = {d.name for _, d in defs if d.is_kernel}
    # Python's own rule: the last binding of a name wins.
    last_def: dict[str, _Def] = {}
    for _, d in defs:
        last_def[d.name] = d
    kernels = {k for k in kernels if kinds.get(k) == "def" and last_def[k].is_kernel}
    out: list[Target] = []
    launches: dict[str, set[str]] = {}
    for off, d in defs:
        if d.name in INPUT_NAMES or d.name.startswith("test"):
            continue
        t = Target(name=d.name, kind="function", span=Span(off + d.start, off + d.end),
                   header=Span(off + d.start, off + d.header_end), name_line=off + d.name_line,
                   name_col=d.name_col, params=list(d.params))
        if d.name in kernels:
            t.kind = "kernel"
        elif d.is_class:
            if not d.is_module:
                continue
            t.kind = "module"
            t.init_params = list(d.init_params)
        else:
            launched = set(d.launched) & kernels
            if launched:
                t.kind = "wrapper"
                t.kernels = sorted(launched)
                launches[d.name] = launched
            elif not (has_torch and d.uses_torch):
                continue  # plain Python: not something GEAK optimizes
        out.append(t)
    for t in out:
        if t.kind == "kernel":
            t.wrappers = [w for w, ks in launches.items() if t.name in ks]
    conventions = []
    if kinds.get("get_inputs") == "def":
        conventions.append("cases" if "INPUT_CASES" in kinds else "kernelbench")
    tests = [d for d in last_def.values() if d.name.startswith("test") and kinds.get(d.name) == "def"
             and not d.is_class]
    if tests:
        conventions.append("pytest" if any(d.has_args for d in tests) else "tritonbench")
    return DocumentTargets(targets=out, conventions=conventions, lines=lines, has_torch_import=has_torch)


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class TargetCache:
    """Targets per document: recomputed when the text changes, the last good result kept for
    texts that do not parse.

    ``get`` computes in the caller's thread. For large documents the server calls ``compute``
    in a worker thread (it only reads the cache) and ``store`` on its event loop."""

    def __init__(self):
        self._by_uri: dict[str, tuple[str, DocumentTargets]] = {}
        self._good: dict[str, DocumentTargets] = {}

    def cached(self, uri: str, key: str) -> Optional[DocumentTargets]:
        hit = self._by_uri.get(uri)
        return hit[1] if hit is not None and hit[0] == key else None

    def last(self, uri: str) -> Optional[DocumentTargets]:
        """The targets of the last text computed for the document, whatever it was."""
        hit = self._by_uri.get(uri)
        return hit[1] if hit is not None else None

    def compute(self, uri: str, text: str) -> DocumentTargets:
        try:
            return find_targets(text)
        except (SyntaxError, ValueError) as e:
            line = getattr(e, "lineno", None)
            msg = f"line {line}: {getattr(e, 'msg', str(e))}" if line else str(e)
            good = self._good.get(uri)
            return DocumentTargets(targets=list(good.targets) if good else [],
                                   conventions=list(good.conventions) if good else [],
                                   lines=text.splitlines(keepends=True), syntax_error=msg,
                                   stale_tree=good is not None,
                                   has_torch_import=good.has_torch_import if good else False)

    def store(self, uri: str, key: str, found: DocumentTargets) -> None:
        if found.syntax_error is None:
            self._good[uri] = found
        self._by_uri[uri] = (key, found)

    def get(self, uri: str, text: str, key: Optional[str] = None) -> DocumentTargets:
        key = key or text_key(text)
        hit = self.cached(uri, key)
        if hit is None:
            hit = self.compute(uri, text)
            self.store(uri, key, hit)
        return hit

    def forget(self, uri: str) -> None:
        self._by_uri.pop(uri, None)
        self._good.pop(uri, None)
