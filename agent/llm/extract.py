"""Code out of a model's answer, as real models write it.

Handles: one fenced block (```python, ```py, ``` or ~~~), several blocks (the one that defines
the target symbol wins; pieces that only together define it are joined), a last fence left open
(the answer was cut at max tokens), an answer that is a JSON object (``{"code": ...}``), an
answer that is bare Python, and drafts inside ``<think>...</think>`` (left out). What is not code is kept as the answer's reasoning (``notes``),
which the optimizer shows next to the candidate's measurements.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from dataclasses import dataclass
from typing import Optional

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+.-]*)[^\n]*\n", re.M)
PY_LANGS = {"", "python", "py", "python3", "triton", "py3"}
THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S)
JSON_KEYS = ("code", "source", "python", "kernel", "candidate", "file")


class NoCode(Exception):
    """The answer holds no usable candidate; the message says why, for the next prompt."""


@dataclass
class Extracted:
    source: str
    notes: str
    how: str
    """fenced | joined | unterminated | json | bare"""


@dataclass
class _Block:
    lang: str
    code: str
    start: int
    end: int
    closed: bool


def _blocks(text: str) -> list[_Block]:
    out: list[_Block] = []
    pos = 0
    while True:
        m = FENCE.search(text, pos)
        if not m:
            return out
        fence, indent = m.group("fence"), m.group("indent")
        close = re.compile(r"^" + re.escape(indent) + re.escape(fence[0]) + "{" + str(len(fence)) +
                           r",}[ \t]*$", re.M)
        c = close.search(text, m.end())
        if c:
            code, end, closed = text[m.end():c.start()], c.end(), True
        else:
            code, end, closed = text[m.end():], len(text), False
        if indent:
            code = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in code.split("\n"))
        out.append(_Block(m.group("lang").lower(), code, m.start(), end, closed))
        pos = end


def _defines(code: str, symbol: str) -> Optional[bool]:
    """True/False if the code parses; None if it does not."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == symbol:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == symbol for t in node.targets):
            return True
    return False


def _names(code: str) -> tuple[set[str], set[str]]:
    """(top-level names the code defines or imports, names it reads)."""
    tree = ast.parse(code)
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                defined.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return defined, used


def _with_helpers(chosen: _Block, blocks: list[_Block]) -> Optional[str]:
    """The chosen block joined with the other blocks that define names it uses but lacks (a
    kernel in one block, its wrapper in another); None when it stands alone."""
    defined, used = _names(chosen.code)
    missing = used - defined - set(dir(builtins))
    parts = []
    for b in blocks:
        if b is chosen:
            parts.append(b)
            continue
        try:
            bdef, _ = _names(b.code)
        except SyntaxError:
            continue
        if bdef & missing:
            parts.append(b)
    if len(parts) == 1:
        return None
    joined = "\n\n".join(b.code.strip("\n") for b in parts) + "\n"
    try:
        ast.parse(joined)
    except SyntaxError:
        return None
    return joined


def _mentions(code: str, symbol: str) -> bool:
    return re.search(r"^\s*(def|class)\s+" + re.escape(symbol) + r"\b", code, re.M) is not None


def _from_json(text: str) -> Optional[tuple[str, str]]:
    s = text.strip()
    if s.startswith("```"):
        bl = _blocks(s)
        if len(bl) == 1 and bl[0].lang == "json":
            s = bl[0].code.strip()
    if not s.startswith("{"):
        return None
    try:
        doc = json.loads(s)
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    for k in JSON_KEYS:
        if isinstance(doc.get(k), str) and doc[k].strip():
            notes = " ".join(str(v) for kk, v in doc.items() if kk != k and isinstance(v, str))
            return doc[k], notes
    return None


def _prose(text: str, blocks: list[_Block]) -> str:
    parts, pos = [], 0
    for b in blocks:
        parts.append(text[pos:b.start])
        pos = b.end
    parts.append(text[pos:])
    return re.sub(r"\n{3,}", "\n\n", "".join(parts)).strip()


def extract(text: str, symbol: str) -> Extracted:
    """The candidate module in ``text`` that defines ``symbol``. Raises NoCode."""
    if not text or not text.strip():
        raise NoCode("the answer was empty")
    # Reasoning models served through OpenAI-compatible servers put their drafts in <think>.
    text = THINK.sub("", text)
    if not text.strip():
        raise NoCode("the answer held only reasoning (<think>...</think>), no code")
    js = _from_json(text)
    if js is not None:
        code, notes = js
        if "```" in code or "~~~" in code:  # code inside JSON, itself fenced
            inner = extract(code, symbol)
            return Extracted(inner.source, notes, "json")
        return Extracted(code.strip("\n") + "\n", notes, "json")
    blocks = [b for b in _blocks(text) if b.lang in PY_LANGS and b.code.strip()]
    if not blocks:
        if _defines(text, symbol):
            return Extracted(text.strip("\n") + "\n", "", "bare")
        if _mentions(text, symbol):
            raise NoCode(f"the answer has no ```python block, and its text is not valid Python "
                         f"(it mentions def {symbol})")
        raise NoCode("the answer holds no ```python code block")
    notes = _prose(text, _blocks(text))
    defining = [b for b in blocks if _defines(b.code, symbol)]
    if defining:
        b = defining[-1]  # a later block is the model's corrected version
        joined = _with_helpers(b, blocks)
        if joined is not None:
            return Extracted(joined, notes, "joined")
        return Extracted(b.code.strip("\n") + "\n", notes, "fenced" if b.closed else "unterminated")
    joined = "\n\n".join(b.code.strip("\n") for b in blocks) + "\n"
    if len(blocks) > 1 and _defines(joined, symbol):
        return Extracted(joined, notes, "joined")
    # A block that names the symbol but does not parse: hand it on so the evaluator reports the
    # syntax error with its line (the reflector shows it to the model).
    broken = [b for b in blocks if _mentions(b.code, symbol)]
    if broken:
        b = broken[-1]
        return Extracted(b.code.strip("\n") + "\n", notes, "fenced" if b.closed else "unterminated")
    raise NoCode(f"no code block defines `{symbol}` (the function the evaluator calls)")
