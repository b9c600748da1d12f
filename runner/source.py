"""Static view of the user's code: targets, project-local imports, input conventions.

Standard library only (no torch): the CLI and the language server use this to build requests
and to give fast, precise errors (file, line, what to do) before any worker starts.
"""

from __future__ import annotations

import ast
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .schema import ErrorInfo, EvalOptions, EvalRequest, Flag, Target

PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
MAX_LOCAL_FILES = 200
MAX_FILE_BYTES = 2 * 1024 * 1024


class SourceError(Exception):
    """A problem in the user's input, stated in their terms."""

    def __init__(self, info: ErrorInfo):
        super().__init__(info.message)
        self.info = info


def parse_spec(spec: str) -> tuple[str, str]:
    """``path/to/file.py::symbol`` -> (path, symbol)."""
    path, sep, symbol = spec.rpartition("::")
    if not sep or not path or not symbol.isidentifier():
        raise SourceError(ErrorInfo(
            kind="bad_request", side="harness",
            message=f"'{spec}' is not of the form PATH::SYMBOL",
            hint="name a file and a top-level function or class in it, e.g. "
                 "examples/softmax.py::softmax"))
    return path, symbol


def find_project_root(path: Path) -> Path:
    path = path.resolve()
    for parent in [path.parent, *path.parent.parents]:
        if any((parent / m).exists() for m in PROJECT_MARKERS):
            return parent
    return path.parent


# --------------------------------------------------------------------------- parsing

_AST_LOCK = threading.Lock()


