"""What the server answers: each LSP request, notification and ``geak.*`` command, as a thin
handler over the domain modules (registered on ``server.server`` when imported)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.parse
from typing import Any

from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams

from . import __version__, actions, compiled, settings as settings_mod
from geak_lsp.errors import BadArguments, UserFacing, shown, target_argument
from geak_lsp.hover import hover_text
from geak_lsp.results import results
from geak_lsp.server import GeakServer, server


@server.feature(t.INITIALIZE)
def on_initialize(ls: GeakServer, params: t.InitializeParams):
    ls.loop = asyncio.get_running_loop()
    ls.init_options = params.initialization_options
    exp = params.capabilities.experimental
    ls.client_features = {k for k, v in exp.items() if v} if isinstance(exp, dict) else set()
    ls.apply_settings()


@server.feature(t.INITIALIZED)
async def on_initialized(ls: GeakServer, params: t.InitializedParams):
    ls.log(f"GEAK language server {__version__} ready (pid {os.getpid()}, "
           f"torch imported: {'torch' in sys.modules})")
    await pull_configuration(ls)


async def pull_configuration(ls: GeakServer) -> None:
    caps = ls.client_capabilities.workspace
    if caps is None or not caps.configuration:
        return
    try:
        got = await ls.workspace_configuration_async(t.ConfigurationParams(items=[t.ConfigurationItem(section="geak")]))
    except Exception as e:  # noqa: BLE001
        ls.log(f"GEAK: workspace/configuration failed ({e}); using initializationOptions", t.MessageType.Warning)
        return
    ls.apply_settings(got[0] if got else None)


@server.feature(t.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_config(ls: GeakServer, params: t.DidChangeConfigurationParams):
    caps = ls.client_capabilities.workspace
    if caps is not None and caps.configuration:
        await pull_configuration(ls)
    else:
        ls.apply_settings(params.settings)


@server.feature(t.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: GeakServer, params: t.DidOpenTextDocumentParams):
    uri = params.text_document.uri
    ls.index.now(uri, ls.workspace.get_text_document(uri))  # parse once, up front (large: in the background)
    ls.on_changed(uri)


@server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: GeakServer, params: t.DidChangeTextDocumentParams):
    ls.on_changed(params.text_document.uri)


@server.feature(t.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: GeakServer, params: t.DidCloseTextDocumentParams):
    ls.index.forget(params.text_document.uri)


@server.feature(t.TEXT_DOCUMENT_CODE_ACTION,
                t.CodeActionOptions(code_action_kinds=[actions.KIND_GEAK, t.CodeActionKind.QuickFix]))
async def on_code_action(ls: GeakServer, params: t.CodeActionParams):
    uri = params.text_document.uri
    doc, found = await ls.quick_targets(uri)
    if doc is None:
        return None
    if found is None:
        return actions.only([actions.still_reading(len(doc.source))], params.context.only) or None
    line = params.range.start.line
    out = actions.target_actions(found, uri, line, [j.symbol for j in ls.jobs.find(uri)])
    target = found.at_line(line)
    if target is not None:
        out += [actions.cancel_action(j.id, target.name) for j in ls.jobs.find(uri, target.evaluated)]
    apply = actions.apply_pending(ls.pending.get(uri), uri, doc, found, ls.client_capabilities.workspace, ls.log)
    if apply is not None:
        out.insert(0, apply)
    if target is not None and "geakShowResults" in ls.client_features and _has_runs(ls, uri, target.evaluated):
        out.append(actions.show_results(uri, target, params.context.diagnostics))
    return actions.only(out, params.context.only) or None


def _has_runs(ls: GeakServer, uri: str, symbol: str) -> bool:
    try:
        root, rel = ls.projects.project(uri)
    except (UserFacing, ValueError):
        return False
    return bool(ls.projects.store(root).runs(rel, symbol))


def _command_link(command: str, arg: dict) -> str:
    return f"command:{command}?{urllib.parse.quote(json.dumps([arg]))}"


@server.feature(t.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: GeakServer, params: t.HoverParams):
    uri, line = params.text_document.uri, params.position.line
    doc, found = await ls.quick_targets(uri)
    if found is None:
        return None
    target = found.at_header(line)
    if target is None:  # a kernel's body line: what it compiled to, from the compiled view's cache only
        kernel, hit = compiled.kernel_body_line(found, line), ls.compiled.for_line(uri, doc.source, line)
        if kernel is None or hit is None:
            return None
        link = _command_link(compiled.SHOW, {"uri": uri, "name": hit[0].name, "arch": hit[0].arch, "stage": hit[0].stage}) \
            if "geakShowCompiled" in ls.client_features else None
        text, lines = compiled.hover_text(hit[0], line, hit[1], link), (line, line)
    else:
        try:
            root, rel = ls.projects.project(uri)
        except (UserFacing, ValueError):
            return None
        show = "geakShowResults" in ls.client_features and ls.projects.store(root).runs(rel, target.evaluated)
        link = _command_link("geak.showResults", {"uri": uri, "name": target.name}) if show else None
        text, lines = hover_text(found, target, ls.projects.store(root), rel, results_link=link), \
            (target.header.start, target.header.end)
    return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown, value=text),
                   range=t.Range(start=t.Position(line=lines[0], character=0), end=t.Position(line=lines[1] + 1, character=0)))


@server.feature(t.TEXT_DOCUMENT_CODE_LENS, t.CodeLensOptions(resolve_provider=False))
async def on_code_lens(ls: GeakServer, params: t.CodeLensParams):
    """"GEAK: compiled code" above each Triton kernel, for a client with the compiled view."""
    doc, found = await ls.quick_targets(params.text_document.uri)
    if found is None or found.syntax_error or "geakShowCompiled" not in ls.client_features:
        return None
    from runner.aot import default_stage
    arch = ls.settings.arch
    return compiled.code_lenses(found, params.text_document.uri, f"{arch} {default_stage(arch)}" if arch else None) or None


async def _command(ls: GeakServer, kind: str, args) -> Any:
    """Arguments that do not fit are a JSON-RPC error (-32602); a job that cannot start on a
    well-formed target (the file does not parse, a job already runs on it) is said to the user
    and answered ``{"error": message}``."""
    try:
        return await ls.start_job(kind, target_argument(f"geak.{kind}", args))
    except BadArguments as e:
        raise JsonRpcInvalidParams(str(e)) from None
    except UserFacing as e:
        ls.tell(str(e))
        return {"error": str(e)}


@server.command(actions.OPTIMIZE)
async def cmd_optimize(ls: GeakServer, *args):
    return await _command(ls, "optimize", args)


@server.command(actions.BENCHMARK)
async def cmd_benchmark(ls: GeakServer, *args):
    return await _command(ls, "benchmark", args)


@server.command(actions.RESULTS)
def cmd_results(ls: GeakServer, *args):
    """geak.results {"uri", "name"}: what the results view shows. Every problem is with the
    argument (its shape, a URI that is not a file on disk): a JSON-RPC error -32602."""
    try:
        return results(target_argument("geak.results", args), ls.projects, ls.targets)
    except (UserFacing, ValueError) as e:
        raise JsonRpcInvalidParams(str(e)) from None


@server.command(compiled.CODE)
async def cmd_compiled(ls: GeakServer, *args):
    """geak.compiledCode {"uri", "name", "arch"?, "stage"?}: the compiled view's text and line
    map. A malformed argument is a JSON-RPC error -32602; a target that cannot be compiled is
    answered ``{"error": message}`` (the view shows it)."""
    try:
        return await compiled.answer(ls, args[0] if len(args) == 1 else None)
    except BadArguments as e:
        raise JsonRpcInvalidParams(str(e)) from None
    except UserFacing as e:
        return {"error": str(e)}


@server.command(actions.CANCEL)
def cmd_cancel(ls: GeakServer, *args):
    """geak.cancel JOB_ID | {"uri": ..., "name"?: ...} | nothing (every job). Anything else is
    a JSON-RPC error -32602 and cancels nothing: a malformed argument used to mean "every job"."""
    arg = args[0] if len(args) == 1 else None
    if not args:
        ids = [j.id for j in ls.jobs.active()]
    elif isinstance(arg, str):
        ids = [arg]
    elif isinstance(arg, dict) and isinstance(arg.get("uri"), str) and isinstance(arg.get("name", ""), str):
        ids = [j.id for j in ls.jobs.find(arg["uri"], arg.get("name"))]
    else:
        raise JsonRpcInvalidParams('geak.cancel: expected a job id, {"uri": ...} or no argument (every job), got '
                                   + (shown(arg) if len(args) == 1 else f"{len(args)} arguments"))
    return {"cancelled": [i for i in ids if ls.cancel_job(i, "by geak.cancel")]}


@server.command(actions.SERVER_INFO)
def cmd_info(ls: GeakServer, *args):
    return {"version": __version__, "pid": os.getpid(),
            "imported": {m: m in sys.modules for m in ("torch", "triton", "numpy", "openai", "anthropic")},
            "settings": settings_mod.as_dict(ls.settings),
            "jobs": [{"id": j.id, "kind": j.kind, "name": j.name, "state": j.state} for j in ls.jobs.jobs.values()]}


@server.feature(t.SHUTDOWN)
def on_shutdown(ls: GeakServer, *args):
    ls.jobs.shutdown()
    ls.compiled.close()
    ls.projects.close()
