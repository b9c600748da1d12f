"""Static view of the user's code: targets, project-local imports, input conventions.

Standard library only (no torch): the CLI and the language server use this to build requests
and to give fast, precise errors (file, line, what to do) before any worker starts.
"""

from __future__ import annotations

import ast
import collections
import hashlib
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


def as_imported(text: str):
    """What an import of ``text`` reads: the bytes a worker writes (UTF-8), so that a coding
    cookie (``# coding: utf-7``) or a BOM is read as Python reads it, and a check sees the code
    that runs; the text itself when it cannot be written so (the worker cannot either)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text


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
    start = path.resolve()
    todo = [start]
    root = root.resolve()
    while todo:
        f = todo.pop()
        try:
            rel = f.relative_to(root).as_posix()
        except ValueError:
            continue  # outside the project: an installed package, not ours to ship
        # Imports found under hidden folders (a .venv inside the project) or site-packages are
        # installed code; the file asked for is shipped wherever it lies.
        hidden = "site-packages" in f.parts or any(p.startswith(".") for p in f.relative_to(root).parts[:-1])
        if rel in files or (hidden and f != start):
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
                       "concurrent", "subprocess", "pickle", "socket", "signal", "builtins", "marshal"}
_HIDES_TORCH_OPS = {"_DisableTorchDispatch", "_unset_dispatch_mode", "_disabled_torch_dispatch_impl",
                    "_DisableTorchFunction", "_disabled_torch_function_impl", "_disable_current_modes",
                    "_pop_mode", "_pop_mode_temporarily", "_pop_torch_dispatch_stack"}
"""What switches off the dispatch modes the evaluator watches PyTorch calls with."""
_TIMER_NAMES = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "elapsed_time", "record", "synchronize", "do_bench", "Event"}


def static_flags(text: str, path: str, symbol: str, reference_symbol: str,
                 excused: frozenset[str] = frozenset()) -> list[Flag]:
    """Suspicions found in one file of a candidate's (``symbol``: the candidate's symbol when
    this is its file, else ""), and the means of in-process forgery it uses (``means_flags``;
    ``excused``: means the user's own original uses, a warning here rather than a reject).
    The runtime checks decide the rest; a "reject" here ends the evaluation as ``rejected``."""
    key = ("flags", _digest(text), path, symbol, reference_symbol, frozenset(excused))
    found = _remembered(key, lambda: tuple((f.code, f.severity, f.message) for f in _static_flags_of(
        text, path, symbol, reference_symbol, frozenset(excused))))
    return [Flag(*f) for f in found]


_MEMO: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 512


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest()


def _remembered(key: tuple, compute):
    """The static check's results by the text's digest (the texts are not kept): the runner's
    front door and the verdict read the same files of each request, and a search sends many
    requests with the same files."""
    with _MEMO_LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
    value = compute()
    with _MEMO_LOCK:
        _MEMO[key] = value
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return value


def _static_flags_of(text: str, path: str, symbol: str, reference_symbol: str,
                     excused: frozenset[str]) -> list[Flag]:
    try:
        tree = ast_parse(as_imported(text), filename=path)
    except (SyntaxError, ValueError):
        return []
    except (RecursionError, MemoryError):
        return _means(None, path)
    flags: list[Flag] = []
    seen: set[str] = set()

    def flag(code: str, severity: str, msg: str):
        if (code, msg) not in seen:
            seen.add((code, msg))
            flags.append(Flag(code=code, severity=severity, message=msg))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names if isinstance(node, ast.ImportFrom) else []:
                if a.name in _HIDES_TORCH_OPS:
                    flag("hides_torch_ops", "reject", f"{path}:{line}: imports {a.name}, "
                         "which hides PyTorch calls from the evaluator")
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if m.split(".")[0] in _SUSPICIOUS_MODULES:
                    flag("suspicious_import", "warning", f"{path}:{line}: imports '{m}'")
                if m.startswith("torch._C"):
                    flag("suspicious_import", "warning", f"{path}:{line}: imports '{m}'")
        elif isinstance(node, ast.Attribute) and node.attr in _HIDES_TORCH_OPS:
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
    for f in _means(tree, path, excused):
        flag(f.code, f.severity, f.message)
    return flags


def candidate_flags(req: EvalRequest) -> list[Flag]:
    """``static_flags`` of every file that is the candidate's own: its file (wherever its text
    comes from) and each of ``candidate_files``. Means that the user's own version of the same
    file, or the target file, already uses are warnings, not rejects (a kernel engineer's
    candidate keeps what their code does). Run where the verdict is decided (``runner.judge.verdict``,
    ``runner.serve.local.check_request``) and by ``build_request``: the same request, the same flags.
    A file the check fails on is rejected: what it cannot read, it cannot vouch for."""
    if req.candidate is None:
        return []
    tree = {**req.files, **req.candidate_files}
    target = req.files.get(req.target.path)
    target_means = means_patterns(target) if isinstance(target, str) else frozenset()
    flags: list[Flag] = []
    for path in dict.fromkeys([req.candidate.path, *sorted(req.candidate_files)]):
        text = tree.get(path)
        if not isinstance(text, str) or not path.endswith(".py"):
            continue
        symbol = req.candidate.symbol if path == req.candidate.path else ""
        try:
            original = req.files.get(path)
            excused = target_means | (means_patterns(original) if isinstance(original, str)
                                      and path != req.target.path else frozenset())
            flags.extend(static_flags(text, path, symbol, req.target.symbol, excused))
        except Exception as e:  # noqa: BLE001 - a bug here must not let a file through
            flags.append(Flag("unreadable", "reject", f"{path}: the evaluator's static check failed on this "
                                                      f"file ({type(e).__name__}: {e}); a candidate must be "
                                                      "code the check can read"))
    return flags


# --------------------------------------------------------------------------- means of forgery
#
# Some of what decides a verdict is reported by the candidate's own process (its launches,
# PyTorch ops, threads, guard bands, integrity snapshot, its own timing). A candidate written to
# forge those reports needs a means of reaching the evaluator's objects or of acting outside
# the calls the evaluator watches. Each rule below names one; the severity is a decision
# (docs/evaluator.md, "Anti-cheat rules"): "reject" where no kernel, launching wrapper or test
# has a use for it (checked over TritonBench, Liger-Kernel and KernelBench with
# scripts/static_means_corpus.py), "warning" where real kernel code has one.

_EVALUATOR_PACKAGE = "runner"
_EVALUATOR_MODULES = frozenset(p.stem for p in Path(__file__).resolve().parent.glob("*.py")) | frozenset(
    p.parent.name for p in Path(__file__).resolve().parent.glob("*/__init__.py"))
"""The evaluator's own modules and sub-packages (``worker``, ``judge``, ``serve``): a string
``'runner.NAME...'`` that names one is a reach for the evaluator."""

_WHY = {
    "reaches_evaluator": "'runner' is the evaluator's own package (in the worker, the evaluator's modules "
                         "answer that name, never a project module): code that reaches it can rewrite what "
                         "the evaluator reports about the candidate",
    "heap_walk": "walking the interpreter's objects finds the evaluator's own records and answers, to "
                 "rewrite or copy them",
    "raw_memory": "raw memory access can rewrite the evaluator's objects in place",
    "native_code": "native code runs outside everything the evaluator observes",
    "hidden_thread": "a thread started this way is invisible to the evaluator's thread check and can "
                     "act after the candidate has returned",
    "spawns_process": "a child process inherits the evaluator's channel and can answer for the candidate "
                      "after it has returned",
    "runs_program": "another program runs outside what the evaluator observes",
    "raw_socket": "a socket made from an inherited descriptor is the evaluator's own channel",
    "raw_fd": "writing to a raw file descriptor reaches the evaluator's channel",
    "signal_handler": "a signal handler or a signal runs code in the middle of the evaluator's own work",
    "dynamic_code": "code built at run time cannot be read by this check",
    "frame_access": "frames reach the callers' variables: the evaluator's own",
    "object_internals": "reaches objects through the interpreter's internals rather than by name",
    "tracing_hook": "a trace, profile or audit hook runs code inside the evaluator's own calls",
    "reads_source": "source read at run time (the original's included) can be run as the candidate's own",
    "dynamic_import": "a module named at run time cannot be told by this check",
}

_MEANS_CODES = frozenset(_WHY)

# Dotted names, as the file resolves them (imports and their aliases, ``getattr(m, "name")``,
# ``__import__("m")``, ``importlib.import_module("m")``, ``sys.modules["m"]``; builtins as
# ``builtins.NAME``). "mod" matches the module and every name under it; "mod.*" only the names
# under it (importing the module is not the means); a trailing "*" after a prefix matches any
# name that starts with it ("os.exec*").
_NAMED: dict[str, tuple[str, str]] = {
    # the evaluator itself
    "runner": ("reaches_evaluator", "reject"),
    "sys.modules.runner": ("reaches_evaluator", "reject"),
    # the heap
    "gc.get_objects": ("heap_walk", "reject"),
    "gc.get_referrers": ("heap_walk", "reject"),
    "gc.get_referents": ("heap_walk", "reject"),
    "gc.garbage": ("heap_walk", "reject"),
    "gc.callbacks": ("tracing_hook", "reject"),
    # raw memory
    "ctypes.memmove": ("raw_memory", "reject"),
    "ctypes.memset": ("raw_memory", "reject"),
    "ctypes.string_at": ("native_code", "warning"),
    "ctypes.wstring_at": ("native_code", "warning"),
    "ctypes.pythonapi": ("raw_memory", "reject"),
    "ctypes.py_object": ("raw_memory", "reject"),
    "ctypes.PyDLL": ("raw_memory", "reject"),
    "ctypes.pydll": ("raw_memory", "reject"),
    "ctypes.CDLL": ("native_code", "warning"),
    "ctypes.cdll": ("native_code", "warning"),
    "ctypes.util": ("native_code", "warning"),
    "ctypes.cast": ("native_code", "warning"),
    "ctypes.addressof": ("native_code", "warning"),
    # threads the threading module does not list
    "_thread": ("hidden_thread", "reject"),
    "_dummy_thread": ("hidden_thread", "reject"),
    "threading._start_new_thread": ("hidden_thread", "reject"),
    "threading._thread": ("hidden_thread", "reject"),
    "threading._start_joinable_thread": ("hidden_thread", "reject"),
    # processes that share the worker's descriptors
    "os.fork": ("spawns_process", "reject"),
    "os.forkpty": ("spawns_process", "reject"),
    "os.register_at_fork": ("spawns_process", "reject"),
    "os.posix_spawn*": ("spawns_process", "reject"),
    "os.exec*": ("spawns_process", "reject"),
    "os.spawn*": ("spawns_process", "reject"),
    "posix": ("spawns_process", "reject"),
    "pty": ("spawns_process", "reject"),
    "multiprocessing.*": ("spawns_process", "warning"),
    "torch.multiprocessing.*": ("spawns_process", "warning"),
    "concurrent.futures.ProcessPoolExecutor": ("spawns_process", "warning"),
    "concurrent.futures.process": ("spawns_process", "warning"),
    "os.system": ("runs_program", "warning"),
    "os.popen": ("runs_program", "warning"),
    "subprocess.*": ("runs_program", "warning"),
    # descriptors and sockets
    "socket.fromfd": ("raw_socket", "reject"),
    "socket.fromshare": ("raw_socket", "reject"),
    "socket.socketpair": ("raw_socket", "reject"),
    "socket.send_fds": ("raw_socket", "reject"),
    "socket.recv_fds": ("raw_socket", "reject"),
    "socket.AF_UNIX": ("raw_socket", "reject"),
    "os.write": ("raw_fd", "reject"),
    "os.writev": ("raw_fd", "reject"),
    "os.pwrite": ("raw_fd", "reject"),
    "os.pwritev": ("raw_fd", "reject"),
    "os.sendfile": ("raw_fd", "reject"),
    "os.fdopen": ("raw_fd", "reject"),
    "os.dup": ("raw_fd", "reject"),
    "os.dup2": ("raw_fd", "reject"),
    "os.set_inheritable": ("raw_fd", "reject"),
    # signals
    "signal.signal": ("signal_handler", "reject"),
    "signal.setitimer": ("signal_handler", "reject"),
    "signal.alarm": ("signal_handler", "reject"),
    "signal.set_wakeup_fd": ("signal_handler", "reject"),
    "signal.pthread_kill": ("signal_handler", "reject"),
    "signal.raise_signal": ("signal_handler", "reject"),
    "signal.siginterrupt": ("signal_handler", "reject"),
    "os.kill": ("signal_handler", "warning"),
    "os.killpg": ("signal_handler", "warning"),
    # code built at run time
    "builtins.exec": ("dynamic_code", "reject"),
    "builtins.eval": ("dynamic_code", "warning"),
    "builtins.compile": ("dynamic_code", "reject"),
    "types.FunctionType": ("dynamic_code", "reject"),
    "types.CodeType": ("dynamic_code", "reject"),
    "marshal.load": ("dynamic_code", "reject"),
    "marshal.loads": ("dynamic_code", "reject"),
    "code": ("dynamic_code", "reject"),
    "codeop": ("dynamic_code", "reject"),
    # frames
    "sys._getframe": ("frame_access", "reject"),
    "sys._getframemodulename": ("frame_access", "reject"),
    "sys._current_frames": ("frame_access", "reject"),
    "sys._current_exceptions": ("frame_access", "reject"),
    "inspect.currentframe": ("frame_access", "reject"),
    "inspect.stack": ("frame_access", "reject"),
    "inspect.trace": ("frame_access", "reject"),
    "inspect.getouterframes": ("frame_access", "reject"),
    "inspect.getinnerframes": ("frame_access", "reject"),
    "inspect.getmembers": ("object_internals", "warning"),
    "inspect.getclosurevars": ("object_internals", "reject"),
    "traceback.walk_stack": ("frame_access", "reject"),
    "traceback.walk_tb": ("frame_access", "reject"),
    # hooks
    "sys.settrace": ("tracing_hook", "reject"),
    "sys.setprofile": ("tracing_hook", "reject"),
    "sys.addaudithook": ("tracing_hook", "reject"),
    "sys.monitoring": ("tracing_hook", "reject"),
    "sys.remote_exec": ("tracing_hook", "reject"),
    "sys.set_asyncgen_hooks": ("tracing_hook", "reject"),
    "threading.settrace": ("tracing_hook", "reject"),
    "threading.setprofile": ("tracing_hook", "reject"),
    "threading.settrace_all_threads": ("tracing_hook", "reject"),
    "threading.setprofile_all_threads": ("tracing_hook", "reject"),
    # source read at run time
    "inspect.getsource": ("reads_source", "reject"),
    "inspect.getsourcelines": ("reads_source", "reject"),
    "inspect.getsourcefile": ("reads_source", "reject"),
    "inspect.findsource": ("reads_source", "reject"),
    "inspect.getfile": ("reads_source", "warning"),
    "linecache": ("reads_source", "reject"),
    "runpy": ("reads_source", "reject"),
    "tokenize.open": ("reads_source", "reject"),
    "importlib.util.spec_from_file_location": ("dynamic_import", "warning"),
    "importlib.machinery.SourceFileLoader": ("dynamic_import", "warning"),
    "importlib.machinery.SourcelessFileLoader": ("dynamic_import", "warning"),
    # imports named at run time
    "importlib.reload": ("dynamic_import", "reject"),
    "importlib": ("dynamic_import", "warning"),
    "builtins.__import__": ("dynamic_import", "warning"),
    "imp": ("dynamic_import", "warning"),
    "pkgutil": ("dynamic_import", "warning"),
    "zipimport": ("dynamic_import", "warning"),
    "sys.modules": ("dynamic_import", "warning"),
    "sys.meta_path": ("dynamic_import", "reject"),
    "sys.path_hooks": ("dynamic_import", "reject"),
    "sys.path_importer_cache": ("dynamic_import", "reject"),
}

# Attribute names that mean one thing whatever object they are read from.
_ATTRS: dict[str, tuple[str, str]] = {
    "f_back": ("frame_access", "reject"),
    "f_globals": ("frame_access", "reject"),
    "f_locals": ("frame_access", "reject"),
    "f_builtins": ("frame_access", "reject"),
    "tb_frame": ("frame_access", "reject"),
    "gi_frame": ("frame_access", "reject"),
    "cr_frame": ("frame_access", "reject"),
    "ag_frame": ("frame_access", "reject"),
    "_getframe": ("frame_access", "reject"),
    "_current_frames": ("frame_access", "reject"),
    "__subclasses__": ("object_internals", "reject"),
    "__globals__": ("object_internals", "reject"),
    "__builtins__": ("object_internals", "reject"),
    "__closure__": ("object_internals", "warning"),
    "cell_contents": ("object_internals", "reject"),
    "func_globals": ("object_internals", "reject"),
    "start_new_thread": ("hidden_thread", "reject"),
    "_start_new_thread": ("hidden_thread", "reject"),
    "start_joinable_thread": ("hidden_thread", "reject"),
    "_start_joinable_thread": ("hidden_thread", "reject"),
    "get_referrers": ("heap_walk", "reject"),
    "get_referents": ("heap_walk", "reject"),
    "from_address": ("raw_memory", "reject"),
    "memmove": ("raw_memory", "reject"),
    "memcpy": ("raw_memory", "reject"),
    "memset": ("raw_memory", "reject"),
    "pythonapi": ("raw_memory", "reject"),
    "settrace": ("tracing_hook", "reject"),
    "setprofile": ("tracing_hook", "reject"),
    "addaudithook": ("tracing_hook", "reject"),
}

_RULE_MODULES = frozenset(p.split(".")[0] for p in _NAMED) - {"builtins"}

_OPENERS = {"builtins.open", "io.open", "io.open_code", "os.open", "codecs.open", "tokenize.open",
            "pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath", "importlib.util.spec_from_file_location",
            "importlib.machinery.SourceFileLoader", "importlib.machinery.SourcelessFileLoader"}
_RUNS_CODE = {"builtins.exec", "builtins.eval", "builtins.compile"}
_NEVER_EXCUSED = {"reaches_evaluator", "unreadable"}
"""Means a candidate may not use even where the original does: the evaluator's package is never
the user's, and a file the check cannot read is no file it can vouch for."""
_READERS = {"read_text", "read_bytes", "open"}
_SOURCE_SUFFIXES = (".py", ".pyc", ".pyw")


