"""The compiled view over a folder of tasks: does every kernel get a listing mapped to its source?

    PYTHONPATH=<checkout> python scripts/asm_sweep.py DIR [--format auto|...] [--arch sm_90 --arch gfx942]
                                 [--pattern GLOB] [--json OUT] [--device interpreter]

For every task file of DIR (any format ``geak bench`` reads), the target is run once on its
first input case (recording its launches) and each launched kernel is compiled ahead of time
for each ``--arch`` with the default stage's listing (SASS for NVIDIA, AMDGCN for AMD), as the
editor's compiled view and ``geak asm`` do. Then, per kernel that was launched, every source line
of its body holding a ``tl.load`` / ``tl.store`` / ``tl.dot`` call must map to at least one
instruction of the matching kind (the rule of ``tests/test_asm.py``: a load to a global,
scalar-unit or asynchronous copy; a store to a global store; a dot to tensor-core, warpgroup or
FMA instructions). Lines in a branch of an ``if`` on the kernel's constexprs that the launch
does not take are counted apart (Triton compiles only the branch taken). A call written over several lines counts as mapped when any line of its
statement is (the compiler gives a ``tl.load(`` the line its mask is on), as the editor's view
takes the cursor on any of those lines. Lines that map to nothing are listed (a load the
compiler proves unused, or merged with its neighbour's, or a branch on a constexpr written in a
form this script does not evaluate).

Prints one line per task and arch and a summary; ``--json`` writes every row.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

RULE = {"load": {"global_load", "uniform_load", "async_copy"}, "store": {"global_store"},
        "dot": {"tensor_core", "fma", "warpgroup"}}


def definitions(text: str, names: set[str]) -> list[ast.FunctionDef]:
    """The functions of that name a module ends up with: the last ``def`` of each name at the
    top level wins, as at import (some files define a kernel twice)."""
    last: dict[str, ast.FunctionDef] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            last[node.name] = node
    return list(last.values())


def op_lines(text: str, kernels: set[str]) -> dict[int, set[str]]:
    """Lines holding a ``tl.load`` / ``tl.store`` / ``tl.dot`` call inside the named functions."""
    out: dict[int, set[str]] = {}
    for fn in definitions(text, kernels):
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RULE
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl"):
                out.setdefault(node.lineno, set()).add(node.func.attr)
    return out


def _value(node: ast.AST, consts: dict[str, object]):
    """A condition on constexprs, evaluated (``NAME``, ``not NAME``, ``NAME == 3``, ``and``/``or``);
    raises KeyError/ValueError when it is not one."""
    if isinstance(node, ast.Name):
        return consts[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _value(node.operand, consts)
    if isinstance(node, ast.BoolOp):
        vals = [_value(v, consts) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _value(node.left, consts), _value(node.comparators[0], consts)
        ops = {ast.Eq: a == b, ast.NotEq: a != b} if not isinstance(node.ops[0], (ast.Lt, ast.Gt, ast.LtE, ast.GtE)) \
            else {ast.Lt: a < b, ast.Gt: a > b, ast.LtE: a <= b, ast.GtE: a >= b}
        return ops[type(node.ops[0])]
    raise ValueError("not a constexpr condition")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def dead_lines(text: str, kernel: str, consts: dict[str, str]) -> set[int]:
    """Lines of ``kernel`` in a branch of an ``if`` on its constexprs that this launch does not
    take (Triton compiles only the branch taken)."""
    values = {k: _literal(v) for k, v in consts.items()}
    out: set[int] = set()
    for fn in definitions(text, {kernel}):
        for node in ast.walk(fn):
            if not isinstance(node, ast.If):
                continue
            try:
                taken = bool(_value(node.test, values))
            except (KeyError, ValueError, TypeError):
                continue
            for stmt in (node.orelse if taken else node.body):
                out.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return out


def check(res, files: dict[str, str]) -> dict:
    """One task's compile for one arch: kernels, listings, and the op lines without instructions."""
    from agent import asm
    first_of = {rel: asm.statement_of(asm.statement_spans(text)) for rel, text in files.items() if rel.endswith(".py")}
    launches = [k for k in res.resources if k.variant is None]
    row = {"kernels": sorted({k.kernel for k in launches}), "configs": len(launches),
           "not_compiled": [f"{k.kernel}: {k.error[:120]}" for k in launches if k.error],
           "no_listing": sorted({k.kernel for k in launches if not k.error and not k.listing})}
    kinds: dict[tuple[str, int], set[str]] = {}
    for k in launches:
        if k.error or not k.listing:
            continue
        for line in asm.kernel_doc(k, files)["lines"]:
            if line["file"] in files and line["line"]:
                start = first_of.get(line["file"], {}).get(line["line"], line["line"])
                kinds.setdefault((line["file"], start), set()).update(
                    x for x in asm.KINDS if asm.count(line["summary"], x))
    names = {k.kernel for k in launches if not k.error and k.listing}
    dead: dict[tuple[str, str], set[int]] = {}  # (file, kernel) -> lines dead at every launch of it
    for k in launches:
        if k.error or not k.listing:
            continue
        for rel, text in files.items():
            if rel.endswith(".py") and f"def {k.kernel}(" in text:
                try:
                    d = dead_lines(text, k.kernel, k.constexprs)
                except SyntaxError:
                    continue
                key = (rel, k.kernel)
                dead[key] = d if key not in dead else dead[key] & d
    skipped = {(rel, n) for (rel, _), lines in dead.items() for n in lines}
    ops, missing, not_taken = 0, [], 0
    for rel, text in files.items():
        if not rel.endswith(".py"):
            continue
        try:
            found = op_lines(text, names)
        except SyntaxError:
            continue
        for n, want in found.items():
            if (rel, n) in skipped:
                not_taken += len(want)
                continue
            for op in want:
                ops += 1
                if not RULE[op] & kinds.get((rel, first_of[rel].get(n, n)), set()):
                    src = text.splitlines()[n - 1].strip()
                    missing.append(f"{rel}:{n} tl.{op}: {src[:90]}")
    row.update(op_lines=ops, mapped=ops - len(missing), unmapped=missing, in_branches_not_taken=not_taken)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--format", default="auto")
    ap.add_argument("--pattern")
    ap.add_argument("--arch", action="append", dest="archs")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--device", default="interpreter")
    args = ap.parse_args(argv)
    archs = args.archs or ["sm_90", "gfx942"]
    from agent.bench.tasks import SuiteError, load_suite
    from runner.serve.local import LocalRunner
    from runner.schema import EvalOptions
    try:
        tasks, _ = load_suite(Path(args.dir), args.format, args.pattern)
    except SuiteError as e:
        print(f"asm_sweep: {e}", file=sys.stderr)
        return 2
    rows = []
    t0 = time.monotonic()
    with LocalRunner(workers=args.workers, device=args.device) as runner:
        for task in tasks:
            for arch in archs:
                row = {"task": task.name, "arch": arch}
                rows.append(row)
                if task.error:
                    row["status"] = f"not a task here: {task.error[:160]}"
                    continue
                req = task.request(EvalOptions(trials=1, timing=False, aot_arch=arch, aot_stage="default", cases=[0]))
                t1 = time.monotonic()
                res = runner.evaluate(req)
                row["seconds"] = round(time.monotonic() - t1, 1)
                row["status"] = res.status
                if not res.ran:
                    row["why"] = res.message[:200]
                else:
                    row.update(check(res, req.files))
                print(f"{task.name:40s} {arch:7s} {row['status']:14s} kernels {len(row.get('kernels', [])):2d} "
                      f"op lines {row.get('mapped', 0)}/{row.get('op_lines', 0)}"
                      + (f"  unmapped: {'; '.join(row['unmapped'])[:200]}" if row.get("unmapped") else "")
                      + (f"  not compiled: {row['not_compiled'][0]}" if row.get("not_compiled") else ""),
                      file=sys.stderr, flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    summary = {}
    for arch in archs:
        mine = [r for r in rows if r["arch"] == arch]
        ran = [r for r in mine if "kernels" in r]
        listed = [r for r in ran if r["kernels"] and not r["not_compiled"] and not r["no_listing"]]
        summary[arch] = {"tasks": len(mine), "ran": len(ran), "launched_a_kernel": sum(1 for r in ran if r["kernels"]),
                         "every_kernel_listed": len(listed),
                         "op_lines": sum(r["op_lines"] for r in ran), "op_lines_mapped": sum(r["mapped"] for r in ran),
                         "tasks_fully_mapped": sum(1 for r in listed if not r["unmapped"])}
        s = summary[arch]
        print(f"{arch}: {s['ran']} of {s['tasks']} ran; {s['launched_a_kernel']} launched a kernel, "
              f"{s['every_kernel_listed']} with every kernel compiled and listed; tl.load/store/dot lines mapped "
              f"{s['op_lines_mapped']} of {s['op_lines']} ({s['tasks_fully_mapped']} tasks with all mapped)",
              file=sys.stderr)
    summary["seconds"] = round(time.monotonic() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
