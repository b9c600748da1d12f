"""Inductor's module made into a standalone Triton file (text in, text out; no torch here).

``runner.worker.inductor.generate`` returns the module Inductor wrote for a function (its Triton
kernels, each inside ``async_compile.triton(NAME, SOURCE)``, and ``call(args)``, the Python that
allocates buffers and launches them), where each input of ``call`` comes from, the Triton helper
functions the kernels use, and what the library calls are in ``torch``. ``write`` returns the
original file with:

* before the target, the kernels as plain ``@triton.jit`` functions (Inductor's autotuning
  decorator removed, ``triton_` and the kind taken off their names), each under a comment naming
  the PyTorch operations it fuses; the helpers they use, copied from PyTorch with their origin;
* the target's body (a function's, or an ``nn.Module``'s ``forward``) replaced by ``call``'s
  statements in plain Python: inputs read from the arguments (``self.conv.weight``,
  ``x.size(0)``), buffers from ``torch.empty_strided``, each kernel launched with its grid and
  block sizes written out (the tuner's knobs), library calls as ``torch`` calls.

Nothing of ``torch._inductor`` is imported by the file. What cannot be written that way raises
``CannotWrite`` with the reason in the user's terms.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from typing import Optional


class CannotWrite(Exception):
    """Inductor's code for this target cannot be made standalone; the message says why."""


# Block sizes written at each launch (the tuner searches from them): by Inductor's kind of
# kernel. A reduction takes XBLOCK rows per program and reduces R0_BLOCK elements of them at a time.
POINTWISE_1D = {"XBLOCK": 1024}
POINTWISE_2D = {"YBLOCK": 32, "XBLOCK": 32}
REDUCTION = {"XBLOCK": 8, "R0_BLOCK": 256}
PERSISTENT = {"XBLOCK": 8}
NUM_WARPS = 4
KINDS = {"pointwise", "reduction", "persistent_reduction"}
GRIDS = {"Grid1D": ("xnumel",), "Grid2D": ("xnumel", "ynumel")}
DROPPED_CALLS = {"assert_size_stride", "assert_alignment", "get_raw_stream"}


@dataclass
class Kernel:
    name: str
    """Its name in the file."""
    inductor_name: str
    kind: str
    """pointwise | reduction | persistent_reduction"""
    grid: str
    params: list[str]
    """Its runtime parameters, in order (constexprs last, in ``constexprs``)."""
    constexprs: list[str]
    fuses: str = ""
    """The PyTorch operations it computes ("mul, add, gelu, sum")."""
    source: str = ""


@dataclass
class Written:
    text: str
    """The whole new file."""
    kernels: list[Kernel] = field(default_factory=list)
    library: list[str] = field(default_factory=list)
    """The calls left to PyTorch's libraries ("torch.convolution")."""


def _readable(name: str) -> str:
    return re.sub(r"^triton_(poi|red|per|tem|for|sca|mix|spl)_", "", name)


def _literal_key(node: ast.AST, key: str):
    """``node`` is a dict display; the literal value under ``key`` (None if absent)."""
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and k.value == key:
                return ast.literal_eval(v)
    return None


def _fuses(code_lines: list[str], lineno: int) -> str:
    """The "Source Nodes" comment Inductor writes above a kernel's definition."""
    for i in range(lineno - 2, max(-1, lineno - 40), -1):
        m = re.match(r"# Topologically Sorted Source Nodes: \[(.*?)\], Original ATen: \[(.*?)\]", code_lines[i])
        if m:
            aten = ", ".join(a.replace("aten.", "") for a in m.group(2).split(", "))
            return aten
        if code_lines[i].startswith(("def ", "class ")) or " = async_compile." in code_lines[i]:
            break
    return ""