def ast_parse(text: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, one thread at a time: CPython 3.11's AST constructor keeps its recursion
    depth in shared state, and parses in two threads at once (the runner's dispatcher and
    ``evaluate_many`` threads) can fail with "SystemError: AST constructor recursion depth
    mismatch" (python/cpython#106905)."""
    with _AST_LOCK:
        return ast.parse(text, filename=filename)


def parse(text: str, filename: str, side: str = "reference") -> ast.Module:
    try:
        return ast_parse(text, filename=filename)
    except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte, before Python 3.12
        line = getattr(e, "lineno", None)
        raise SourceError(ErrorInfo(
            kind="syntax_error", side=side, file=filename, line=line,
            message=f"{filename}:{line or 1}: syntax error: {getattr(e, 'msg', None) or e}",
            hint="fix the syntax error; nothing was run")) from None


def _decorator_names(node: ast.AST) -> list[str]:
    names = []
    for d in getattr(node, "decorator_list", []):
        if isinstance(d, ast.Call):
            d = d.func
        names.append(ast.unparse(d))
    return names


def is_triton_kernel(node: ast.AST) -> bool:
    """A function decorated with ``@triton.jit`` (or ``@jit``), possibly under autotune."""
    return isinstance(node, ast.FunctionDef) and any(
        n.split(".")[-1] == "jit" for n in _decorator_names(node))


def top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = node
    return names


def launched_kernels(node: ast.AST) -> set[str]:
    """Names used as ``kernel[grid](...)`` inside ``node``."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript):
            v = n.func.value
            if isinstance(v, ast.Name):
                out.add(v.id)
            elif isinstance(v, ast.Attribute):
                out.add(v.attr)
    return out


@dataclass
class TargetInfo:
    """What the static pass learned about a target."""

    path: str
    symbol: str
    """The callable that is evaluated (a kernel's launching wrapper, when the user named a kernel)."""
    kind: str  # function | module | wrapper
    line: int
    kernels: list[str] = field(default_factory=list)
    """Triton kernels defined in the file that this target launches."""
    conventions: list[str] = field(default_factory=list)
    """Input conventions found: cases, kernelbench, tritonbench, pytest."""
    note: Optional[str] = None


def analyze_target(text: str, path: str, symbol: str, side: str = "reference") -> TargetInfo:
    tree = parse(text, path, side)
    names = top_level_names(tree)
    if symbol not in names:
        defs = sorted(n for n, node in names.items()
                      if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not n.startswith("_"))
        raise SourceError(ErrorInfo(
            kind="missing_symbol", side=side, file=path,
            message=f"{path}: no top-level function or class named '{symbol}'",
            hint=("top-level names here: " + ", ".join(defs)) if defs else
                 "define the function or class at the top level of the file"))
    node = names[symbol]
    not_callable = _not_callable(node, symbol)
    if not_callable:
        raise SourceError(ErrorInfo(
            kind="missing_symbol", side=side, file=path, line=getattr(node, "lineno", None),
            message=f"{path}:{getattr(node, 'lineno', '?')}: '{symbol}' is {not_callable}, not a function "
                    "or class",
            hint="SYMBOL must name a function (a wrapper that launches Triton kernels, a Triton kernel, "
                 "a PyTorch function) or an nn.Module class"))
    kernels_here = {n for n, d in names.items() if is_triton_kernel(d)}
    info = TargetInfo(path=path, symbol=symbol, kind="function", line=getattr(node, "lineno", 1))
    if isinstance(node, ast.ClassDef):
        info.kind = "module"
    if symbol in kernels_here:
        # The user pointed at a @triton.jit kernel: evaluate the wrapper that launches it.
        wrappers = [n for n, d in names.items()
                    if isinstance(d, ast.FunctionDef) and n not in kernels_here
                    and symbol in launched_kernels(d)]
        if not wrappers:
            raise SourceError(ErrorInfo(
                kind="missing_symbol", side=side, file=path, line=info.line,
                message=f"{path}:{info.line}: '{symbol}' is a Triton kernel, and no function in "
                        "this file launches it",
                hint=f"write a Python wrapper that launches {symbol}[grid](...) and evaluate "
                     "that wrapper"))
        info.symbol, info.kind = wrappers[0], "wrapper"
        info.line = names[wrappers[0]].lineno
        info.note = f"'{symbol}' is a Triton kernel; evaluating its launching wrapper '{wrappers[0]}'"
        node = names[wrappers[0]]
    launched = launched_kernels(node)
    info.kernels = sorted(k for k in kernels_here if k in launched)
    if info.kernels and info.kind == "function":
        info.kind = "wrapper"
    info.conventions = input_conventions(tree)
    return info


_LITERAL_KINDS = {ast.List: "list", ast.ListComp: "list", ast.Tuple: "tuple", ast.Dict: "dict",
                  ast.DictComp: "dict", ast.Set: "set", ast.SetComp: "set", ast.JoinedStr: "str",
                  ast.GeneratorExp: "generator"}


def _literal_kind(expr: Optional[ast.AST]) -> Optional[str]:
    """The type of an expression that is certainly not callable (a literal), else None."""
    if isinstance(expr, ast.Constant):
        return type(expr.value).__name__
    if type(expr) in _LITERAL_KINDS:
        return _LITERAL_KINDS[type(expr)]
    if isinstance(expr, ast.UnaryOp):
        return _literal_kind(expr.operand)
    if isinstance(expr, ast.BinOp) and _literal_kind(expr.right):
        return _literal_kind(expr.left)
    return None


def _not_callable(node: ast.AST, symbol: str) -> Optional[str]:
    """How a top-level name bound to a literal reads ("an int constant"), or None when the name
    may be callable (a def, a class, an import, or any other expression)."""
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return "only annotated (no value)"
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        kind = _literal_kind(node.value)
        if kind:
            article = "an" if kind[0] in "aeiou" else "a"
            return f"{article} {kind} {'constant' if isinstance(node.value, ast.Constant) else 'value'}"
    return None


def declared_case_count(text: str) -> Optional[int]:
    """How many input cases a file declares, when it can be told without running it: the length
    of a literal ``INPUT_CASES`` next to a module-level ``get_inputs()`` (1 without
    ``INPUT_CASES``); None otherwise (test functions, computed cases, a file that does not parse)."""
    try:
        tree = ast_parse(text)
    except (SyntaxError, ValueError):
        return None
    names = top_level_names(tree)
    if not isinstance(names.get("get_inputs"), ast.FunctionDef):
        return None
    node = names.get("INPUT_CASES")
    if node is None:
        return 1
    value = getattr(node, "value", None)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, (ast.List, ast.Tuple)) \
            and not any(isinstance(e, ast.Starred) for e in value.elts):
        return len(value.elts)
    return None


def input_conventions(tree: ast.Module) -> list[str]:
    names = top_level_names(tree)
    found = []
    if isinstance(names.get("get_inputs"), ast.FunctionDef):
        found.append("cases" if "INPUT_CASES" in names else "kernelbench")
    tests = [d for n, d in names.items() if n.startswith("test") and isinstance(d, ast.FunctionDef)]
    if tests:
        if any(d.args.args for d in tests):
            found.append("pytest")
        else:
            found.append("tritonbench")
    return found


def no_inputs_error(path: str, symbol: str) -> SourceError:
    return SourceError(ErrorInfo(
        kind="no_inputs", side="reference", file=path,
        message=f"{path}: no inputs to run '{symbol}' on",
        hint="add a module-level get_inputs() that returns the arguments for "
             f"{symbol} (optionally INPUT_CASES = [dict(...), ...] for several shapes), or a "
             f"test_*() function that calls {symbol}; the editor's 'Add GEAK inputs' action "
             "scaffolds one"))


# --------------------------------------------------------------------------- local imports


def _module_file(root: Path, dotted: str) -> Optional[Path]:
    rel = Path(*dotted.split("."))
    for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def local_imports(tree: ast.Module, file: Path, root: Path) -> list[Path]:
    """Project files that ``file`` imports (resolved against the file's folder and the root)."""
    found: list[Path] = []
    search = [file.parent, root]
    pkg_parts = list(file.relative_to(root).parent.parts)

    def add(dotted: str, bases: list[Path]):
        parts = dotted.split(".")
        for base in bases:
            for i in range(len(parts), 0, -1):  # a.b.c may be module a.b with attribute c
                f = _module_file(base, ".".join(parts[:i]))
                if f is not None:
                    found.append(f)
                    # Packages on the way: a/__init__.py
                    for j in range(1, i):
                        init = base.joinpath(*parts[:j], "__init__.py")
                        if init.is_file():
                            found.append(init)
                    return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, search)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = pkg_parts[: len(pkg_parts) - (node.level - 1)] if node.level > 1 else pkg_parts
                base = root.joinpath(*up)
                mod = node.module or ""
                if mod:
                    add(mod, [base])
                for a in node.names:
                    add(f"{mod}.{a.name}" if mod else a.name, [base])
            elif node.module:
                add(node.module, search)
                for a in node.names:
                    add(f"{node.module}.{a.name}", search)
    return found


