"""Find the launch knobs of a Triton wrapper, and rewrite them.

Standard library only. A knob is a value at a launch site ``kernel[grid](..., BLOCK=128,
num_warps=4)`` that the tuner may change: a keyword argument for a ``tl.constexpr`` parameter
of the kernel, ``num_warps`` or ``num_stages``. Its value must be an integer literal, either
written at the launch or bound once to a name in the wrapper (``BLOCK = 128``); computed values
(``triton.next_power_of_2(n)``) stay as they are. Integer literals in the launch's grid that
equal a block knob's value are tied to it (``grid = (triton.cdiv(n, 256),)`` with
``BLOCK=256``), so that the grid still covers the data when the block changes; every config
is verified by the evaluator anyway.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

from runner.source import is_triton_kernel, top_level_names

Span = tuple[int, int, int, int]  # lineno, col, end_lineno, end_col (ast conventions)
LAUNCH_OPTIONS = ("num_warps", "num_stages")


@dataclass
class Knob:
    name: str
    value: int
    kind: str  # constexpr | num_warps | num_stages
    spans: list[Span] = field(default_factory=list)
    """Where the value is written (and the grid literals tied to it)."""
    var: Optional[str] = None
    """The wrapper's name for the value, when it is bound once (``BLOCK = 128``)."""
    kw_span: Optional[Span] = None
    """The keyword at the launch with the comma before it (removed when autotune decides)."""


@dataclass
class LaunchSite:
    kernel: str
    line: int
    knobs: list[Knob]
    insert_at: Optional[tuple[int, int]] = None
    """Where ``, num_warps=..`` can be added when the launch does not set it (before ')')."""
    has_loop: bool = False
    """The kernel loops (num_stages pipelines loops only)."""
    notes: list[str] = field(default_factory=list)
    grid_span: Optional[Span] = None
    """The grid expression (at the launch, or where the wrapper binds the grid's name)."""
    grid_is_lambda: bool = False
    grid_names: set = field(default_factory=set)
    """Wrapper names the grid expression reads."""
    kernel_line: int = 0
    """First line of the kernel's definition, decorators included."""
    params: list = field(default_factory=list)
    """The kernel's parameters: (name, is_constexpr)."""
    keywords: set = field(default_factory=set)
    """Every keyword the launch passes (knobs or not: a computed ``num_warps=nw`` too)."""


def _span(node: ast.AST) -> Span:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _int_literal(node: ast.AST) -> Optional[int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _constexpr_params(kernel: ast.FunctionDef) -> set[str]:
    return {a.arg for a in kernel.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def find_launch_sites(text: str, wrapper: str) -> list[LaunchSite]:
    tree = ast.parse(text)
    names = top_level_names(tree)
    fn = names.get(wrapper)
    if not isinstance(fn, ast.FunctionDef):
        return []
    kernels = {n: d for n, d in names.items() if is_triton_kernel(d)}
    # Names bound exactly once in the wrapper to an int literal.
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).extend([node.value, node.value])
    grid_vars = {n: v[0] for n, v in bound.items() if len(v) == 1}

    sites = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels):
            continue
        kname = node.func.value.id
        kdef = kernels[kname]
        consts = _constexpr_params(kdef)
        site = LaunchSite(kernel=kname, line=node.lineno, knobs=[],
                          has_loop=any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(kdef)))
        grid = node.func.slice
        if isinstance(grid, ast.Name) and grid.id in grid_vars:
            grid = grid_vars[grid.id]  # grid = (...) bound earlier in the wrapper
        site.grid_span, site.grid_is_lambda = _span(grid), isinstance(grid, ast.Lambda)
        site.grid_names = {n.id for n in ast.walk(grid) if isinstance(n, ast.Name)}
        site.kernel_line = min([kdef.lineno] + [d.lineno for d in kdef.decorator_list])
        site.params = [(a.arg, a.arg in consts) for a in kdef.args.args]
        site.keywords = {kw.arg for kw in node.keywords if kw.arg}
        grid_literals = [n for n in ast.walk(grid) if _int_literal(n) is not None]
        previous_end = {}  # keyword -> end of the argument before it
        for j, kw in enumerate(node.keywords):
            before = node.keywords[j - 1].value if j else (node.args[-1] if node.args else None)
            if before is not None:
                previous_end[id(kw)] = (before.end_lineno, before.end_col_offset)
        for kw in node.keywords:
            if kw.arg is None or not (kw.arg in consts or kw.arg in LAUNCH_OPTIONS):
                continue
            kind = kw.arg if kw.arg in LAUNCH_OPTIONS else "constexpr"
            value_node = kw.value
            lit = _int_literal(value_node)
            var = None
            if lit is None and isinstance(value_node, ast.Name) and len(bound.get(value_node.id, [])) == 1:
                var = value_node.id
                value_node = bound[value_node.id][0]
                lit = _int_literal(value_node)
            if lit is None:
                site.notes.append(f"{kw.arg} is computed ({ast.unparse(kw.value)}), left as it is")
                continue
            knob = Knob(name=kw.arg, value=lit, kind=kind, spans=[_span(value_node)], var=var)
            if id(kw) in previous_end:
                knob.kw_span = (*previous_end[id(kw)], kw.end_lineno, kw.end_col_offset)
            if kind == "constexpr":
                for g in grid_literals:
                    if g.value == lit and lit > 1:
                        knob.spans.append(_span(g))
            site.knobs.append(knob)
        last = node.args[-1] if node.args and not node.keywords else (node.keywords[-1].value if node.keywords else None)
        if last is not None:
            site.insert_at = (last.end_lineno, last.end_col_offset)
        sites.append(site)
    return sites