class _Rename(ast.NodeTransformer):
    """Helpers' names (``triton_helpers.max2`` → ``_max2``), ``tl_math``/``math`` → ``tl.math``,
    and ``libdevice.f`` → ``tl.math.f`` where ``tl.math`` has ``f`` (the same libdevice call on a
    GPU; the CPU interpreter runs ``tl.math`` but not ``libdevice``)."""

    def __init__(self, helpers: set[str], math_name: str, tl_math: frozenset = frozenset()):
        self.helpers, self.math_name, self.tl_math = helpers, math_name, tl_math

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name):
            if node.value.id == "triton_helpers":
                return ast.copy_location(ast.Name(id="_" + node.attr, ctx=node.ctx), node)
            if node.value.id == self.math_name or (node.value.id == "libdevice" and node.attr in self.tl_math):
                return ast.copy_location(ast.Attribute(value=ast.Attribute(value=ast.Name("tl", ast.Load()),
                                                                           attr="math", ctx=ast.Load()),
                                                       attr=node.attr, ctx=node.ctx), node)
        return node

    def visit_Name(self, node: ast.Name):
        if node.id in self.helpers:
            return ast.copy_location(ast.Name(id="_" + node.id, ctx=node.ctx), node)
        return node


def _kernel(name: str, src: str, fuses: str, tl_math: frozenset = frozenset()) -> Kernel:
    tree = ast.parse(src)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None or not fn.decorator_list:
        raise CannotWrite(f"Inductor's kernel {name} has an unexpected form")
    heur = fn.decorator_list[0]
    kind = heur.func.attr if isinstance(heur, ast.Call) and isinstance(heur.func, ast.Attribute) else ""
    if kind not in KINDS:
        raise CannotWrite(f"Inductor wrote a '{kind or 'template'}' kernel ({name}), which GEAK cannot "
                          "make standalone yet")
    meta = {k.arg: k.value for k in heur.keywords}
    sig = _literal_key(meta.get("triton_meta"), "signature") or {}
    grid = _literal_key(meta.get("inductor_meta"), "grid_type") or "Grid1D"
    if grid not in GRIDS:
        raise CannotWrite(f"Inductor's kernel {name} is launched on a {grid} grid, which GEAK cannot "
                          "write yet")
    fn.decorator_list = [ast.Attribute(value=ast.Name("triton", ast.Load()), attr="jit", ctx=ast.Load())]
    new = _readable(name)
    fn.name = new
    fn = _Rename(set(), "tl_math", tl_math).visit(fn)
    # A numel Inductor knows statically is a constexpr it still passes (a scalar update: xnumel = 1).
    params = [p for p, t in sig.items() if t != "constexpr" or p.endswith("numel")]
    consts = [p for p, t in sig.items() if t == "constexpr" and not p.endswith("numel")]
    known = set(POINTWISE_1D) | set(POINTWISE_2D) | set(REDUCTION)
    if any(c not in known for c in consts):
        raise CannotWrite(f"Inductor's kernel {name} takes {', '.join(c for c in consts if c not in known)}, "
                          "which GEAK cannot choose yet")
    # What it computes, inside it (a comment above it would not travel with it into an editor's edit).
    doc = f"Inductor's {kind.replace('_', ' ')} kernel" + (f"; fuses {fuses}." if fuses else ".")
    fn.body.insert(0, ast.Expr(ast.Constant(doc)))
    return Kernel(name=new, inductor_name=name, kind=kind, grid=grid, params=params, constexprs=consts,
                  fuses=fuses, source=ast.unparse(ast.fix_missing_locations(fn)))


def _helper(name: str, src: str, helpers: set[str], tl_math: frozenset = frozenset()) -> str:
    tree = ast.parse(textwrap.dedent(src))
    fn = tree.body[0]
    fn.name = "_" + name
    fn.decorator_list = [ast.Attribute(value=ast.Name("triton", ast.Load()), attr="jit", ctx=ast.Load())]
    fn = _Rename(helpers, "math", tl_math).visit(fn)
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant):
        fn.body = fn.body[1:] or [ast.Pass()]
    fn.body.insert(0, ast.Expr(ast.Constant(f"PyTorch's triton_helpers.{name} (torch/_inductor/runtime/"
                                            "triton_helpers.py, BSD-3-Clause), copied.")))
    return ast.unparse(ast.fix_missing_locations(fn))