def _const_str(node: ast.AST) -> Optional[str]:
    """The value of a string expression made of constants only ("run" + "ner", f"run{'ner'}",
    "".join(["run", "ner"])), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _const_str(node.left), _const_str(node.right)
        return a + b if a is not None and b is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            s = _const_str(v.value if isinstance(v, ast.FormattedValue) and v.format_spec is None
                           and v.conversion == -1 else v)
            if s is None:
                return None
            parts.append(s)
        return "".join(parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], (ast.List, ast.Tuple)):
        sep = _const_str(node.func.value)
        items = [_const_str(e) for e in node.args[0].elts]
        if sep is not None and all(i is not None for i in items):
            return sep.join(items)
    return None


def _rule(name: str) -> Optional[tuple[str, tuple[str, str]]]:
    """The rule a dotted name falls under, with the pattern that matched (the longest)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in _NAMED:
            return head, _NAMED[head]
        if i < len(parts) and head + ".*" in _NAMED:
            return head + ".*", _NAMED[head + ".*"]
    for pattern, rule in _NAMED.items():
        if pattern.endswith("*") and not pattern.endswith(".*") and name.startswith(pattern[:-1]) \
                and "." not in name[len(pattern) - 1:]:
            return pattern, rule
    return None


class _MeansScan:
    """One file's uses of the means above: ``hits`` = [(code, severity, pattern, line, what)]."""

    def __init__(self, tree: ast.Module, depth: int = 0, alias: Optional[dict[str, str]] = None):
        import builtins
        self.builtins = set(dir(builtins))
        self.depth = depth
        self.alias: dict[str, str] = dict(alias or {})
        self.bound: set[str] = set()
        self.hits: list[tuple[str, str, str, int, str]] = []
        self._names(tree)
        self._scan(tree)

    # -- what names mean in this file

    def _names(self, tree: ast.Module) -> None:
        assigns = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.alias[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.alias[top] = top
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for a in node.names:
                    if a.name != "*":
                        self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound.add(node.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound.add(node.name)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigns.append(node)
        for _ in range(2):  # f = os.fork; g = f
            for node in assigns:
                q = self.qualname(node.value)
                name = node.targets[0].id
                if q and _rule(q) and name not in self.alias:
                    self.alias[name] = q

    def qualname(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Name):
            if node.id in self.alias:
                return self.alias[node.id]
            if node.id == "__builtins__":
                return "builtins"
            if node.id in self.builtins and node.id not in self.bound:
                return "builtins." + node.id
            return None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            base, key = self.qualname(node.value), _const_str(node.slice)
            return f"{base}.{key}" if base and key else None
        if isinstance(node, ast.Call):
            fn = self.qualname(node.func)
            first = _const_str(node.args[0]) if node.args else None
            if fn == "builtins.getattr" and len(node.args) >= 2:
                base, attr = self.qualname(node.args[0]), _const_str(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if fn in ("builtins.__import__", "importlib.import_module", "importlib.__import__") and first:
                return first
            if fn in ("sys.modules.get", "sys.modules.pop", "sys.modules.setdefault") and first:
                return "sys.modules." + first
        return None

    # -- the uses

    def hit(self, rule: tuple[str, str], pattern: str, node: ast.AST, what: str) -> None:
        code, severity = rule
        self.hits.append((code, severity, pattern, getattr(node, "lineno", 0), what))

    def named(self, name: str, node: ast.AST, verb: str) -> None:
        found = _rule(name)
        parts = name.split(".")
        for i in range(1, len(parts)):  # a module re-exported by another: os.sys, threading._thread
            if found:
                break
            if parts[i] in _RULE_MODULES:
                name = ".".join(parts[i:])
                found = _rule(name)
        if found:
            pattern, rule = found
            shown = pattern.rstrip("*").rstrip(".") if pattern.endswith("*") else pattern
            if shown.startswith("builtins."):
                shown = shown[len("builtins."):]
            if shown.startswith("sys.modules.") and rule[0] == "reaches_evaluator":
                shown = f"sys.modules['{name[len('sys.modules.'):]}']"
                verb = "looks up"
            elif rule[0] == "reaches_evaluator":
                shown = f"'{name}'"
            self.hit(rule, pattern, node, f"{verb} {shown}")

    def _scan(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.named(a.name, node, "imports")
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                self.named(node.module, node, "imports")
                for a in node.names:
                    if a.name != "*":
                        self.named(f"{node.module}.{a.name}", node, "imports")
            elif isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
                q = self.qualname(node)
                if q and not (isinstance(node, ast.Name) and q == "builtins"):
                    self.named(q, node, "uses")
                if isinstance(node, ast.Attribute) and node.attr in _ATTRS:
                    self.hit(_ATTRS[node.attr], "." + node.attr, node, f"uses .{node.attr}")
                if isinstance(node, ast.Name) and node.id == "__builtins__":
                    self.hit(_ATTRS["__builtins__"], ".__builtins__", node, "uses __builtins__")
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    base = self.qualname(node.value)
                    if base == "builtins":
                        self.hit(("object_internals", "reject"), "builtins=", node,
                                 f"replaces the builtin {node.attr}")
                    elif node.attr == "__code__":
                        self.hit(("object_internals", "reject"), "__code__=", node, "replaces a function's __code__")
                if isinstance(node, ast.Call):
                    self._call(node, q)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                if v in _ATTRS:
                    self.hit(_ATTRS[v], "." + v, node, f"names the attribute '{v}'")
                if v.startswith(_EVALUATOR_PACKAGE + ".") and v.split(".")[1] in _EVALUATOR_MODULES:
                    self.hit(("reaches_evaluator", "reject"), "'runner.'", node, f"names the evaluator's module '{v}'")

    def _call(self, node: ast.Call, q: Optional[str]) -> None:
        fn = self.qualname(node.func)
        args = list(node.args) + [k.value for k in node.keywords]
        if fn == "builtins.setattr" and len(node.args) >= 2:
            base, attr = self.qualname(node.args[0]), _const_str(node.args[1])
            if base == "builtins":
                self.hit(("object_internals", "reject"), "builtins=", node, f"replaces the builtin {attr or '(a name)'}")
            elif attr == "__code__":
                self.hit(("object_internals", "reject"), "__code__=", node, "replaces a function's __code__")
        if fn in _RUNS_CODE and node.args and self.depth < 3:
            code = _const_str(node.args[0])
            if code is not None:  # exec("import runner"): what the string does counts where it is run
                try:
                    inner = _MeansScan(ast_parse(code), self.depth + 1, self.alias)
                except (SyntaxError, ValueError):
                    inner = None
                for c, sev, pattern, _line, what in inner.hits if inner else []:
                    self.hits.append((c, sev, pattern, getattr(node, "lineno", 0), f"runs code that {what}"))
        if fn in ("builtins.__import__", "importlib.import_module") and node.args:
            name = _const_str(node.args[0])
            if name is None:
                self.hit(("dynamic_import", "warning"), fn, node, f"uses {fn.replace('builtins.', '')} with a "
                         "module name computed at run time")
        reads = fn in _OPENERS or (isinstance(node.func, ast.Attribute) and node.func.attr in _READERS)
        if reads:
            for sub in ast.walk(node):
                s = _const_str(sub)
                if s and s.endswith(_SOURCE_SUFFIXES):
                    self.hit(("reads_source", "reject"), "open(.py)", node, f"reads the Python source '{s}'")
                    break
            if fn in ("builtins.open", "io.open") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, int) and not isinstance(node.args[0].value, bool):
                self.hit(("raw_fd", "reject"), "open(fd)", node, f"opens file descriptor {node.args[0].value}")
        if fn == "socket.socket" and (len(node.args) >= 4 or any(k.arg == "fileno" for k in node.keywords)):
            self.hit(("raw_socket", "reject"), "socket(fileno)", node, "makes a socket from an existing descriptor")
        if fn and fn.startswith("subprocess.") and any(
                k.arg == "pass_fds" or (k.arg == "close_fds" and isinstance(k.value, ast.Constant)
                                        and k.value.value is False) for k in node.keywords):
            self.hit(("spawns_process", "reject"), "subprocess(pass_fds)", node,
                     "hands the worker's descriptors to a child process")
        if fn and fn.startswith("ctypes.") and any(
                isinstance(s, ast.Call) and self.qualname(s.func) == "builtins.id" for a in args for s in ast.walk(a)):
            self.hit(("raw_memory", "reject"), "ctypes(id)", node, f"hands an object's address (id) to {fn}")


def _means_hits(tree: Optional[ast.Module]) -> Optional[list[tuple[str, str, str, int, str]]]:
    """The scan's hits, or None when the file is too deeply nested to read."""
    if tree is None:
        return None
    try:
        return _MeansScan(tree).hits
    except (RecursionError, MemoryError):
        return None


def means_patterns(text: str) -> frozenset[str]:
    """Which means a file uses (the rules' patterns): those of the user's own original are not
    held against a candidate that keeps them (``static_flags``' ``excused``)."""
    return _remembered(("patterns", _digest(text)), lambda: _means_patterns(text))


def _means_patterns(text: str) -> frozenset[str]:
    try:
        hits = _means_hits(ast_parse(as_imported(text)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(h[2] for h in hits or [])


def means_flags(text: str, path: str, excused: frozenset[str] = frozenset()) -> list[Flag]:
    """The means of in-process forgery that ``text`` uses: one flag per kind and severity,
    naming the first place (``path:line``) and how many more there are."""
    try:
        tree = ast_parse(as_imported(text), filename=path)
    except (SyntaxError, ValueError):
        return []  # it cannot be imported either: the worker says so, precisely
    except (RecursionError, MemoryError):
        tree = None
    return _means(tree, path, excused)


def _means(tree: Optional[ast.Module], path: str, excused: frozenset[str] = frozenset()) -> list[Flag]:
    hits = _means_hits(tree)
    if hits is None:
        return [Flag(code="unreadable", severity="reject",
                     message=f"{path}: nested too deeply for the evaluator's static check to read it; "
                             "a candidate must be code the check can read")]
    first: dict[tuple[str, str], tuple[int, str]] = {}
    lines: dict[tuple[str, str], set[int]] = {}
    for code, severity, pattern, line, what in sorted(hits, key=lambda h: h[3]):
        if severity == "reject" and pattern in excused and code not in _NEVER_EXCUSED:
            severity, what = "warning", what + " (as the original does)"
        first.setdefault((code, severity), (line, what))
        lines.setdefault((code, severity), set()).add(line)
    flags = []
    for (code, severity), (line, what) in sorted(first.items(), key=lambda kv: kv[1][0]):
        more = len(lines[(code, severity)]) - 1
        tail = f" (and {more} more line{'s' if more > 1 else ''} like it)" if more else ""
        verdict = "; a candidate may not do this" if severity == "reject" else ""
        flags.append(Flag(code=code, severity=severity,
                          message=f"{path}:{line}: {what}{tail}: {_WHY[code]}{verdict}"))
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
        flags = candidate_flags(request)
    return request, info, flags
