"""What unit of code an evaluation compares (standard library only; both sides of the runner).

* ``symbol``: the named function, ``nn.Module`` class or ``torch.autograd.Function``; input
  cases come from ``get_inputs`` / ``INPUT_CASES``, or from the arguments of the calls a
  ``test_*`` function makes to it. Each case is one call: outputs, the inputs' state after it,
  and gradients when the inputs require them.
* ``tests``: TritonBench-G and GEAK-ROCm task files: the kernels and wrappers above a line of
  exactly 146 ``#``, the tests below it. A candidate replaces the whole top part, so the unit is
  everything the tests reach there: each test runs on both sides under the same seed, and its
  returned results and every call it makes into the top part (outputs and the arguments' state
  after the call) are compared.

``auto`` picks ``tests`` for a file in that format and ``symbol`` otherwise.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

SEPARATOR = "#" * 146
_SEP_RE = re.compile(r"^#{146}\s*$", re.M)
UNITS = ("auto", "symbol", "tests")


def separator_line(text: str) -> Optional[int]:
    """1-based line of the 146-``#`` separator, or None."""
    m = _SEP_RE.search(text)
    if not m:
        return None
    return text.count("\n", 0, m.start()) + 1


def test_functions_below(text: str) -> list[str]:
    """Names of the ``test*`` functions defined below the separator."""
    line = separator_line(text)
    if line is None:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
            and n.lineno > line]


def _calls_in(node: ast.AST) -> set[str]:
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def without_test_calls(text: str) -> str:
    """The file with the module-level statements below the separator that run its tests at
    import (TritonBench-G's ``result_gold = test_xxx()``) blanked out, line numbers kept: the
    runner calls the tests itself, under its own seeds."""
    line = separator_line(text)
    if line is None:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    lines = text.splitlines(keepends=True)
    dropped: set[str] = set()  # names bound by dropped statements: what reads them goes too
    changed = False
    for n in tree.body:
        if n.lineno <= line or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                  ast.Import, ast.ImportFrom)):
            continue
        read = {x.id for x in ast.walk(n) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load)}
        if _calls_in(n) & tests or read & dropped:
            dropped |= {x.id for x in ast.walk(n) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
            for i in range(n.lineno - 1, n.end_lineno):
                lines[i] = "\n"
            changed = True
    return "".join(lines) if changed else text


def resolve(unit: str, text: str) -> str:
    if unit in ("symbol", "tests"):
        return unit
    return "tests" if test_functions_below(text) else "symbol"