def _source_expr(src: str) -> str:
    """Dynamo's source of an input as the argument expression it names: ``L['x']`` → ``x``,
    ``L['self']._modules['conv']._parameters['weight']`` → ``self.conv.weight``,
    ``L['x'].size()[0]`` → ``x.size(0)``."""
    s = re.sub(r"L\['(\w+)'\]", r"\1", src)
    s = re.sub(r"\._(modules|parameters|buffers)\['(\w+)'\]", r".\2", s)
    s = re.sub(r"\.(size|stride)\(\)\[(\d+)\]", r".\1(\2)", s)
    if "[" in s and not re.fullmatch(r"[\w.()\[\]']+", s):
        raise CannotWrite(f"an input of the compiled graph comes from {src}, which GEAK cannot name")
    return s


class _Call(ast.NodeTransformer):
    """``call``'s statements in plain Python (see the module's text)."""

    def __init__(self, kernels: dict[str, Kernel], externs: dict[str, str]):
        self.kernels, self.externs = kernels, externs
        self.library: list[str] = []
        self.uses_device = False

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("empty_strided_cpu", "empty_strided_cuda", "empty_strided"):
            self.uses_device = True
            if len(node.args) != 3:
                raise CannotWrite("Inductor's code allocates a buffer in a form GEAK does not know")
            size, stride, dtype = node.args
            return ast.copy_location(ast.Call(func=_attr("torch.empty_strided"), args=[size, stride],
                                              keywords=[ast.keyword("device", ast.Name("_device", ast.Load())),
                                                        ast.keyword("dtype", dtype)]), node)
        if isinstance(f, ast.Name) and f.id == "reinterpret_tensor":
            # Inductor's offset counts from the buffer's own start (its storage_offset, 0 for a
            # fresh buffer), as_strided's from the storage's.
            args = list(node.args)
            if len(args) != 4:
                raise CannotWrite("Inductor's code reinterprets a buffer in a form GEAK does not know")
            base = ast.Call(func=ast.Attribute(value=args[0], attr="storage_offset", ctx=ast.Load()), args=[],
                            keywords=[])
            args[3] = ast.BinOp(left=base, op=ast.Add(), right=args[3])
            return ast.copy_location(ast.Call(func=_attr("torch.as_strided"), args=args, keywords=[]), node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "extern_kernels":
            target = self.externs.get(f.attr)
            if target is None:
                raise CannotWrite(f"Inductor calls the library kernel {f.attr}, which has no torch equivalent")
            if target not in self.library:
                self.library.append(target)
            node.func = _attr(target)
            return node
        if isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name) \
                and f.value.id in self.kernels:
            return self.launch(self.kernels[f.value.id], node)
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "aten":
            return ast.copy_location(ast.Attribute(value=_attr("torch.ops.aten"), attr=node.attr, ctx=node.ctx), node)
        return node

    def launch(self, k: Kernel, node: ast.Call) -> ast.Call:
        args = list(node.args)
        if len(args) != len(k.params) or any(kw.arg != "stream" for kw in node.keywords):
            raise CannotWrite(f"Inductor launches {k.inductor_name} with arguments GEAK does not know")
        by_name = dict(zip(k.params, args))
        blocks = (PERSISTENT if k.kind == "persistent_reduction" else REDUCTION if k.kind == "reduction"
                  else POINTWISE_2D if k.grid == "Grid2D" else POINTWISE_1D)
        kws, chosen = [], {}
        for c in k.constexprs:
            if c == "R0_BLOCK" and k.kind == "persistent_reduction":
                value: ast.expr = ast.Call(func=_attr("triton.next_power_of_2"), args=[by_name["r0_numel"]], keywords=[])
            elif c in blocks:
                value = ast.Constant(blocks[c])
            else:
                raise CannotWrite(f"GEAK has no block size for {c} of {k.inductor_name}")
            kws.append(ast.keyword(c, value))
            chosen[c] = value
        kws.append(ast.keyword("num_warps", ast.Constant(NUM_WARPS)))
        grid = []
        for numel in GRIDS[k.grid]:
            block = {"xnumel": "XBLOCK", "ynumel": "YBLOCK"}[numel]
            if numel not in by_name:
                raise CannotWrite(f"Inductor's kernel {k.inductor_name} has no {numel}")
            size = by_name[numel]
            if block in k.constexprs:
                size = ast.Call(func=_attr("triton.cdiv"), args=[size, chosen[block]], keywords=[])
            grid.append(size)
        call = ast.Call(func=ast.Subscript(value=ast.Name(k.name, ast.Load()),
                                           slice=ast.Tuple(elts=grid, ctx=ast.Load()), ctx=ast.Load()),
                        args=args, keywords=kws)
        return ast.copy_location(call, node)