def apply(text: str, edits: dict[Span, str], inserts: Optional[dict[tuple[int, int], str]] = None) -> str:
    """Replace spans (and insert text at positions), back to front so offsets stay valid."""
    lines = text.splitlines(keepends=True)
    off = lambda line, col: _offset(lines, line, col)  # noqa: E731
    ops = [(off(s[0], s[1]), off(s[2], s[3]), new) for s, new in edits.items()]
    ops += [(off(*pos), off(*pos), new) for pos, new in (inserts or {}).items()]
    for a, b, new in sorted(ops, key=lambda o: o[0], reverse=True):
        text = text[:a] + new + text[b:]
    return text


def render_config(text: str, site: LaunchSite, config: dict[str, int]) -> str:
    """The source with ``config`` (knob name -> value) written into the launch site."""
    edits: dict[Span, str] = {}
    inserts: dict[tuple[int, int], str] = {}
    present = {k.name for k in site.knobs}
    for k in site.knobs:
        if k.name in config and config[k.name] != k.value:
            for s in k.spans:
                edits[s] = str(config[k.name])
    extra = [f"{name}={config[name]}" for name in LAUNCH_OPTIONS if name in config and name not in present]
    if extra and site.insert_at:
        inserts[site.insert_at] = "".join(f", {e}" for e in extra)
    return apply(text, edits, inserts)


# --------------------------------------------------------------------------- @triton.autotune


@dataclass
class AutotuneConfigs:
    """The literal ``configs=[triton.Config({...}, num_warps=.., num_stages=..), ...]`` of a kernel."""

    kernel: str
    span: Span
    config_call: str  # how the file spells it: "triton.Config"
    configs: list[dict[str, int]]


def find_autotune(text: str, kernel: str) -> tuple[Optional[AutotuneConfigs], Optional[str]]:
    """(configs, None), or (None, why not) when the kernel's autotune configs are not literal."""
    tree = ast.parse(text)
    node = top_level_names(tree).get(kernel)
    if not isinstance(node, ast.FunctionDef):
        return None, None
    for dec in node.decorator_list:
        if not (isinstance(dec, ast.Call) and ast.unparse(dec.func).split(".")[-1] == "autotune"):
            continue
        arg = next((kw.value for kw in dec.keywords if kw.arg == "configs"), dec.args[0] if dec.args else None)
        if not isinstance(arg, ast.List):
            return None, f"{kernel}'s autotune configs are computed ({ast.unparse(arg)[:60]}), not tuned here"
        configs, call_name = [], "triton.Config"
        for c in arg.elts:
            if not (isinstance(c, ast.Call) and c.args and isinstance(c.args[0], ast.Dict)):
                return None, f"{kernel}: an autotune config is not a literal triton.Config({{...}})"
            call_name = ast.unparse(c.func)
            cfg: dict[str, int] = {}
            for k, v in zip(c.args[0].keys, c.args[0].values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)) or _int_literal(v) is None:
                    return None, f"{kernel}: autotune config {ast.unparse(c)[:60]} has a non-literal value"
                cfg[k.value] = _int_literal(v)
            for kw in c.keywords:
                if kw.arg in LAUNCH_OPTIONS and _int_literal(kw.value) is not None:
                    cfg[kw.arg] = _int_literal(kw.value)
            configs.append(cfg)
        return AutotuneConfigs(kernel, _span(arg), call_name, configs), None
    return None, None