def collect_files(path: Path, root: Path, overrides: Optional[dict[str, str]] = None,
                  side: str = "reference") -> dict[str, str]:
    """The file and every project-local module it imports, transitively: {relpath: text}.

    ``overrides`` maps relpaths to unsaved editor text, used instead of the disk.
    """
    overrides = overrides or {}
    files: dict[str, str] = {}
    first = path.resolve()
    todo = [first]
    root = root.resolve()
    while todo:
        f = todo.pop()
        try:
            rel = f.relative_to(root).as_posix()
        except ValueError:
            continue  # outside the project: an installed package, not ours to ship
        # Modules under hidden folders (.venv, .git) are not shipped; the file asked for always is.
        hidden = f != first and any(p.startswith(".") for p in f.relative_to(root).parts[:-1])
        if rel in files or "site-packages" in f.parts or hidden:
            continue
        if len(files) >= MAX_LOCAL_FILES:
            break
        if rel in overrides:
            text = overrides[rel]
        else:
            try:
                if f.stat().st_size > MAX_FILE_BYTES:
                    continue
                text = f.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise SourceError(ErrorInfo(kind="bad_request", side=side, file=rel,
                                            message=f"{rel}: no such file")) from None
            except (OSError, UnicodeDecodeError) as e:
                raise SourceError(ErrorInfo(kind="bad_request", side=side, file=rel,
                                            message=f"{rel}: cannot read: {e}")) from None
        files[rel] = text
        # The packages the file sits in: their __init__.py runs when it is imported.
        for parent in f.parents:
            if parent == root or root not in parent.parents:
                break
            if (parent / "__init__.py").is_file():
                todo.append(parent / "__init__.py")
        try:
            tree = ast_parse(text, filename=rel)
        except (SyntaxError, ValueError):
            continue  # reported precisely when the file is analysed
        todo.extend(local_imports(tree, f, root))
    return files


# --------------------------------------------------------------------------- static anti-cheat

_TORCH_WORK_CALLS = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "softmax", "log_softmax", "layer_norm",
    "rms_norm", "group_norm", "batch_norm", "conv1d", "conv2d", "conv3d", "linear",
    "scaled_dot_product_attention", "cumsum", "cumprod", "sort", "topk", "gelu", "silu", "relu",
    "sum", "mean", "amax", "max", "min", "var", "std", "exp", "tanh", "sigmoid", "cross_entropy",
    "embedding", "normalize", "dropout", "argmax", "logsumexp",
}
_SUSPICIOUS_MODULES = {"ctypes", "cupy", "gc", "inspect", "threading", "multiprocessing",
                       "concurrent", "subprocess", "pickle", "socket"}
_TIMER_NAMES = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "elapsed_time", "record", "synchronize", "do_bench", "Event"}


