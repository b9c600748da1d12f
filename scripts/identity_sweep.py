"""The identity sweep: the same computation must get the same verdict under any name.

    PYTHONPATH=<checkout> python scripts/identity_sweep.py DIR [--format auto|...] [--json OUT]
                                   [--pattern GLOB] [--workers 2] [--device auto|interpreter]

For every task file of DIR (any format ``geak bench`` reads), the original is checked against
itself first; where that self-check passes, two candidates are judged against the original:

* ``copy``: the task's text, byte for byte, in a file of another name (``dup_<name>.py``);
* ``renamed``: the same file with every Triton kernel and every helper the test does not call
  renamed (``<name>_v2``) and the movable functions (plain or ``@triton.jit`` decorators, no
  defaults that name module-level values) put in the reverse order.

Each must be judged correct. Prints one line per task and a summary; exit code 1 when any
candidate of a task whose self-check passed is not correct, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

SEPARATOR = "#" * 146
KEEP = {"get_inputs", "get_init_inputs", "Model", "ModelNew"}


def _is_kernel(node: ast.AST) -> bool:
    for d in getattr(node, "decorator_list", []):
        text = ast.unparse(d)
        if "jit" in text or "autotune" in text or "heuristics" in text:
            return True
    return False


def _movable(node: ast.AST, used_at_import: set[str]) -> bool:
    """A function whose definition can move: nothing evaluated when the module is imported
    names it (decorators, defaults, annotations, module-level statements), and its own
    definition evaluates nothing but ``triton.jit`` and constants."""
    if not isinstance(node, ast.FunctionDef) or node.name in used_at_import:
        return False
    for d in node.decorator_list:
        if ast.unparse(d) not in ("triton.jit", "jit", "tl.jit"):
            return False
    defaults = list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
    annotated = node.returns is not None or any(
        a.annotation is not None for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs)
    return all(isinstance(d, ast.Constant) for d in defaults) and not annotated


def _used_at_import(tree: ast.Module) -> set[str]:
    """Names evaluated when the module is imported: in decorators, defaults and annotations of
    its functions and classes, and in its other statements."""
    out: set[str] = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts = list(n.decorator_list) + list(n.args.defaults) + [d for d in n.args.kw_defaults if d]
            parts += [a.annotation for a in n.args.args + n.args.kwonlyargs + n.args.posonlyargs if a.annotation]
            parts += [n.returns] if n.returns is not None else []
            for p in parts:
                out |= _names(p)
        else:
            out |= _names(n)  # a class body runs at import, and so does every other statement
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Rename(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]):
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.mapping:
            node.id = self.mapping[node.id]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        node.name = self.mapping.get(node.name, node.name)
        return node


def renamed(text: str, symbol: str) -> tuple[str, dict[str, str]]:
    """The task's text with its kernels and uncalled helpers renamed and its movable functions
    reversed; and the renames."""
    code, test = text, ""
    if SEPARATOR in text:
        i = text.index(SEPARATOR)
        code, test = text[:i], text[i + len(SEPARATOR):]
    tree = ast.parse(code)
    used_by_test = _names(ast.parse(test)) if test.strip() else set()
    top = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    mapping = {}
    for n in top:
        if n.name == symbol or n.name in KEEP or n.name.startswith("test") or n.name in used_by_test:
            continue
        if isinstance(n, ast.FunctionDef):  # classes keep their names: an object's class is compared
            mapping[n.name] = f"{n.name}_v2"
    tree = _Rename(mapping).visit(tree)
    at_import = _used_at_import(tree)
    slots = [i for i, n in enumerate(tree.body) if _movable(n, at_import)]
    moved = [tree.body[i] for i in slots][::-1]
    for i, n in zip(slots, moved):
        tree.body[i] = n
    out = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    if SEPARATOR in text:
        out += SEPARATOR + test
    return out, mapping


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--format", default="auto")
    ap.add_argument("--pattern")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--trials", type=int, default=1)
    args = ap.parse_args(argv)
    from agent.bench.tasks import SuiteError, load_suite
    from runner.serve.local import LocalRunner
    from runner.schema import EvalOptions, Target
    try:
        tasks, _ = load_suite(Path(args.dir), args.format, args.pattern)
    except SuiteError as e:
        print(f"identity_sweep: {e}", file=sys.stderr)
        return 2
    rows, failed = [], 0
    t0 = time.monotonic()
    with LocalRunner(workers=args.workers, device=args.device) as runner:
        for task in tasks:
            row = {"task": task.name, "format": task.format}
            if task.error:
                row["self_check"] = f"not a task here: {task.error}"
                rows.append(row)
                print(f"{task.name:40s} -", file=sys.stderr)
                continue
            opts = EvalOptions(trials=args.trials)
            base = runner.evaluate(task.request(opts))
            row["self_check"] = base.status
            if base.status != "ok":
                row["why"] = base.message[:200]
                rows.append(row)
                print(f"{task.name:40s} self-check {base.status}: nothing to compare", file=sys.stderr)
                continue
            stem = Path(task.rel).name
            parent = str(Path(task.rel).parent)
            for kind in ("copy", "renamed"):
                text = task.text
                if kind == "renamed":
                    try:
                        text, mapping = renamed(task.text, task.symbol)
                    except SyntaxError as e:
                        row[kind] = f"could not be rewritten: {e}"
                        continue
                    row["renames"] = len(mapping)
                crel = (f"{parent}/" if parent != "." else "") + f"dup_{kind}_{stem}"
                req = task.request(opts)
                req.candidate = Target(crel, task.symbol)
                req.candidate_files = {crel: text}
                r = runner.evaluate(req)
                row[kind] = r.status if r.correct else f"{r.status}: {r.message[:160]}"
                if r.error is not None and r.error.kind == "original_fails_here":
                    row[kind] = "original cannot run here"  # its own test fails on this device: no verdict
                elif r.error is not None and r.error.kind == "original_varies":
                    row[kind] = "original has no one right answer"  # it gave other results this time: no verdict
                elif not r.correct:
                    failed += 1
            rows.append(row)
            print(f"{task.name:40s} copy {row.get('copy', '-')[:60]:20s} renamed {row.get('renamed', '-')[:60]}",
                  file=sys.stderr)
            if args.json:  # as it goes: a long sweep stopped halfway keeps what it found
                Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    checked = [r for r in rows if r.get("self_check") == "ok"
               and r.get("copy") not in ("original cannot run here", "original has no one right answer")]
    summary = {"tasks": len(rows), "self_check_ok": len(checked),
               "copy_correct": sum(1 for r in checked if r.get("copy") == "ok"),
               "renamed_correct": sum(1 for r in checked if r.get("renamed") == "ok"),
               "seconds": round(time.monotonic() - t0, 1)}
    print(f"identity sweep of {args.dir}: {summary['self_check_ok']} of {summary['tasks']} pass their self-check; "
          f"copies correct {summary['copy_correct']}, renamed correct {summary['renamed_correct']} "
          f"({summary['seconds']} s)", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
