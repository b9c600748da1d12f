"""Program rewrites of a Triton kernel that cannot change what it computes: new search axes.

Standard library only. Each rewrite is one axis of the tuner's space whose values are labels;
the first is the kernel as written. Like every config, each value is verified by the
evaluator before it can be kept.

* ``eviction_policy`` on ``tl.load``: a cache hint, never a change of value. A load whose base
  pointer (the first kernel argument it reads) is loaded at more than one place in the kernel,
  or that feeds a ``tl.dot`` loop (tiles read by many programs), is *reused*: ``evict_last``
  keeps it in L2. Every other load is *streamed*: ``evict_first`` lets it leave first. Loads
  that already say ``eviction_policy`` or ``cache_modifier`` are left alone.
* ``input_precision`` on ``tl.dot``: only where a dot asks for exact fp32 products
  (``input_precision="ieee"`` or ``allow_tf32=False``; it changes nothing for fp16/bf16/fp8
  inputs), the faster ``tf32x3`` and ``tf32`` (NVIDIA; ``tf32`` on CDNA3 only). These *do*
  change the result a little: one is kept only if the evaluator's float32 tolerance accepts
  it on the target (under the CPU interpreter tf32 is computed as ieee, so only a GPU run can
  reject it).

* ``rows_per_program`` for kernels on a 1-D grid ``(E,)`` whose body reads
  ``tl.program_id(0)`` once, in a statement of its own: each program runs the body for R
  consecutive program indices in a loop, ``if first + r < E`` (E passed as a new argument), on
  a grid of ``cdiv(E, R)``. Every index runs the body exactly as its own program did, so the
  result is the same by construction, provided programs do not wait on each other (kernels with
  ``atomic_cas`` / ``atomic_xchg``, i.e. locks, are left alone) and the body has no ``return``.
  Fewer, longer programs pay the per-program cost (index math, the launch's tail) once per R
  rows: the win for many short rows. Not the 2-D block over rows (a different program: row
  offsets, a row mask on every load and store, reductions along one axis), which is the LLM
  strategy's.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from agent.tune.knobs import Span, source_span, end_of_arg

TF32_ARCHS_ROCM = ("gfx942", "gfx950")
"""AMD archs whose ``tl.dot`` takes ``input_precision="tf32"`` (CDNA3 and later)."""


@dataclass
class Rewrite:
    name: str
    """The axis name, as configs and reports show it."""
    original: str
    """The label of the kernel as written."""
    options: dict[str, tuple[dict[Span, str], dict[tuple[int, int], str]]] = field(default_factory=dict)
    """label -> (span edits, inserts) in the file's text; the original's entry is empty."""

    @property
    def values(self) -> list[str]:
        return list(self.options)


ROWS_PER_PROGRAM = (2, 4, 8)
"""The values of ``rows_per_program`` tried besides the kernel as written (one)."""
ROWS_ARG, ROWS_N_ARG = "ROWS_PER_PROGRAM", "GEAK_ROWS_N"


def rows_rewrite(text: str, kdef: ast.FunctionDef, site) -> Rewrite | None:
    """``rows_per_program`` for this launch of ``kdef`` (``knobs.LaunchSite``), or None where
    the pattern is not there (see the module's docstring). Made of inserts and one small edit
    only, so that it composes with the other rewrites and the knobs' edits."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    if (site.grid_span is None or site.grid_is_lambda or site.insert_at is None
            or text.count(f"{kdef.name}[") != 1 or kdef.args.vararg or kdef.args.kwarg or kdef.args.kwonlyargs
            or kdef.args.defaults or not kdef.args.args or len(kdef.decorator_list) != 1
            or not re.search(r"^import triton\b", text, re.M)):
        return None
    pids = [n for n in ast.walk(kdef) if _is_tl_call(n, "program_id")]
    if len(pids) != 1 or any(_is_tl_call(n, "num_programs") for n in ast.walk(kdef)):
        return None
    pid = pids[0]
    axis = pid.args[0] if pid.args else next((k.value for k in pid.keywords if k.arg == "axis"), None)
    if not (isinstance(axis, ast.Constant) and axis.value == 0):
        return None
    if any(isinstance(n, ast.Name) and n.id.startswith("_geak_") for n in ast.walk(kdef)):
        return None  # the names the rewrite adds are taken
    if any(isinstance(n, ast.Return) for n in ast.walk(kdef)) or \
            any(_is_tl_call(n, "atomic_cas") or _is_tl_call(n, "atomic_xchg") for n in ast.walk(kdef)):
        return None
    top = next((st for st in kdef.body if any(n is pid for n in ast.walk(st))), None)
    if not isinstance(top, (ast.Assign, ast.AnnAssign)):
        return None
    rest = kdef.body[kdef.body.index(top):]
    first, last = top.lineno, rest[-1].end_lineno
    if any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.end_lineno > n.lineno
           for st in rest for n in ast.walk(st)):
        return None  # a multi-line string would change if indented
    grid = next((n for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List)) and source_span(n) == site.grid_span), None)
    if grid is None or len(grid.elts) != 1 or isinstance(grid.elts[0], ast.Constant):
        return None
    e = grid.elts[0]
    es = source_span(e)
    knob_vars = {k.var for k in site.knobs if k.var} | {x.var for x in site.exprs if x.var}
    inside = lambda s: (s[0], s[1]) >= es[:2] and (s[2], s[3]) <= es[2:]  # noqa: E731
    if any(inside(sp) for k in site.knobs for sp in k.spans) or any(inside(x.span) for x in site.exprs) or \
            any(isinstance(n, ast.Name) and n.id in knob_vars for n in ast.walk(e)):
        return None  # the grid follows a tuned block: E would differ between configs
    e_text = ast.get_source_segment(text, e)
    ind = lines[first - 1][:top.col_offset]
    if e_text is None or ind.strip():  # the statement must begin its line
        return None
    tl_name = "tl" if re.search(r"^import triton\.language as tl\b|^from triton import language as tl\b", text, re.M) \
        else "triton.language"
    last_arg = kdef.args.args[-1]
    sig_end = (last_arg.end_lineno, last_arg.end_col_offset)
    # Names the body rebinds that held a value before it (``X += row * stride`` on a pointer
    # parameter): each index must start from that value, as its own program did.
    before = {a.arg for a in kdef.args.args} | {n for st in kdef.body[:kdef.body.index(top)] for n in _bound(st)}
    carried = sorted({n for st in rest for n in _bound(st)} & before)
    rw = Rewrite("rows_per_program", "as written", {"as written": ({}, {})})
    for r in ROWS_PER_PROGRAM:
        head = ("".join(f"{ind}_geak_saved_{n} = {n}\n" for n in carried)
                + f"{ind}_geak_first = {tl_name}.program_id(0) * {ROWS_ARG}\n"
                f"{ind}for _geak_r in range(0, {ROWS_ARG}):\n"
                f"{ind}    if _geak_first + _geak_r < {ROWS_N_ARG}:\n"
                + "".join(f"{ind}        {n} = _geak_saved_{n}\n" for n in carried))
        inserts = {(first, 0): head + "        ",
                   sig_end: f", {ROWS_N_ARG}, {ROWS_ARG}: {tl_name}.constexpr",
                   es[:2]: "triton.cdiv(", es[2:]: f", {r})",
                   site.insert_at: f", {ROWS_N_ARG}=({e_text}), {ROWS_ARG}={r}"}
        for ln in range(first + 1, last + 1):
            if lines[ln - 1].strip():
                inserts[(ln, 0)] = "        "
        rw.options[f"{r} per program"] = ({source_span(pid): "(_geak_first + _geak_r)"}, inserts)
    return rw