def _attr(dotted: str) -> ast.expr:
    parts = dotted.split(".")
    node: ast.expr = ast.Name(parts[0], ast.Load())
    for p in parts[1:]:
        node = ast.Attribute(value=node, attr=p, ctx=ast.Load())
    return node


def _call_body(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Runner":
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and m.name == "call":
                    return m.body
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node.body
    raise CannotWrite("Inductor's module has no call function")


def _wrapper(tree: ast.Module, gen: dict, kernels: dict[str, Kernel]) -> tuple[list[str], list[str]]:
    body = _call_body(tree)
    inputs = gen["inputs"]
    tensor_inputs = [s for s in inputs if not re.search(r"\.((size|stride)\(\)\[\d+\]|storage_offset\(\))$", s)]
    conv = _Call(kernels, gen.get("externs") or {})
    def plain(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and st.value.id == "args":
                names = st.targets[0].elts if isinstance(st.targets[0], ast.Tuple) else [st.targets[0]]
                if len(names) != len(inputs):
                    raise CannotWrite("Inductor's call takes other inputs than the graph's")
                for n, src in zip(names, inputs):
                    out.append(ast.Assign(targets=[ast.Name(n.id, ast.Store())],
                                          value=ast.parse(_source_expr(src), mode="eval").body, lineno=0))
                continue
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                f = st.value.func
                if isinstance(f, ast.Attribute) and f.attr == "clear" and isinstance(f.value, ast.Name) \
                        and f.value.id == "args":
                    continue
                if isinstance(f, ast.Name) and f.id in DROPPED_CALLS:
                    continue
                if ast.unparse(f) == "torch.cuda.set_device":  # the device guard below sets it
                    continue
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Name) \
                    and st.value.func.id == "get_raw_stream":
                continue
            if isinstance(st, ast.Delete):
                continue
            if isinstance(st, ast.Return):
                out.append(_return(st, gen["returns"]))
                continue
            if isinstance(st, ast.With) and len(st.items) == 1 and isinstance(st.items[0].context_expr, ast.Call) \
                    and ast.unparse(st.items[0].context_expr.func) == "torch.cuda._DeviceGuard":
                # Inductor's guard names device 0; the file's launches go to the inputs' device.
                conv.uses_device = True
                guard = ast.Call(func=_attr("torch.cuda.device"), args=[ast.Name("_device", ast.Load())], keywords=[])
                out.append(ast.With(items=[ast.withitem(context_expr=guard)], body=plain(st.body) or [ast.Pass()]))
                continue
            out.append(conv.visit(st))
        return out

    out = plain(body)
    lines = []
    if conv.uses_device:
        if not tensor_inputs:
            raise CannotWrite("the compiled graph has no tensor input to take the device from")
        lines.append(f"_device = {_source_expr(tensor_inputs[0])}.device")
    for st in out:
        lines.extend(ast.unparse(ast.fix_missing_locations(st)).splitlines())
    text = "\n".join(lines)
    for k in kernels.values():  # the numel variables Inductor names after its kernels
        text = re.sub(rf"\b{re.escape(k.inductor_name)}_", k.name + "_", text)
    free = _free_names(text) - {"torch", "triton", "tl", "math", "max", "min", "abs", "int", "float", "len",
                                "_device", "range", "tuple", "list"} - set(k.name for k in kernels.values())
    params = {s.split(".")[0].split("(")[0].split("[")[0] for s in map(_source_expr, inputs)}
    free -= params
    if free:
        raise CannotWrite(f"Inductor's code uses {', '.join(sorted(free))}, which the standalone file cannot")
    return text.splitlines(), conv.library


def _free_names(text: str) -> set[str]:
    tree = ast.parse(text)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - stored


def _return(st: ast.Return, returns: dict) -> ast.Return:
    value = st.value
    elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
    kind = returns.get("kind")
    if len(elts) != returns.get("n"):
        raise CannotWrite("Inductor's call returns other values than the function")
    if kind == "tensor":
        return ast.Return(value=elts[0])
    if kind == "list":
        return ast.Return(value=ast.List(elts=elts, ctx=ast.Load()))
    return ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load()))


