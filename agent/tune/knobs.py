"""Find the launch knobs of a Triton wrapper, and rewrite them.

Standard library only. A knob is a value at a launch site ``kernel[grid](..., BLOCK=128,
num_warps=4)`` that the tuner may change: a keyword argument for a ``tl.constexpr`` parameter
of the kernel, ``num_warps``, ``num_stages`` or ``num_ctas``. The launches are those the target
reaches (``launch_scopes``): its own body, the top-level functions it calls, and the classes
it uses (``X.apply`` of a ``torch.autograd.Function``, an ``nn.Module``: all their methods),
two levels deep.

*Literal* knobs are integers written at the launch or bound once to a name in the function
(``BLOCK = 128``). Integer literals in the launch's grid that equal a block knob's value are
tied to it (``grid = (triton.cdiv(n, 256),)`` with ``BLOCK=256``), so that the grid still
covers the data when the block changes.

*Computed* knobs (``ExprKnob``) are block sizes whose value is an expression
(``triton.next_power_of_2(n)``, ``min(1024, ...)``, a name bound once to one, a
``@triton.heuristics`` lambda) and computed ``num_warps`` / ``num_stages``. They are searched as
other expressions written in the same place: the expression doubled, halved (at least 16),
a power-of-two cap or floor inside its ``min``/``max`` doubled or halved; warps and stages
scaled. Why this form rather than a table of literal values per measured shape or an
``@triton.autotune`` over literal blocks: the expression *is* the shape dependence the author
wrote (a row kernel's block that must cover the row), and a scaled expression keeps it for
every shape, measured or not; a scale that breaks it (a halved row block) breaks it on every
shape, so the evaluator rejects it. A literal table would be right only for the shapes
measured, and autotune benchmarks configs without checking their results, so it would pick a
block that truncates a row for a shape nobody verified. Where the name is bound in several
places or comes from a parameter, the launch's keyword is rewritten instead (the grid may then
not follow; the evaluator decides). Every config is verified by the evaluator anyway.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from runner.aot import TUNED_LAUNCH_OPTIONS as LAUNCH_OPTIONS  # the compile module's list
from runner.source import is_triton_kernel, top_level_names

Span = tuple[int, int, int, int]  # lineno, col, end_lineno, end_col (ast conventions)
BLOCK_LIKE = re.compile(r"(?i)block|tile|^B[A-Z]$")
"""Names of constexprs that size a block (``BLOCK_SIZE``, ``TILE_N``, ``BT``, ``BK``): the ones
whose computed value is worth scaling; flags, dtypes and problem sizes are not."""


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
    followers: list = field(default_factory=list)
    """Other keywords the launch passes the same name for (``BLOCK_M=BLOCK, BLOCK_N=BLOCK``):
    (keyword, its ``kw_span``). Their value is this knob's; one name, one value."""


@dataclass
class ExprKnob:
    """A knob whose value is computed: ``BLOCK = triton.next_power_of_2(n)``, ``num_warps=nw``,
    or a ``@triton.heuristics`` lambda. The search writes other expressions in its place:
    ``values`` for a block (the expression scaled, or a literal cap inside it moved), literal
    values for ``num_warps`` / ``num_stages`` (which never change what a kernel computes)."""

    name: str
    kind: str  # constexpr | heuristic | num_warps | num_stages
    text: str
    """The expression as written: the value of the original config."""
    span: Span
    """Where it is written: the single binding of the wrapper's name for it, the launch's
    keyword, or the heuristic lambda's body."""
    values: list = field(default_factory=list)
    var: Optional[str] = None


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
    exprs: list[ExprKnob] = field(default_factory=list)
    """Computed knobs (``knobs`` holds the literal ones)."""
    scope: str = ""
    """Where the launch is: the wrapper, a helper it calls, ``Fn.forward`` of a class it uses."""
    rewrites: list = field(default_factory=list)
    """The kernel's program rewrites (``rewrites.Rewrite``), set by the tuner for its arch."""
    splat: bool = False
    """The launch passes ``**options``: nothing is added to it (it could name an option twice)."""
    extra_axes: dict = field(default_factory=dict)
    """Launch options the arch allows beyond warps and stages (``num_ctas`` on sm_90+)."""

    def followers(self) -> dict[str, list[str]]:
        """Each knob passed under more keywords -> those keywords (``Knob.followers``)."""
        return {k.name: [f for f, _ in k.followers] for k in self.knobs if k.followers}

    def axes_original(self) -> dict:
        """What the original runs with on the non-literal axes: computed knobs as written,
        rewrites as written, extra options at Triton's default."""
        out: dict = {ek.name: ek.text for ek in self.exprs}
        out.update({rw.name: rw.original for rw in self.rewrites})
        out.update({name: values[0] for name, values in self.extra_axes.items()})
        return out


