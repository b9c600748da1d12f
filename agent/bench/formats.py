"""Benchmark task formats: tell them apart, and turn a task file into what the runner evaluates.

Four formats, each read from the user's own checkout (nothing is copied):

* ``geak`` — this project's own: a wrapper that launches Triton kernels, ``get_inputs()`` and
  usually ``INPUT_CASES``; optionally ``<wrapper>_reference`` (the PyTorch version it must match).
* ``tritonbench`` — TritonBench-G: the reference kernel and wrapper, a line of exactly 146 ``#``,
  then test code whose ``test_*()`` calls the wrapper and whose module level sets
  ``result_gold = test_xxx()``.
* ``rocm`` — GEAK's ROCm benchmark: the kernel (and wrapper) above the same ``#`` line, pytest
  ``test_*`` functions with ``@pytest.mark.parametrize`` (and the ``request`` fixture) below, which
  store their outputs in ``result_gold``; performance tests and the result-saving hooks import the
  original harness.
* ``kernelbench`` — ``class Model(nn.Module)``, ``get_inputs()``, ``get_init_inputs()``; a
  candidate defines ``ModelNew``.

Standard library only (``ast``): loading a suite imports no torch.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from runner.units import without_test_calls

FORMATS = ("geak", "tritonbench", "rocm", "kernelbench")
SEPARATOR = "#" * 146
_SEP_RE = re.compile(r"^#{146}\s*$", re.M)

# In the test part of GEAK's ROCm files: functions that time or save results through the
# original harness (which is not installed here), and the harness's own modules.
ROCM_HARNESS_TESTS = ("test_performance", "test_save_results", "test_save_performance_results")
ROCM_HARNESS_MODULES = ("tb_eval",)
REQUEST_STUB = "_geak_pytest_request"


class FormatError(Exception):
    """A task file that claims a format and does not fit it: the message names file and line."""

    def __init__(self, path: str, message: str, line: Optional[int] = None, hint: Optional[str] = None):
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.hint = path, line, hint


@dataclass
class Adapted:
    """A task file made ready for the runner."""

    format: str
    symbol: str
    """The callable the runner evaluates (the wrapper, or ``Model``)."""
    text: str
    """The file's text as the runner gets it (test harness lines removed where needed)."""
    reference: Optional[str] = None
    """A PyTorch version in the same file (geak format: ``<symbol>_reference``)."""
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- detection