def _variant(gen: dict, suffix: str, tl_math: frozenset) -> tuple[dict[str, Kernel], list[str], list[str]]:
    """One generation (one set of input dtypes): its kernels, ``call``'s body, its library calls."""
    if gen.get("error"):
        raise CannotWrite(gen["error"])
    code = gen["code"]
    tree = ast.parse(code)
    lines = code.splitlines()
    kernels: dict[str, Kernel] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "async_compile":
                if f.attr != "triton":
                    raise CannotWrite(f"Inductor wrote a {f.attr} kernel for part of this function, not Triton")
                name, src = (a.value for a in node.value.args[:2])
                k = _kernel(name, src, _fuses(lines, node.lineno), tl_math)
                if suffix:
                    k.source = re.sub(rf"^def {re.escape(k.name)}\(", f"def {k.name}{suffix}(", k.source, flags=re.M)
                    k.name += suffix
                kernels[name] = k
    if not kernels:
        raise CannotWrite("Inductor wrote no Triton kernel for this function: it is left to PyTorch's "
                          "libraries whole (a matmul or a convolution alone)")
    body, library = _wrapper(tree, gen, kernels)
    return kernels, body, library


def _dispatch(variants: list[dict], bodies: list[list[str]]) -> list[str]:
    """One body per set of input dtypes, chosen by the arguments' dtypes."""
    out = []
    # Only the arguments whose dtype tells the variants apart (a float argument is the same in all).
    names = set.union(*(set(v.get("dtypes") or {}) for v in variants))
    differ = {n for n in names if len({(v.get("dtypes") or {}).get(n) for v in variants}) > 1}
    for i, (v, body) in enumerate(zip(variants, bodies)):
        dtypes = {n: dt for n, dt in (v.get("dtypes") or {}).items() if n in differ}
        if not dtypes:
            raise CannotWrite("the generations for different inputs cannot be told apart by their dtypes")
        cond = " and ".join(f"{_source_expr(src)}.dtype == {dt}" for src, dt in sorted(dtypes.items()))
        out.append(("if " if i == 0 else "elif ") + cond + ":")
        out += ["    " + ln if ln else ln for ln in body]
    shown = "; ".join(", ".join(dt.replace("torch.", "") for n, dt in sorted((v.get("dtypes") or {}).items())
                                if n in differ) for v in variants)
    out.append("else:")
    out.append(f"    raise TypeError({('written for these input dtypes only: ' + shown)!r})")
    return out