def source_span(node: ast.AST) -> Span:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _int_literal(node: ast.AST) -> Optional[int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _constexpr_params(kernel: ast.FunctionDef) -> set[str]:
    return {a.arg for a in kernel.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def find_launch_sites(text: str, wrapper: str) -> list[LaunchSite]:
    """The launches of kernels of this file that ``wrapper`` reaches (``launch_scopes``), in
    the order found: the wrapper's own first."""
    tree = ast.parse(text)
    names = top_level_names(tree)
    if wrapper not in names or not isinstance(names[wrapper], (ast.FunctionDef, ast.ClassDef)):
        return []
    kernels = {n: d for n, d in names.items() if is_triton_kernel(d)}
    sites = []
    for label, fn in launch_scopes(names, wrapper):
        bound = _bindings(fn)
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels):
                site = _launch_site(text, node, kernels[node.func.value.id], bound)
                site.scope = label
                sites.append(site)
    return sites


def launch_scopes(names: dict[str, ast.AST], wrapper: str, depth: int = 2) -> list[tuple[str, ast.FunctionDef]]:
    """``(label, function)`` for the wrapper and what it reaches, up to ``depth`` levels: the
    top-level functions it calls or names, the classes it names (``X.apply(...)`` of a
    ``torch.autograd.Function``, ``X(...)`` of an ``nn.Module``) with all their methods
    (``forward``, ``backward``, ...). Kernels are not scopes."""
    out: list[tuple[str, ast.FunctionDef]] = []
    seen: set[str] = set()

    def visit(name: str, level: int) -> None:
        node = names.get(name)
        if name in seen or not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or is_triton_kernel(node):
            return
        seen.add(name)
        fns = [(name, node)] if isinstance(node, ast.FunctionDef) else [
            (f"{name}.{m.name}", m) for m in node.body if isinstance(m, ast.FunctionDef)]
        out.extend(fns)
        if level < depth:
            for _, fn in fns:
                for used in _names_read(fn):
                    visit(used, level + 1)

    visit(wrapper, 0)
    return out


def _names_read(fn: ast.AST) -> list[str]:
    out: list[str] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in out:
            out.append(n.id)
    return out


def _bindings(fn: ast.FunctionDef) -> dict[str, list[ast.AST]]:
    """Each name assigned in ``fn`` -> the values assigned to it (an augmented or annotated
    assignment counts twice: the name is not bound once)."""
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(node.value)
                elif isinstance(t, (ast.Tuple, ast.List)):  # a, b = ...: bound, but not to one value
                    for e in t.elts:
                        if isinstance(e, ast.Name):
                            bound.setdefault(e.id, []).extend([node.value, node.value])
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).extend([node.value, node.value])
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).extend([node.iter, node.iter])
    for a in fn.args.args + fn.args.kwonlyargs:
        bound.setdefault(a.arg, []).extend([a, a])  # a parameter: its value comes from the caller
    return bound


