"""Reduced copies of KernelBench problems, small enough for the CPU interpreter.

    python scripts/kernelbench_reduce.py SRC_DIR OUT_DIR [--limit 65536]

The rule: the module-level integer constants that set sizes (every ``NAME = <int>`` at the top
level, except those naming a kernel, stride, padding, dilation, groups or pool size, which set
the computation's shape rather than its size) are halved, the largest first and equal ones together (so that a size that equals another in the
original still does), until the tensors
``get_inputs()`` returns hold at most ``--limit`` elements (the interpreter's
``interpreter_max_elements``); none is halved below 4. The inputs are counted on PyTorch's meta
device, so nothing is allocated. Each copy keeps its file name and says what was changed in a
comment at its top; the problems are MIT-licensed (KernelBench, Stanford Scaling Intelligence Lab).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

KEEP = re.compile(r"kernel|stride|pad|dilation|group|pool|dim$|^dim|axis", re.I)
FLOOR = 4


def _int_sites(tree: ast.Module) -> list[tuple[list[str], ast.Constant]]:
    """Each top-level integer literal assigned to names: ``a = b = 8``, ``h, w = 128, 64``."""
    out = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if names:
                out.append((names, node.value))
        elif isinstance(node.value, ast.Tuple) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple):
            for t, v in zip(node.targets[0].elts, node.value.elts):
                if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and type(v.value) is int:
                    out.append(([t.id], v))
    return out


def size_constants(tree: ast.Module) -> dict[str, int]:
    out = {}
    for names, const in _int_sites(tree):
        for n in names:
            if not KEEP.search(n) and const.value > FLOOR:
                out[n] = const.value
    return out


def with_values(text: str, values: dict[str, int]) -> str:
    lines = text.splitlines()
    sites = sorted(_int_sites(ast.parse(text)), key=lambda s: (s[1].lineno, s[1].col_offset), reverse=True)
    for names, const in sites:  # right to left, so that earlier columns stay where they were
        n = next((n for n in names if n in values), None)
        if n is None:
            continue
        row = const.lineno - 1
        lines[row] = lines[row][:const.col_offset] + str(values[n]) + lines[row][const.end_col_offset:]
    return "\n".join(lines) + "\n"


def input_elements(text: str) -> int:
    import torch
    ns: dict = {"__name__": "kb_reduced"}
    with torch.device("meta"):
        exec(compile(text, "problem.py", "exec"), ns)
        got = ns["get_inputs"]()
    return sum(t.numel() for t in got if isinstance(t, torch.Tensor))


def reduce(text: str, limit: int) -> tuple[str, dict[str, tuple[int, int]]]:
    values = size_constants(ast.parse(text))
    start = dict(values)
    current = text
    while input_elements(current) > limit:
        big = [n for n, v in values.items() if v // 2 >= FLOOR]
        if not big:
            raise ValueError("cannot be reduced under the limit by halving its size constants")
        top = max(values[k] for k in big)
        for m in [k for k in big if values[k] == top]:  # equal sizes stay equal (a norm's width = a channel count)
            values[m] = top // 2
        current = with_values(text, values)
    changed = {n: (start[n], values[n]) for n in values if values[n] != start[n]}
    return current, changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--limit", type=int, default=1 << 16)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pyproject.toml").write_text("[project]\nname = 'kernelbench-reduced'\n")
    done = failed = 0
    for f in sorted(Path(args.src).glob("*.py")):
        text = f.read_text()
        try:
            small, changed = reduce(text, args.limit)
        except Exception as e:  # noqa: BLE001  a problem the rule cannot reduce is listed, not copied
            print(f"{f.name}: not reduced: {type(e).__name__}: {str(e)[:200]}")
            failed += 1
            continue
        head = ("# Reduced for the CPU interpreter by scripts/kernelbench_reduce.py from KernelBench "
                f"(MIT): {', '.join(f'{n} {a} -> {b}' for n, (a, b) in sorted(changed.items())) or 'unchanged'}\n")
        (out / f.name).write_text(head + small)
        done += 1
    print(f"{done} reduced, {failed} not")
    return 0


if __name__ == "__main__":
    sys.exit(main())