def _parse(text: str, path: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as e:
        raise FormatError(path, f"syntax error: {e.msg}", e.lineno, "fix the syntax error") from None


def _defs(tree: ast.Module) -> dict[str, ast.AST]:
    out = {}
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out[n.name] = n
    return out


def _is_kernel(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    for d in node.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if ast.unparse(d).split(".")[-1] == "jit":
            return True
    return False


def _parametrized(fn: ast.FunctionDef) -> bool:
    return any("parametrize" in ast.unparse(d) for d in fn.decorator_list)


def split_separator(text: str) -> Optional[tuple[str, str, int]]:
    """(above, below, line number of the separator) or None when the file has no 146-# line."""
    m = _SEP_RE.search(text)
    if not m:
        return None
    line = text.count("\n", 0, m.start()) + 1
    return text[:m.start()], text[m.end():], line


def detect(text: str, path: str) -> Optional[str]:
    """The format of one file, or None when it is not a task in any of them."""
    tree = _parse(text, path)
    defs = _defs(tree)
    if isinstance(defs.get("Model"), ast.ClassDef) and "get_inputs" in defs and "get_init_inputs" in defs:
        return "kernelbench"
    tests = [d for n, d in defs.items() if n.startswith("test") and isinstance(d, ast.FunctionDef)]
    if split_separator(text) is not None:
        if any(_parametrized(t) for t in tests):
            return "rocm"
        if tests:
            return "tritonbench"
    if isinstance(defs.get("get_inputs"), ast.FunctionDef) and any(_is_kernel(d) for d in defs.values()):
        return "geak"
    return None


# --------------------------------------------------------------------------- helpers


def _calls(node: ast.AST) -> set[str]:
    """Names called as plain functions inside ``node``."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            out.add(n.func.id)
    return out


def _launches(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name):
            out.add(n.func.value.id)
    return out


def _names_used(node: ast.AST) -> set[str]:
    """Names read inside ``node`` (``X`` in ``X.apply(...)``, ``X(...)``, ``f(...)``)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _wrappers(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level functions and classes (not kernels, not tests) that launch a kernel of this
    file: directly, through a helper, or through a class (``torch.autograd.Function``,
    ``nn.Module``, methods) whose code launches one."""
    defs = _defs(tree)
    kernels = {n for n, d in defs.items() if _is_kernel(d)}
    units = {n: d for n, d in defs.items() if n not in kernels and not n.startswith("test")}
    launching = {n for n, d in units.items() if _launches(d) & kernels}
    changed = True
    while changed:  # a wrapper may reach a launch through a helper or a class
        changed = False
        for n, d in units.items():
            if n not in launching and (_names_used(d) - {n}) & launching:
                launching.add(n)
                changed = True
    return {n: units[n] for n in units if n in launching}


def _pick_wrapper(wrappers: dict[str, ast.AST], called: set[str], stem: str, path: str,
                  what: str, fallback: Optional[list[str]] = None) -> str:
    funcs = {n: d for n, d in wrappers.items() if isinstance(d, ast.FunctionDef)}
    names = [n for n in funcs if n in called] or [n for n in wrappers if n in called] or list(funcs) \
        or list(wrappers)
    if not names and fallback:
        return fallback[0]
    if not names:
        raise FormatError(path, f"no function here launches a Triton kernel {what}",
                          hint="write a Python wrapper that launches the kernel (kernel[grid](...)) "
                               "and call it from the test")
    if len(names) == 1:
        return names[0]
    if stem in names:
        return stem
    # The outermost one: not called by another candidate.
    outer = [n for n in names if not any(n in _calls(wrappers[o]) for o in names if o != n)]
    return outer[0] if len(outer) == 1 else sorted(names)[0]


# --------------------------------------------------------------------------- per format


def adapt(text: str, path: str, fmt: str, symbol: Optional[str] = None) -> Adapted:
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    if fmt == "geak":
        return _adapt_geak(text, path, stem, symbol)
    if fmt == "tritonbench":
        return _adapt_tritonbench(text, path, stem, symbol)
    if fmt == "rocm":
        return _adapt_rocm(text, path, stem, symbol)
    if fmt == "kernelbench":
        return _adapt_kernelbench(text, path, symbol)
    raise ValueError(f"unknown format {fmt}")


def _adapt_geak(text: str, path: str, stem: str, symbol: Optional[str]) -> Adapted:
    tree = _parse(text, path)
    defs = _defs(tree)
    if not isinstance(defs.get("get_inputs"), ast.FunctionDef):
        raise FormatError(path, "no get_inputs() function (the geak format's inputs)",
                          hint="add get_inputs() returning the wrapper's arguments, and INPUT_CASES "
                               "for several shapes")
    wrappers = _wrappers(tree)
    sym = symbol or _pick_wrapper(wrappers, set(), stem, path, "to evaluate")
    if sym not in defs:
        raise FormatError(path, f"no top-level function '{sym}'")
    ref = f"{sym}_reference"
    return Adapted("geak", sym, text, reference=ref if isinstance(defs.get(ref), ast.FunctionDef) else None)


def _test_part(text: str, path: str, fmt: str) -> tuple[str, str, int]:
    parts = split_separator(text)
    if parts is None:
        raise FormatError(path, f"no separator line of 146 '#' (the {fmt} format puts the kernel above "
                                "it and the tests below)",
                          hint="check the file is a TritonBench-G / GEAK ROCm task, or pass --format")
    return parts


def _adapt_tritonbench(text: str, path: str, stem: str, symbol: Optional[str]) -> Adapted:
    above, below, sep_line = _test_part(text, path, "tritonbench")
    top = _parse(above, path)
    bottom_tree = _parse(below, path)
    tests = [n for n in bottom_tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    if not tests:
        raise FormatError(path, "no test_*() function below the separator", sep_line,
                          hint="TritonBench-G tests are test_*() functions that call the wrapper")
    called = set().union(*(_calls(t) | _names_used(t) for t in tests))
    top_defs = [n for n in _defs(top) if n in called]
    # The runner compares everything the tests reach above the separator; the symbol names the
    # entry point (a wrapper when one is found) for reports and the tuner.
    sym = symbol or _pick_wrapper(_wrappers(top), called, stem, path, "above the separator",
                                  fallback=top_defs + [t.name for t in tests])
    new_text = without_test_calls(text)
    notes = ["module-level test calls below the separator left out (the runner calls the tests)"] \
        if new_text != text else []
    return Adapted("tritonbench", sym, new_text, notes=notes)


def _adapt_rocm(text: str, path: str, stem: str, symbol: Optional[str]) -> Adapted:
    above, below, sep_line = _test_part(text, path, "rocm")
    top = _parse(above, path)
    bottom_tree = _parse(below, path)
    tests = [n for n in bottom_tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
             and n.name not in ROCM_HARNESS_TESTS]
    if not tests:
        raise FormatError(path, "no correctness test_*() below the separator", sep_line)
    called = set().union(*(_calls(t) for t in tests))
    wrappers = _wrappers(top)
    if not (set(wrappers) & called):
        launched = sorted(set().union(*(_launches(t) for t in tests)))
        if launched:
            t = next(t for t in tests if _launches(t))
            raise FormatError(path, f"{t.name} launches {', '.join(launched)} directly; the runner "
                                    "evaluates a Python function", t.lineno + sep_line,
                              hint="add a wrapper function above the separator that launches the "
                                   "kernel, and call it from the test")
    sym = symbol or _pick_wrapper(wrappers, called, stem, path, "above the separator")
    # Edits, bottom to top so that positions stay valid: the harness's timing/saving tests and
    # imports go, and the pytest ``request`` fixture gets a stand-in default.
    lines = below.splitlines(keepends=True)
    edits: list[tuple[int, int, Optional[tuple[int, str]]]] = []  # (first, last line, insert)
    for n in bottom_tree.body:
        if isinstance(n, ast.FunctionDef) and n.name in ROCM_HARNESS_TESTS:
            first = min([d.lineno for d in n.decorator_list] + [n.lineno])
            edits.append((first, n.end_lineno, None))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ROCM_HARNESS_MODULES:
            edits.append((n.lineno, n.end_lineno, None))
        elif isinstance(n, ast.Import) and any(a.name.split(".")[0] in ROCM_HARNESS_MODULES for a in n.names):
            edits.append((n.lineno, n.end_lineno, None))
    inserts: list[tuple[int, int, str]] = []
    for t in tests:
        args = t.args.args
        n_default = len(t.args.defaults)
        # ``request`` is the last parameter, with no default, in these files.
        if args and args[-1].arg == "request" and n_default == 0:
            a = args[-1]
            inserts.append((a.end_lineno, a.end_col_offset, f"={REQUEST_STUB}()"))
    for line, col, s in sorted(inserts, reverse=True):
        ln = lines[line - 1]
        lines[line - 1] = ln[:col] + s + ln[col:]
    for a, b, _ in sorted(edits, reverse=True):
        del lines[a - 1:b]
    stub = (f"\n\nclass {REQUEST_STUB}:\n"
            "    \"\"\"Stands in for pytest's `request` fixture: tests use request.node.name as a key.\"\"\"\n"
            "    class node:\n"
            "        name = \"test\"\n\n")
    notes = []
    if edits:
        notes.append(f"{len(edits)} timing/saving part(s) of the original harness left out")
    new_text = above + SEPARATOR + "\n" + (stub if inserts else "") + "".join(lines)
    return Adapted("rocm", sym, new_text, notes=notes)


def _adapt_kernelbench(text: str, path: str, symbol: Optional[str]) -> Adapted:
    tree = _parse(text, path)
    defs = _defs(tree)
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if need not in defs:
            raise FormatError(path, f"no {need} (KernelBench tasks define class Model, get_inputs() "
                                    "and get_init_inputs())")
    return Adapted("kernelbench", symbol or "Model", text)


def candidate_text(fmt: str, task_text: str, cand_text: str) -> str:
    """A candidate file in the task's own format, made into the text the runner gets in place of
    the task file. TritonBench-G and ROCm candidates replace what is above the separator; the
    task's tests stay."""
    if fmt in ("tritonbench", "rocm"):
        parts = split_separator(cand_text)
        above = parts[0] if parts else cand_text
        task_parts = split_separator(task_text)
        below = task_parts[1] if task_parts else ""
        return above.rstrip("\n") + "\n\n" + SEPARATOR + below
    return cand_text
