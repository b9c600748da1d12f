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

Not done: several rows per program for row-wise kernels. It needs the kernel's indexing
rewritten into a 2-D block (row offsets, a row mask on every load and store, reductions along
one axis), which is a different program, not a rewrite that is right by construction; the LLM
strategy is the place for it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .knobs import Span, _span

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


def kernel_rewrites(kdef: ast.FunctionDef, backend: str, arch: str) -> list[Rewrite]:
    """The rewrites that apply to this kernel on this backend (none where the pattern is absent)."""
    return [rw for rw in (eviction_rewrite(kdef), precision_rewrite(kdef, backend, arch)) if rw is not None]


def _is_tl_call(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id in ("tl", "triton.language"))


def _end_of_args(call: ast.Call) -> tuple[int, int]:
    last = max([*call.args, *(kw.value for kw in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
    return (last.end_lineno, last.end_col_offset)


def _base(load: ast.Call, params: list[str]) -> str:
    """The kernel argument a load's pointer is computed from (its first one), else the pointer text."""
    if not load.args:
        return ""
    names = [n.id for n in ast.walk(load.args[0]) if isinstance(n, ast.Name) and n.id in params]
    return names[0] if names else ast.unparse(load.args[0])


def eviction_rewrite(kdef: ast.FunctionDef) -> Rewrite | None:
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
        return {_end_of_args(n): f', eviction_policy="{policy}"' for n in nodes}

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
        rw.options[c] = ({_span(kw): f'input_precision="{c}"' for kw in exact}, {})
    return rw
