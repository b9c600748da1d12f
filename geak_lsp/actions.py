"""Code actions on a target: Optimize / Benchmark with GEAK, Add GEAK inputs, Apply GEAK result,
Cancel GEAK job.

Optimize and Benchmark carry their ``command`` in the first response (VS Code runs a code
action's command only if it came with the action). Add GEAK inputs and Apply GEAK result carry
their ``edit``.
"""

from __future__ import annotations

import enum
from typing import Optional

from lsprotocol import types as t

from geak_lsp.targets import DocumentTargets, Target

OPTIMIZE, BENCHMARK, CANCEL = "geak.optimize", "geak.benchmark", "geak.cancel"
APPLY = "geak.applyResult"
RESULTS = "geak.results"
SERVER_INFO = "geak.serverInfo"
KIND_GEAK = t.CodeActionKind.RefactorRewrite + ".geak"

TENSOR_HINTS = ("x", "y", "a", "b", "q", "k", "v", "input", "inp", "weight", "w", "bias", "out", "grad",
                "logits", "src", "dst", "tensor", "hidden")
INT_NAMES = {"n": 1024, "m": 64, "k": 64, "size": 1024, "dim": 64, "d": 64, "n_elements": 1024,
             "numel": 1024, "batch": 4, "b": 4, "h": 4, "heads": 4, "seq": 128, "seqlen": 128,
             "hidden_size": 64, "in_features": 64, "out_features": 64, "features": 64, "channels": 8}


def target_actions(doc: DocumentTargets, uri: str, line: int, running: list[str]) -> list[t.CodeAction]:
    """Optimize / Benchmark (or why not), and Add GEAK inputs, for the target under ``line``."""
    target = doc.at_line(line)
    if target is None:
        return []
    arg = {"uri": uri, "name": target.name}
    label = target.name if target.kind != "kernel" or not target.wrappers else \
        f"{target.name} (through {target.wrappers[0]})"
    disabled = None
    if doc.syntax_error:
        disabled = t.CodeActionDisabled(reason=f"the file does not parse ({doc.syntax_error})")
    elif target.kind == "kernel" and not target.wrappers:
        disabled = t.CodeActionDisabled(
            reason=f"no function in this file launches {target.name}[grid](...): write a wrapper first")
    elif target.evaluated in running or target.name in running:
        disabled = t.CodeActionDisabled(reason=f"a GEAK job is already running on {target.evaluated}")
    out = [
        t.CodeAction(title="Optimize with GEAK", kind=KIND_GEAK, disabled=disabled,
                     command=t.Command(title=f"Optimize {label} with GEAK", command=OPTIMIZE, arguments=[arg])),
        t.CodeAction(title="Benchmark with GEAK", kind=KIND_GEAK, disabled=disabled,
                     command=t.Command(title=f"Benchmark {label} with GEAK", command=BENCHMARK, arguments=[arg])),
    ]
    if not doc.conventions and not doc.syntax_error:
        edit = scaffold_inputs(doc, target, uri)
        if edit is not None:
            out.append(t.CodeAction(title="Add GEAK inputs", kind=t.CodeActionKind.QuickFix, edit=edit,
                                    is_preferred=False))
    return out


def only(acts: list[t.CodeAction], kinds: Optional[list[str]]) -> list[t.CodeAction]:
    """The actions of the kinds the client asked for (``CodeActionContext.only``): a kind
    matches itself and its sub-kinds ("refactor" takes "refactor.rewrite.geak")."""
    if not kinds:
        return acts
    wanted = [_kind(k) for k in kinds]
    return [a for a in acts if a.kind is not None and any(
        _kind(a.kind) == k or _kind(a.kind).startswith(k + ".") for k in wanted)]


def _kind(k) -> str:
    return k.value if isinstance(k, enum.Enum) else str(k)


def still_reading(chars: int) -> t.CodeAction:
    """While a large document is parsed in the background."""
    return t.CodeAction(title="Optimize with GEAK", kind=KIND_GEAK, disabled=t.CodeActionDisabled(
        reason=f"GEAK is still reading this file ({chars / 1e6:.1f} MB); try again in a moment"))


def cancel_action(job_id: str, name: str) -> t.CodeAction:
    return t.CodeAction(title=f"Cancel GEAK job on {name}", kind=KIND_GEAK,
                        command=t.Command(title="Cancel GEAK job", command=CANCEL, arguments=[job_id]))


# --------------------------------------------------------------------------- Add GEAK inputs


def _value_for(name: str, kind: str) -> Optional[str]:
    low = name.lower()
    if kind == "int" or low in INT_NAMES:
        return str(INT_NAMES.get(low, 64))
    if kind == "float" or low in ("eps", "alpha", "beta", "scale", "p", "temperature"):
        return "1e-5" if low == "eps" else "0.5"
    if kind == "bool":
        return "False"
    return None