def _launch_site(text: str, node: ast.Call, kdef: ast.FunctionDef, bound: dict[str, list[ast.AST]]) -> LaunchSite:
    consts = _constexpr_params(kdef)
    grid_vars = {n: v[0] for n, v in bound.items() if len(v) == 1}
    site = LaunchSite(kernel=kdef.name, line=node.lineno, knobs=[],
                      has_loop=any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(kdef)))
    grid = node.func.slice
    if isinstance(grid, ast.Name) and grid.id in grid_vars:
        grid = grid_vars[grid.id]  # grid = (...) bound earlier in the wrapper
    site.grid_span, site.grid_is_lambda = source_span(grid), isinstance(grid, ast.Lambda)
    site.grid_names = {n.id for n in ast.walk(grid) if isinstance(n, ast.Name)}
    site.kernel_line = min([kdef.lineno] + [d.lineno for d in kdef.decorator_list])
    site.params = [(a.arg, a.arg in consts) for a in kdef.args.args]
    site.keywords = {kw.arg for kw in node.keywords if kw.arg}
    site.splat = any(kw.arg is None for kw in node.keywords)
    grid_literals = [n for n in ast.walk(grid) if _int_literal(n) is not None]
    previous_end = {}  # keyword -> end of the argument before it
    for j, kw in enumerate(node.keywords):
        before = node.keywords[j - 1].value if j else (node.args[-1] if node.args else None)
        if before is not None:
            previous_end[id(kw)] = end_of_arg(text, before, node)
    for kw in node.keywords:
        if kw.arg is None or not (kw.arg in consts or kw.arg in LAUNCH_OPTIONS):
            continue
        kind = kw.arg if kw.arg in LAUNCH_OPTIONS else "constexpr"
        value_node, var = kw.value, None
        lit = _int_literal(value_node)
        if lit is None and isinstance(value_node, ast.Name) and len(bound.get(value_node.id, [])) == 1:
            var, value_node = value_node.id, bound[value_node.id][0]
            lit = _int_literal(value_node)
        if lit is None and kind == "constexpr" and _extent(kw.value, bound):
            site.notes.append(f"{kw.arg} is the tensor extent {ast.unparse(kw.value)} as it is, which the kernel "
                              "covers exactly (a block around it would be rounded up to a power of two): left as it is")
            continue
        if lit is None:
            ek = computed_knob(text, kw.arg, kind, value_node if var else kw.value, var)
            same = next((e for e in site.exprs if ek is not None and e.span == ek.span), None)
            if same is not None:
                site.notes.append(f"{kw.arg} is computed by the same expression as {same.name}, and follows it")
            elif ek is not None:
                site.exprs.append(ek)
            else:
                site.notes.append(f"{kw.arg} is computed ({ast.unparse(kw.value)}), left as it is")
            continue
        knob = Knob(name=kw.arg, value=lit, kind=kind, spans=[source_span(value_node)], var=var)
        if id(kw) in previous_end:
            knob.kw_span = (*previous_end[id(kw)], kw.end_lineno, kw.end_col_offset)
        leader = next((k for k in site.knobs if var and k.var == var and k.spans[:1] == knob.spans[:1]), None)
        if leader is not None:  # one name for two keywords: one value, searched once, named by the first
            leader.followers.append((kw.arg, knob.kw_span))
            site.notes.append(f"{kw.arg} is passed the same name ({var}) as {leader.name}, and follows it")
            continue
        if kind == "constexpr":
            knob.spans += [source_span(g) for g in grid_literals if g.value == lit and lit > 1]
        site.knobs.append(knob)
    last = node.args[-1] if node.args and not node.keywords else (node.keywords[-1].value if node.keywords else None)
    if last is not None:
        site.insert_at = end_of_arg(text, last, node)
    site.exprs += heuristic_knobs(text, kdef, {ek.name for ek in site.exprs} | {k.name for k in site.knobs})
    return site