def static_flags(text: str, path: str, symbol: str, reference_symbol: str) -> list[Flag]:
    """Suspicions found in a candidate's source. The runtime checks decide; these explain."""
    try:
        tree = ast_parse(text, filename=path)
    except (SyntaxError, ValueError):
        return []
    flags: list[Flag] = []
    seen: set[str] = set()

    def flag(code: str, severity: str, msg: str):
        if (code, msg) not in seen:
            seen.add((code, msg))
            flags.append(Flag(code=code, severity=severity, message=msg))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if m.split(".")[0] in _SUSPICIOUS_MODULES:
                    flag("suspicious_import", "warning", f"{path}:{line}: imports '{m}'")
                if m.startswith("torch._C"):
                    flag("suspicious_import", "warning", f"{path}:{line}: imports '{m}'")
        elif isinstance(node, ast.Attribute) and node.attr in (
                "_DisableTorchDispatch", "_unset_dispatch_mode", "_disabled_torch_dispatch_impl",
                "_DisableTorchFunction", "_disabled_torch_function_impl"):
            flag("hides_torch_ops", "reject", f"{path}:{line}: uses torch.{node.attr}, "
                 "which hides PyTorch calls from the evaluator")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in _TIMER_NAMES:
                    flag("timer_tampering", "warning",
                         f"{path}:{line}: assigns {ast.unparse(t)}: timers must not be replaced")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn = ast.unparse(node.func)
            head = fn.split(".")[0]
            if node.func.attr in _TORCH_WORK_CALLS and head in ("torch", "F", "nn", "functional"):
                flag("torch_call_in_source", "info",
                     f"{path}:{line}: calls {fn}; the evaluator checks at run time that the work "
                     "is done by a Triton kernel")
            if fn.endswith("cuda.Stream") or fn.endswith("cuda.stream") or fn.endswith("cuda.set_stream"):
                flag("side_stream", "warning", f"{path}:{line}: uses {fn}: work on another stream "
                     "is invisible to the timer")
            if node.func.attr == "setattr" or (isinstance(node.func, ast.Name) and node.func.id == "setattr"):
                flag("suspicious_setattr", "warning", f"{path}:{line}: calls setattr")
        elif isinstance(node, ast.ClassDef) and symbol == node.name:
            for b in node.bases:
                if ast.unparse(b).split(".")[-1] == reference_symbol and reference_symbol != symbol:
                    flag("inherits_reference", "warning",
                         f"{path}:{line}: {symbol} inherits from the reference {reference_symbol}")
        elif isinstance(node, ast.Try):
            handlers = " ".join(ast.unparse(h) for h in node.handlers)
            if "torch." in handlers or "F." in handlers or reference_symbol in handlers:
                flag("fallback_path", "warning",
                     f"{path}:{line}: an except clause falls back to PyTorch or the reference")
    return flags


# --------------------------------------------------------------------------- requests


def _python_file(cwd: Path, shown: str, side: str) -> Path:
    """PATH must be an existing Python source file of a size the runner takes; its full path."""
    file = (cwd / shown).resolve()
    if not file.is_file():
        raise SourceError(ErrorInfo(kind="bad_request", side=side, file=shown, message=f"{shown}: no such file"))
    if file.suffix != ".py":
        raise SourceError(ErrorInfo(kind="bad_request", side=side, file=shown,
                                    message=f"{shown} is not a Python file (.py)",
                                    hint="PATH::SYMBOL names a .py file and a function or class in it"))
    size = file.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SourceError(ErrorInfo(kind="bad_request", side=side, file=shown,
                                    message=f"{shown} is {size / (1 << 20):.1f} MiB; files over "
                                            f"{MAX_FILE_BYTES >> 20} MiB are not evaluated",
                                    hint="keep the kernel and its wrapper in a smaller file"))
    return file


def build_request(target_spec: str, candidate_spec: Optional[str] = None,
                  options: Optional[EvalOptions] = None, root: Optional[Path] = None,
                  overrides: Optional[dict[str, str]] = None,
                  cwd: Optional[Path] = None) -> tuple[EvalRequest, TargetInfo, list[Flag]]:
    """Read the target (and candidate) from disk, check them statically, build the request.

    Raises SourceError for anything that is the user's to fix.
    """
    cwd = cwd or Path(os.getcwd())
    tpath, tsym = parse_spec(target_spec)
    tfile = _python_file(cwd, tpath, "reference")
    root = (root or find_project_root(tfile)).resolve()
    trel = tfile.relative_to(root).as_posix()
    files = collect_files(tfile, root, overrides)
    info = analyze_target(files[trel], trel, tsym, "reference")
    if not info.conventions:
        raise no_inputs_error(trel, info.symbol)
    request = EvalRequest(target=Target(trel, info.symbol), files=files,
                          options=options or EvalOptions())
    flags: list[Flag] = []
    if candidate_spec:
        cpath, csym = parse_spec(candidate_spec)
        cfile = _python_file(cwd, cpath, "candidate")
        try:
            crel = cfile.relative_to(root).as_posix()
        except ValueError:
            raise SourceError(ErrorInfo(
                kind="bad_request", side="candidate", file=cpath,
                message=f"{cpath}: the candidate must be inside the project ({root})")) from None
        cfiles = collect_files(cfile, root, overrides, "candidate")
        cinfo = analyze_target(cfiles[crel], crel, csym, "candidate")
        request.candidate = Target(crel, cinfo.symbol)
        request.candidate_files = {k: v for k, v in cfiles.items() if files.get(k) != v}
        flags = static_flags(cfiles[crel], crel, cinfo.symbol, info.symbol)
    return request, info, flags