def write(original: str, symbol: str, gen: dict) -> Written:
    """The original file's text with ``symbol`` computed by Inductor's kernels (module text).
    ``gen`` is one generation, or ``{"variants": [...]}``, one per set of input dtypes."""
    if gen.get("error"):
        raise CannotWrite(gen["error"])
    variants = gen.get("variants") or [gen]
    tl_math = frozenset(variants[0].get("tl_math") or ())
    kernels: dict[str, Kernel] = {}
    bodies, library, helpers = [], [], {}
    for i, v in enumerate(variants):
        ks, body, lib = _variant(v, f"_v{i}" if len(variants) > 1 else "", tl_math)
        kernels.update({f"{i}:{n}": k for n, k in ks.items()})
        bodies.append(body)
        library += [x for x in lib if x not in library]
        helpers.update(v.get("helpers") or {})
    body = bodies[0] if len(bodies) == 1 else _dispatch(variants, bodies)
    helper_src = [_helper(n, s, set(helpers), tl_math) for n, s in sorted(helpers.items())]
    return Written(text=_splice(original, symbol, kernels, helper_src, body, library, variants[0]),
                   kernels=list(kernels.values()), library=library)


def _target_body(tree: ast.Module, symbol: str) -> tuple[ast.AST, ast.FunctionDef]:
    """The top-level definition of ``symbol`` and the function whose body is replaced."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == symbol:
            return node, node
        if isinstance(node, ast.ClassDef) and node.name == symbol:
            fwd = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "forward"), None)
            if fwd is None:
                raise CannotWrite(f"{symbol} has no forward() of its own to rewrite")
            return node, fwd
    raise CannotWrite(f"no top-level function or class named {symbol} in the file")


def _splice(original: str, symbol: str, kernels: dict[str, Kernel], helpers: list[str], body: list[str],
            library: list[str], gen: dict) -> str:
    tree = ast.parse(original)
    top, fn = _target_body(tree, symbol)
    src = original.splitlines()
    first = fn.body[0]
    keep_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    start = (fn.body[1].lineno if keep_doc and len(fn.body) > 1 else first.end_lineno + 1 if keep_doc else first.lineno)
    end = fn.end_lineno
    indent = re.match(r"\s*", src[first.lineno - 1]).group(0)
    # Forward only: the kernels write into buffers autograd does not follow (and the library
    # calls write with out=, which autograd refuses).
    new_body = [f"{indent}# Triton kernels written by PyTorch's compiler (Inductor, torch {gen.get('torch', '?')}), made",
                f"{indent}# standalone by GEAK; block sizes and num_warps at each launch are for its tuner to search.",
                f"{indent}with torch.no_grad():  # forward only: no gradients through these kernels"]
    new_body += [indent + "    " + ln if ln else ln for ln in body]
    if library:
        new_body.insert(0, f"{indent}# Left to PyTorch's libraries: {', '.join(library)}.")
    block = [f"# Triton kernels for {symbol}, written by PyTorch's compiler (Inductor, torch "
             f"{gen.get('torch', '?')}) and made standalone by GEAK: Inductor's autotuning decorator",
             "# removed; the block sizes and num_warps at each launch below are for GEAK's tuner to search.",
             "import torch", "import triton", "import triton.language as tl"]
    if any("libdevice." in k.source for k in kernels.values()) or any("libdevice." in h for h in helpers):
        block.append("from triton.language.extra import libdevice")
    block.append("")
    if helpers:
        block.append("")
        block.append("# Helpers copied from PyTorch (torch/_inductor/runtime/triton_helpers.py, BSD-3-Clause).")
        for h in helpers:
            block += h.splitlines() + ["", ""]
    for k in kernels.values():
        block.append("")
        block.append(f"# {k.name}: {k.kind}" + (f"; fuses {k.fuses}" if k.fuses else ""))
        block += k.source.splitlines() + [""]
    block.append("")
    deco = min([d.lineno for d in getattr(top, "decorator_list", [])] + [top.lineno])
    out = src[:deco - 1] + block + src[deco - 1:start - 1] + new_body + src[end:]
    text = "\n".join(out) + ("\n" if original.endswith("\n") else "")
    ast.parse(text)  # what is offered parses
    return text