def _is_extent_read(node: ast.AST) -> bool:
    """``x.shape[i]``, ``x.shape``, ``x.size(i)``: a tensor's extent, read as it is."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size"


def _extent(node: ast.AST, bound: dict[str, list[ast.AST]]) -> bool:
    """``node`` is a tensor's extent as it is: read there, or a name every binding of which reads
    one (``Lq, Lk, Lv = q.shape[-1], k.shape[-1], v.shape[-1]``; ``M, K = a.shape``). Rounded,
    capped or computed values (``next_power_of_2(n)``, ``min(...)``) are not."""
    if _is_extent_read(node):
        return True
    if not isinstance(node, ast.Name) or not bound.get(node.id):
        return False
    for v in bound[node.id]:
        if isinstance(v, ast.Tuple):
            if not v.elts or not all(_is_extent_read(e) for e in v.elts):
                return False
        elif not _is_extent_read(v):
            return False
    return True


def computed_knob(text: str, name: str, kind: str, node: ast.AST, var: Optional[str]) -> Optional[ExprKnob]:
    """The computed knob at ``node`` (a launch keyword's value, or the single binding of the
    name it reads), or None where scaling it makes no sense (a flag, a dtype, a problem size)."""
    if isinstance(node, ast.arg) or (isinstance(node, ast.Constant) and not isinstance(node.value, int)):
        return None
    if kind == "constexpr" and not BLOCK_LIKE.search(name):
        return None
    if isinstance(node, (ast.Compare, ast.BoolOp, ast.Lambda)):
        return None
    src = _slice(text, source_span(node))
    ek = ExprKnob(name=name, kind=kind, text=src, span=source_span(node), var=var)
    e = src if isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) else f"({src})"
    if kind == "constexpr":
        ek.values = scaled(src)
    elif kind == "num_warps":  # per shape as before, with twice or half as many warps
        ek.values = [src, f"min(16, {e} * 2)", f"max(1, {e} // 2)"]
    elif kind == "num_stages":
        ek.values = [src, f"{e} + 1", f"max(1, {e} - 1)"]
    else:
        return None
    return ek


def scaled(src: str) -> list[str]:
    """The expression, then the same scaled: doubled, halved (at least 16), and each power-of-two
    cap or floor written inside a ``min(...)``/``max(...)`` in it doubled and halved. Each
    value is still computed from the shape, so the block keeps following it."""
    try:
        tree = ast.parse(f"({src})", mode="eval")
    except SyntaxError:
        return [src]
    e = src if isinstance(tree.body, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) else f"({src})"
    out = [src, f"{e} * 2", f"max(16, {e} // 2)"]
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("min", "max")):
            continue
        for arg in call.args:
            v = _int_literal(arg)
            if v is None or v < 2 or v & (v - 1):
                continue
            # The literal's place in ``src``: the parse saw one more character on the first line.
            span = (arg.lineno, arg.col_offset - (1 if arg.lineno == 1 else 0), arg.end_lineno,
                    arg.end_col_offset - (1 if arg.end_lineno == 1 else 0))
            out += [apply(src, {span: str(v * 2)}), apply(src, {span: str(v // 2)})]
    return list(dict.fromkeys(out))[:7]


def heuristic_knobs(text: str, kdef: ast.FunctionDef, taken: set[str]) -> list[ExprKnob]:
    """Block sizes that a ``@triton.heuristics({"BLOCK": lambda args: ...})`` of the kernel
    computes: the lambda's body is the expression."""
    out = []
    for dec in kdef.decorator_list:
        if not (isinstance(dec, ast.Call) and ast.unparse(dec.func).split(".")[-1] == "heuristics"
                and dec.args and isinstance(dec.args[0], ast.Dict)):
            continue
        for k, v in zip(dec.args[0].keys, dec.args[0].values):
            if (isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value not in taken
                    and BLOCK_LIKE.search(k.value) and isinstance(v, ast.Lambda)):
                src = _slice(text, source_span(v.body))
                out.append(ExprKnob(name=k.value, kind="heuristic", text=src, span=source_span(v.body), values=scaled(src)))
    return out


def apply(text: str, edits: dict[Span, str], inserts: Optional[dict[tuple[int, int], str]] = None) -> str:
    """Replace spans (and insert text at positions), back to front so offsets stay valid."""
    lines = text.splitlines(keepends=True)
    off = lambda line, col: _offset(lines, line, col)  # noqa: E731
    ops = [(off(s[0], s[1]), off(s[2], s[3]), new) for s, new in edits.items()]
    ops += [(off(*pos), off(*pos), new) for pos, new in (inserts or {}).items()]
    for a, b, new in sorted(ops, key=lambda o: o[0], reverse=True):
        text = text[:a] + new + text[b:]
    return text