def render_autotune(text: str, at: AutotuneConfigs, config) -> str:
    """The source with the kernel's autotune list replaced by the single ``config`` (one config
    means no benchmarking at launch, so the candidate runs exactly this setting), or by a list
    of configs."""
    configs = config if isinstance(config, list) else [config]
    items = []
    for c in configs:
        meta = ", ".join(f"{k!r}: {v}" for k, v in c.items() if k not in LAUNCH_OPTIONS)
        opts = "".join(f", {k}={c[k]}" for k in LAUNCH_OPTIONS if k in c)
        items.append(f"{at.config_call}({{{meta}}}{opts})")
    return apply(text, {at.span: "[" + ", ".join(items) + "]"})


def render_autotune_launch(text: str, site: LaunchSite, configs: list[dict[str, int]],
                           key: list[str], triton_name: str = "triton") -> str:
    """The source with the kernel decorated by ``@triton.autotune(configs, key)`` and the tuned
    knobs taken out of the launch, so that Triton picks among ``configs`` per value of ``key``
    (the shape arguments). A grid that reads a tuned block size becomes ``lambda META: ...``.
    Raises ``ValueError`` when the launch cannot be rewritten that way."""
    tuned = sorted({name for c in configs for name in c})
    by_name = {k.name: k for k in site.knobs}
    for name in tuned:
        if name in by_name and by_name[name].kw_span is None:
            raise ValueError(f"{name} is the launch's first argument; cannot take it out")
    if site.grid_span is None:
        raise ValueError("the launch's grid was not found")
    edits: dict[Span, str] = {}
    grid_text = _slice(text, site.grid_span)
    if not site.grid_is_lambda:
        # The grid's literals tied to a block knob, and the wrapper's names for it, read META.
        tree = ast.parse(grid_text, mode="eval")
        local: dict[Span, str] = {}
        for name in tuned:
            k = by_name.get(name)
            if k is None or k.kind != "constexpr":
                continue
            for n in ast.walk(tree):
                if (_int_literal(n) == k.value and k.value > 1 and any(_same_literal(site.grid_span, s, n) for s in k.spans)) \
                        or (isinstance(n, ast.Name) and k.var and n.id == k.var):
                    local[_span(n)] = f"META[{name!r}]"
        if local:
            edits[site.grid_span] = f"lambda META: {apply(grid_text, local)}"
    for name in tuned:
        k = by_name.get(name)
        if k is not None:
            edits[k.kw_span] = ""
    meta_names = [n for n in tuned if n not in LAUNCH_OPTIONS]
    rows = []
    for c in configs:
        meta = ", ".join(f"{n!r}: {c[n]}" for n in meta_names if n in c)
        opts = "".join(f", {n}={c[n]}" for n in LAUNCH_OPTIONS if n in c)
        rows.append(f"        {triton_name}.Config({{{meta}}}{opts}),\n")
    deco = (f"@{triton_name}.autotune(\n    configs=[\n" + "".join(rows) + "    ],\n"
            f"    key={key!r},\n)\n")
    return apply(text, edits, {(site.kernel_line, 0): deco})


def _slice(text: str, span: Span) -> str:
    lines = text.splitlines(keepends=True)
    a = _offset(lines, span[0], span[1])
    b = _offset(lines, span[2], span[3])
    return "".join(lines)[a:b]


def _offset(lines: list[str], line: int, col: int) -> int:
    """Character offset in the text of an ast position (its col offsets are UTF-8 bytes)."""
    return sum(len(ln) for ln in lines[:line - 1]) + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8", "replace"))


def _same_literal(grid: Span, knob_span: Span, node: ast.AST) -> bool:
    """Whether ``node`` (parsed from the grid's text alone) is the literal at ``knob_span``."""
    line = grid[0] + node.lineno - 1
    col = node.col_offset + (grid[1] if node.lineno == 1 else 0)
    return (line, col) == knob_span[:2]