def _bound(stmt: ast.AST) -> set[str]:
    """Names a statement (and what it holds) assigns."""
    targets: list[ast.AST] = []
    for n in ast.walk(stmt):
        if isinstance(n, ast.Assign):
            targets += n.targets
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets.append(n.target)
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            targets.append(n.optional_vars)
    return {x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name)}


def kernel_rewrites(text: str, kdef: ast.FunctionDef, backend: str, arch: str) -> list[Rewrite]:
    """The rewrites that apply to this kernel on this backend (none where the pattern is absent)."""
    return [rw for rw in (eviction_rewrite(text, kdef), precision_rewrite(kdef, backend, arch)) if rw is not None]


def _is_tl_call(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id in ("tl", "triton.language"))


def _end_of_args(text: str, call: ast.Call) -> tuple[int, int]:
    last = max([*call.args, *(kw.value for kw in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
    return end_of_arg(text, last, call)


def _base(load: ast.Call, params: list[str]) -> str:
    """The kernel argument a load's pointer is computed from (its first one), else the pointer text."""
    if not load.args:
        return ""
    names = [n.id for n in ast.walk(load.args[0]) if isinstance(n, ast.Name) and n.id in params]
    return names[0] if names else ast.unparse(load.args[0])


def eviction_rewrite(text: str, kdef: ast.FunctionDef) -> Rewrite | None:
    params = [a.arg for a in kdef.args.args]
    in_dot_loop: set[int] = set()
    for loop in (n for n in ast.walk(kdef) if isinstance(n, (ast.For, ast.While))):
        if any(_is_tl_call(n, "dot") for n in ast.walk(loop)):
            in_dot_loop |= {id(n) for n in ast.walk(loop) if _is_tl_call(n, "load")}
    loads = [n for n in ast.walk(kdef) if _is_tl_call(n, "load") and n.args]
    count: dict[str, int] = {}
    for n in loads:
        count[_base(n, params)] = count.get(_base(n, params), 0) + 1
    free = [n for n in loads if not {kw.arg for kw in n.keywords} & {"eviction_policy", "cache_modifier"}]
    reused = [n for n in free if count[_base(n, params)] > 1 or id(n) in in_dot_loop]
    streamed = [n for n in free if n not in reused]

    def hint(nodes, policy):
        return {_end_of_args(text, n): f', eviction_policy="{policy}"' for n in nodes}

    rw = Rewrite("eviction_policy", "as written", {"as written": ({}, {})})
    if streamed:
        rw.options["streamed: evict_first"] = ({}, hint(streamed, "evict_first"))
    if reused:
        rw.options["reused: evict_last"] = ({}, hint(reused, "evict_last"))
    return rw if len(rw.options) > 1 else None


def precision_rewrite(kdef: ast.FunctionDef, backend: str, arch: str) -> Rewrite | None:
    exact = []
    for n in ast.walk(kdef):
        if not _is_tl_call(n, "dot"):
            continue
        for kw in n.keywords:
            v = kw.value
            if (kw.arg == "input_precision" and isinstance(v, ast.Constant) and v.value == "ieee") or \
                    (kw.arg == "allow_tf32" and isinstance(v, ast.Constant) and v.value is False):
                exact.append(kw)
    if not exact:
        return None
    if backend == "cuda":
        choices = ["tf32x3", "tf32"]
    elif arch in TF32_ARCHS_ROCM:
        choices = ["tf32"]
    else:
        return None
    rw = Rewrite("input_precision", "as written", {"as written": ({}, {})})
    for c in choices:
        rw.options[c] = ({source_span(kw): f'input_precision="{c}"' for kw in exact}, {})
    return rw