def config_text(config: dict) -> str:
    """A config as people read it, knobs in name order: ``BLOCK=256, num_warps=4``."""
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))


def render_config(text: str, site: LaunchSite, config: dict) -> str:
    """The source with ``config`` (knob name -> value) written into the launch site: literal
    knobs, computed knobs (their expression replaced), the kernel's rewrites, added options."""
    edits: dict[Span, str] = {}
    inserts: dict[tuple[int, int], str] = {}
    present = {k.name for k in site.knobs} | {ek.name for ek in site.exprs}
    for k in site.knobs:
        if k.name in config and config[k.name] != k.value:
            for s in k.spans:
                edits[s] = str(config[k.name])
    for ek in site.exprs:
        if ek.name in config and config[ek.name] != ek.text:
            edits[ek.span] = str(config[ek.name])
    for rw in site.rewrites:
        if rw.name in config and config[rw.name] != rw.original:
            e, i = rw.options[config[rw.name]]
            edits.update(e)
            inserts.update(i)
    extra = [f"{name}={config[name]}" for name in LAUNCH_OPTIONS if name in config and name not in present
             and not (name == "num_ctas" and config[name] == 1)]
    if extra and site.insert_at:  # after a rewrite's own arguments there, if any
        inserts[site.insert_at] = inserts.get(site.insert_at, "") + "".join(f", {e}" for e in extra)
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
        return AutotuneConfigs(kernel, source_span(arg), call_name, configs), None
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


def updated_in_place(text: str, kernel: str) -> list[str]:
    """The kernel's pointer parameters whose memory a second run would find changed: those it
    stores to and also loads from, and those it updates atomically. ``@triton.autotune`` runs the
    kernel many times while it benchmarks, so those must be restored between runs
    (``restore_value``) or the call it returns computes on its own leftovers. A parameter
    counts when a pointer expression reads it or a local name computed from it."""
    kdef = next((n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if kdef is None:
        return []
    params = [a.arg for a in kdef.args.args]
    consts = _constexpr_params(kdef)
    origin: dict[str, set[str]] = {p: {p} for p in params if p not in consts}

    def sources(node: Optional[ast.AST]) -> set[str]:
        """The parameters a pointer expression is based on: the terms of a sum (not the factors
        of an offset, so strides and sizes are left out), a block pointer's base."""
        if isinstance(node, ast.Name):
            return origin.get(node.id, set())
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return sources(node.left) | sources(node.right)
        if isinstance(node, ast.IfExp):
            return sources(node.body) | sources(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("make_block_ptr", "advance", "make_tensor_descriptor"):
                return sources(node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg in ("base", "ptr")), None))
            if node.func.attr in ("to", "cast"):
                return sources(node.func.value)
        return set()

    for node in ast.walk(kdef):  # local names derived from pointer parameters, in source order
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    origin[t.id] = origin.get(t.id, set()) | sources(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            origin[node.target.id] = origin.get(node.target.id, set()) | sources(node.value)
    loaded: set[str] = set()
    stored: set[str] = set()
    atomic: set[str] = set()
    for node in ast.walk(kdef):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        op = node.func.attr
        ptr = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg in ("pointer", "ptr")), None)
        if op == "load":
            loaded |= sources(ptr)
        elif op == "store":
            stored |= sources(ptr)
        elif op.startswith("atomic_"):
            atomic |= sources(ptr)
    return [p for p in params if p in (stored & loaded) | atomic]