def _arg_kinds(doc: DocumentTargets, target: Target, fn_name: str) -> list[tuple[str, str, bool]]:
    """(name, int|float|bool|tensor, has default) from the def line's text (no second parse)."""
    import ast
    src = "".join(doc.lines[target.span.start:target.span.end + 1])
    try:
        node = ast.parse(src.strip() if target.kind != "module" else src).body[0]
    except (SyntaxError, IndexError):
        try:
            import textwrap
            node = ast.parse(textwrap.dedent(src)).body[0]
        except (SyntaxError, IndexError):
            return []
    if isinstance(node, ast.ClassDef):
        node = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == fn_name), None)
        if node is None:
            return []
    args = node.args
    plain = args.posonlyargs + args.args
    n_def = len(args.defaults)
    out = []
    for i, a in enumerate(plain):
        if a.arg == "self":
            continue
        ann = ast.unparse(a.annotation) if a.annotation is not None else ""
        kind = ("int" if ann == "int" else "float" if ann == "float" else "bool" if ann == "bool" else "tensor")
        out.append((a.arg, kind, i >= len(plain) - n_def))
    return out


def scaffold_text(doc: DocumentTargets, target: Target) -> Optional[str]:
    if target.kind == "kernel":
        return None  # its wrapper is what runs; the action shows on the wrapper
    fn = "forward" if target.kind == "module" else target.name
    args = [a for a in _arg_kinds(doc, target, fn) if not a[2]]
    lines = ["", "", "# " + "-" * 75 + " GEAK inputs",
             f"# Written by \"Add GEAK inputs\" from the signature of {target.name}: make the shapes and",
             "# dtypes those of real use. Each INPUT_CASES entry is one shape checked (keep one small",
             "# case for the CPU interpreter).",
             "INPUT_CASES = [dict(n=1024), dict(n=4096)]", "", "", "def get_inputs(n=1024):"]
    body, names = [], []
    for name, kind, _ in args:
        v = _value_for(name, kind)
        if v is None:
            body.append(f"    {name} = torch.randn(n, device=\"cuda\", dtype=torch.float32)")
        else:
            body.append(f"    {name} = {v if name.lower() not in ('n', 'n_elements', 'numel', 'size') else 'n'}")
        names.append(name)
    lines += body or ["    # " + target.name + " takes no arguments"]
    lines.append(f"    return [{', '.join(names)}]")
    if target.kind == "module":
        init = [a for a in _arg_kinds(doc, target, "__init__") if not a[2]]
        lines += ["", "", "def get_init_inputs():",
                  f"    return [{', '.join(_value_for(n, k) or '64' for n, k, _ in init)}]"]
    return "\n".join(lines) + "\n"


def scaffold_inputs(doc: DocumentTargets, target: Target, uri: str) -> Optional[t.WorkspaceEdit]:
    text = scaffold_text(doc, target)
    if text is None:
        return None
    n = len(doc.lines)
    last = doc.lines[-1] if doc.lines else ""
    if last and not last.endswith("\n"):
        end = t.Position(line=n - 1, character=len(last.encode("utf-16-le")) // 2)
        text = "\n" + text
    else:
        end = t.Position(line=n, character=0)
    edits = [t.TextEdit(range=t.Range(start=end, end=end), new_text=text)]
    if not doc.has_torch_import:
        top = t.Position(line=0, character=0)
        edits.insert(0, t.TextEdit(range=t.Range(start=top, end=top), new_text="import torch\n"))
    return t.WorkspaceEdit(changes={uri: edits})


def apply_pending(pending, uri: str, doc, found: DocumentTargets, caps, log) -> Optional[t.CodeAction]:
    """"Apply GEAK result" for a result kept while the target is unchanged (``pending``:
    ``finish.Pending``); None when there is none or it no longer fits."""
    from geak_lsp.edits import MergeError, merge, workspace_edit
    if pending is None or found.syntax_error:
        return None
    cur = found.by_name(pending.job.name)
    if cur is None or found.source_hash(cur) != pending.start_hash:
        return None
    try:
        m = merge(doc.source, pending.source)
    except MergeError as e:
        log(f"GEAK: the pending result no longer merges: {e}")
        return None
    # Choosing the action is the confirmation (VS Code would open its refactor preview with
    # the edit unchecked for an annotation that needs confirmation).
    return t.CodeAction(title=pending.title, kind=KIND_GEAK, is_preferred=True,
                        edit=workspace_edit(uri, doc.version, doc.source, m, pending.title, None, caps, confirm=False))


def show_results(uri: str, target: Target, diagnostics: list) -> t.CodeAction:
    """"Show GEAK results" on a target that has runs (for a client with geak.showResults)."""
    mine = [d for d in diagnostics if d.source == "geak"]
    return t.CodeAction(title=f"Show GEAK results for {target.name}", kind=t.CodeActionKind.QuickFix,
                        diagnostics=mine or None,
                        command=t.Command(title="Show GEAK results", command="geak.showResults",
                                          arguments=[{"uri": uri, "name": target.name}]))