def render_autotune_launch(text: str, site: LaunchSite, configs: list[dict[str, int]],
                           key: list[str], triton_name: str = "triton") -> str:
    """The source with the kernel decorated by ``@triton.autotune(configs, key)`` and the tuned
    knobs taken out of the launch, so that Triton picks among ``configs`` per value of ``key``
    (the shape arguments). A grid that reads a tuned block size becomes ``lambda META: ...``.
    Raises ``ValueError`` when the launch cannot be rewritten that way."""
    by_name = {k.name: k for k in site.knobs}
    # Triton's Config always carries num_warps / num_stages / num_ctas, and the autotuner passes
    # them to the kernel: a launch that also passes one fails ("multiple values for keyword
    # argument"). Each such option leaves the launch, its literal value going into every config.
    configs = [dict(c) for c in configs]
    for name in LAUNCH_OPTIONS:
        if name not in site.keywords:
            continue
        k = by_name.get(name)
        if k is None:
            raise ValueError(f"the launch computes {name}, and an @triton.autotune config holds only "
                             "literal values")
        for c in configs:
            c.setdefault(name, k.value)
    for lead, names in site.followers().items():  # a follower is set with its leader, in every config
        for c in configs:
            if lead in c:
                c.update(dict.fromkeys(names, c[lead]))
    tuned = sorted({name for c in configs for name in c})
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
                    local[source_span(n)] = f"META[{name!r}]"
        if local:
            edits[site.grid_span] = f"lambda META: {apply(grid_text, local)}"
    for name in tuned:
        k = by_name.get(name)
        if k is not None:
            edits[k.kw_span] = ""
            for f, f_span in k.followers:
                if f_span is None:
                    raise ValueError(f"{f} is the launch's first argument; cannot take it out")
                edits[f_span] = ""
    meta_names = [n for n in tuned if n not in LAUNCH_OPTIONS]
    rows = []
    for c in configs:
        meta = ", ".join(f"{n!r}: {c[n]}" for n in meta_names if n in c)
        opts = "".join(f", {n}={c[n]}" for n in LAUNCH_OPTIONS if n in c)
        rows.append(f"        {triton_name}.Config({{{meta}}}{opts}),\n")
    restore = updated_in_place(text, site.kernel)
    deco = (f"@{triton_name}.autotune(\n    configs=[\n" + "".join(rows) + "    ],\n"
            f"    key={key!r},\n" + (f"    restore_value={restore!r},\n" if restore else "") + ")\n")
    return apply(text, edits, {(site.kernel_line, 0): deco})


def _slice(text: str, span: Span) -> str:
    lines = text.splitlines(keepends=True)
    a = _offset(lines, span[0], span[1])
    b = _offset(lines, span[2], span[3])
    return "".join(lines)[a:b]


def end_of_arg(text: str, arg: ast.AST, call: ast.Call) -> tuple[int, int]:
    """Where argument ``arg`` of ``call`` ends, as an ast position, past the parentheses that
    wrap it (``mask=(i < n)``: the node ends before its ``)``, and a keyword inserted there would
    land inside them, ``mask=(i < n, eviction_policy=...)``). What follows an argument, up to the
    next comma or the call's own closing parenthesis, is only such parentheses, spaces, line
    continuations and comments."""
    lines = text.splitlines(keepends=True)
    flat = "".join(lines)
    at = end = _offset(lines, arg.end_lineno, arg.end_col_offset)
    close = _offset(lines, call.end_lineno, call.end_col_offset) - 1  # the call's own ")"
    while at < close:
        c = flat[at]
        if c == "#":
            nl = flat.find("\n", at)
            at = close if nl < 0 else nl
        elif c.isspace() or c == "\\":
            at += 1
        elif c == ")":
            at += 1
            end = at
        else:
            break
    line = flat.count("\n", 0, end) + 1
    start = flat.rfind("\n", 0, end) + 1
    return line, len(flat[start:end].encode("utf-8"))


def _offset(lines: list[str], line: int, col: int) -> int:
    """Character offset in the text of an ast position (its col offsets are UTF-8 bytes)."""
    return sum(len(ln) for ln in lines[:line - 1]) + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8", "replace"))


def _same_literal(grid: Span, knob_span: Span, node: ast.AST) -> bool:
    """Whether ``node`` (parsed from the grid's text alone) is the literal at ``knob_span``."""
    line = grid[0] + node.lineno - 1
    col = node.col_offset + (grid[1] if node.lineno == 1 else 0)
    return (line, col) == knob_span[:2]
