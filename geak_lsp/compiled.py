"""The compiled-code view: what the compiler made of a kernel, as a document beside the source.

``geak.compiledCode {"uri", "name", "arch"?, "stage"?}`` compiles each kernel the target
launches (a kernel: through its first wrapper) with the signature, constexprs and launch
options of its recorded launches, for ``arch`` (default ``geak.arch``, else the runner's GPU,
else sm_90), and answers the listing of ``stage`` (default SASS for NVIDIA, AMDGCN for AMD)
as the text ``geak asm`` prints, with, per line of that text, the line of the document it came
from. The client shows the text read-only and maps its cursor both ways with these lines.

The compile runs where candidates run (the runner's sandboxed workers: recording the launches
runs the target's input cases), on one thread of its own so that the editor never waits on it,
and is cached by the document's text, the target, arch and stage. A hover on a kernel's body
line reads the cache only: it says what that line compiled to once the view was opened for
this text, and never starts a compile.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from geak_lsp.targets import DocumentTargets, Target, text_key

SHOW = "geak.showCompiled"
"""The client's command (a client that declares ``geakShowCompiled``): opens the view."""
CODE = "geak.compiledCode"
"""The server's command: the listing and its line map, as data."""
MAX_CACHED = 24


@dataclass
class Request:
    uri: str
    name: str
    arch: Optional[str] = None
    stage: Optional[str] = None


@dataclass
class Listing:
    """One compile of one target for one arch and stage, for one text of the document."""

    uri: str
    name: str
    symbol: str
    path: str
    arch: str
    stage: str
    text: str
    lines: list[int]
    """Per line of ``text``: the 0-based line of the document it came from, or -1."""
    spans: list[list[int]]
    """The document's statements over several lines, 0-based ``[first, last]``: the cursor on
    any of their lines stands for all of them (the compiler puts a ``tl.load(`` whose mask is on
    the next line on that line)."""
    kernels: list[str]
    error: Optional[str] = None
    per_line: dict[int, list[tuple[str, dict]]] = field(default_factory=dict)
    """0-based first line of a statement -> per launch config (its config text, the summary of
    the instructions that statement compiled to)."""

    def statement(self, line: int) -> int:
        """The first line of the statement holding ``line`` (0-based)."""
        return next((a for a, b in self.spans if a <= line <= b), line)

    def as_dict(self) -> dict:
        from runner.aot import ARCHS, STAGES
        backend = ARCHS[self.arch].backend if self.arch in ARCHS else None
        return {"uri": self.uri, "name": self.name, "symbol": self.symbol, "path": self.path, "arch": self.arch,
                "stage": self.stage, "text": self.text, "lines": self.lines, "spans": self.spans, "kernels": self.kernels,
                "error": self.error, "archs": list(ARCHS), "stages": list(STAGES[backend]) if backend else []}


class NotShown(Exception):
    """Why a target has no compiled view, in the user's words."""


def build_listing(req: Request, symbol: str, rel: str, files: dict[str, str], resources: list,
                  ran: bool, message: str, arch: str) -> Listing:
    """The document for a target from its compile reports (``EvalResult.resources``)."""
    from agent.asm import blocks, source_path, statement_of, statement_spans, summarize
    from agent.render import listing_lines
    from runner.aot import ARCHS, DEFAULT_ARCH, default_stage
    launches = [r for r in resources if r.variant is None]
    mine = [r for r in launches if r.kernel == req.name] or launches
    shown_arch = mine[0].arch if mine else (arch if arch in ARCHS else DEFAULT_ARCH)
    stage = (mine[0].listing_stage if mine and mine[0].listing_stage else
             req.stage or default_stage(shown_arch))
    what = req.name if req.name != symbol else f"the kernels {symbol} launches"
    head = [f"GEAK: {what}, compiled for {shown_arch} ({stage}) with the launches {symbol} made on its input cases",
            "one section (==) per launch config; each '#' line names the source line of the instructions under it",
            ""]
    if not mine:
        why = ("the target launched no Triton kernel" if ran else f"the target did not run: {message}")
        return Listing(req.uri, req.name, symbol, rel, shown_arch, stage, "\n".join(head + [f"nothing to show: {why}"]),
                       [-1] * (len(head) + 1), [], [], error=f"nothing to show: {why}")
    body = listing_lines(mine, files)
    text = head + [line for line, _ in body]
    lines = [-1] * len(head) + [w[1] - 1 if w is not None and w[0] == rel else -1 for _, w in body]
    spans = statement_spans(files.get(rel, ""))
    first = statement_of(spans)
    per_line: dict[int, list[tuple[str, dict]]] = {}
    for r in mine:
        if r.error or not r.listing:
            continue
        st = r.listing_stage or stage
        acc: dict[int, list[str]] = {}
        for b in blocks(r.listing, st):
            if b.line and source_path(b.file, files) == rel:
                acc.setdefault(first.get(b.line, b.line) - 1, []).extend(b.instructions)
        cfg = (", ".join(f"{n}={v}" for n, v in r.constexprs.items() if v != "None")
               + f", warps={r.num_warps}, stages={r.num_stages}").lstrip(", ")
        for line, instrs in acc.items():
            per_line.setdefault(line, []).append((f"{r.kernel} [{cfg}]", summarize(instrs, st)))
    errors = [r.error for r in mine if r.error]
    return Listing(req.uri, req.name, symbol, rel, shown_arch, stage, "\n".join(text), lines,
                   [[a - 1, b - 1] for a, b in spans], sorted({r.kernel for r in mine}),
                   error=errors[0] if errors and len(errors) == len(mine) else None, per_line=per_line)


class CompiledViews:
    """Compiles on a thread of their own, cached per (document, text, target, arch, stage).
    ``compile_fn(req, target, text) -> Listing`` does the work (the server's: a request built
    like a job's, run on the editor's runner)."""

    def __init__(self, compile_fn: Callable[[Request, Target, str], Listing]):
        self.compile_fn = compile_fn
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="geak-compiled")
        self.cache: "OrderedDict[tuple, Listing]" = OrderedDict()
        self.running: dict[tuple, concurrent.futures.Future] = {}
        self.lock = threading.Lock()

    @staticmethod
    def key(req: Request, text: str, arch: str, stage: Optional[str]) -> tuple:
        return (req.uri, text_key(text), req.name, arch, stage or "default")

    def get(self, req: Request, target: Target, text: str, arch: str) -> concurrent.futures.Future:
        """The listing (a future: from the cache at once, else compiled on the view's thread;
        one compile per key at a time)."""
        key = self.key(req, text, arch, req.stage)
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
                f: concurrent.futures.Future = concurrent.futures.Future()
                f.set_result(hit)
                return f
            if key in self.running:
                return self.running[key]
            fut = self.pool.submit(self._compile, key, req, target, text)
            self.running[key] = fut
            return fut

    def _compile(self, key: tuple, req: Request, target: Target, text: str) -> Listing:
        try:
            listing = self.compile_fn(req, target, text)
            with self.lock:
                self.cache[key] = listing
                self.cache.move_to_end(key)
                while len(self.cache) > MAX_CACHED:
                    self.cache.popitem(last=False)
            return listing
        finally:
            with self.lock:
                self.running.pop(key, None)

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running)

    def for_line(self, uri: str, text: str, line: int) -> Optional[tuple[Listing, list[tuple[str, dict]]]]:
        """The newest cached listing of this text of the document that maps ``line`` (0-based)."""
        digest = text_key(text)
        with self.lock:
            entries = [v for k, v in reversed(self.cache.items()) if k[0] == uri and k[1] == digest]
        for listing in entries:
            hit = listing.per_line.get(listing.statement(line))
            if hit:
                return listing, hit
        return None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def hover_text(listing: Listing, line: int, per_config: list[tuple[str, dict]], show_link: Optional[str]) -> str:
    """What one kernel source line compiled to, per launch config (at most 4)."""
    from agent.asm import describe
    rows = [f"{cfg}: {describe(summary)}" for cfg, summary in per_config[:4]]
    more = f"\n\n(and {len(per_config) - 4} more launch configs)" if len(per_config) > 4 else ""
    link = f"\n\n[Show compiled code]({show_link})" if show_link else ""
    first = listing.statement(line)
    end = next((b for a, b in listing.spans if a == first), first)
    where = f"line {line + 1}" if first == end else f"lines {first + 1}-{end + 1}"
    return (f"**GEAK** {where} compiled for **{listing.arch}** ({listing.stage}):\n\n```text\n"
            + "\n".join(rows) + "\n```" + more + link)


def code_lenses(found: DocumentTargets, uri: str, label: Optional[str]) -> list:
    """One lens per Triton kernel: "GEAK: compiled code (<arch stage>)" running the client's command."""
    from lsprotocol import types as t
    out = []
    for tg in found.targets:
        if tg.kind != "kernel":
            continue
        pos = t.Position(line=tg.name_line, character=tg.name_col)
        out.append(t.CodeLens(range=t.Range(start=pos, end=pos), command=t.Command(
            title="GEAK: compiled code" + (f" ({label})" if label else ""), command=SHOW, arguments=[{"uri": uri, "name": tg.name}])))
    return out


def kernel_body_line(found: DocumentTargets, line: int) -> Optional[Target]:
    """The kernel whose body holds ``line`` (below its header)."""
    tg = found.at_line(line)
    if tg is not None and tg.kind == "kernel" and tg.header.end < line <= tg.span.end:
        return tg
    return None


def parse_request(arg) -> Request:
    """``{"uri", "name", "arch"?, "stage"?}``, checked; ValueError says what is wrong."""
    from runner.aot import ARCHS, STAGES
    if not isinstance(arg, dict) or not isinstance(arg.get("uri"), str) or not isinstance(arg.get("name"), str):
        raise ValueError('expected one argument {"uri": ..., "name": ..., "arch"?: ..., "stage"?: ...}')
    arch, stage = arg.get("arch"), arg.get("stage")
    if arch is not None and arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: one of {', '.join(ARCHS)}")
    if stage is not None:
        known = STAGES[ARCHS[arch].backend] if arch else tuple(dict.fromkeys(s for v in STAGES.values() for s in v))
        if stage not in known:
            raise ValueError(f"no compile stage {stage!r}" + (f" for {arch}" if arch else "")
                             + f": one of {', '.join(known)}")
    return Request(arg["uri"], arg["name"], arch, stage)


def target_to_compile(req: Request, found: DocumentTargets) -> Target:
    """The document's target the request names, or why it has no compiled view."""
    from geak_lsp.errors import UserFacing
    if found.syntax_error:
        raise UserFacing(f"GEAK: the file does not parse ({found.syntax_error}); nothing was compiled")
    target = found.by_name(req.name)
    if target is None:
        raise UserFacing(f"GEAK: no kernel, wrapper, PyTorch function or module named '{req.name}' in this file")
    if target.kind == "kernel" and not target.wrappers:
        raise UserFacing(f"GEAK: no function in this file launches {req.name}[grid](...), so its launches "
                         "(constexprs, signature) are not known; write a wrapper that does")
    return target


def compile_listing(projects, settings, req: Request, target: Target, text: str, open_documents) -> Listing:
    """Record the target's launches on its input cases and compile them for ``req.arch``
    (resolved by the caller), on the editor's runner (``projects.runner_for``)."""
    from geak_lsp.errors import UserFacing
    root, rel = projects.project(req.uri)
    opts = projects.options(root, settings)
    opts.trials, opts.timing = 1, False
    opts.aot_arch, opts.aot_stage = req.arch, req.stage or "default"
    built = projects.request(req.uri, target.evaluated, text, opts, open_documents)
    result = projects.runner_for(settings).evaluate(built)
    if result.error is not None and result.error.kind == "runner_unavailable":
        raise UserFacing(f"GEAK: cannot run: {result.error.message}")
    return build_listing(req, target.evaluated, rel, built.files, result.resources, result.ran, result.message,
                         req.arch)


async def answer(ls, arg) -> dict:
    """geak.compiledCode for the server ``ls``: the listing of a target (compiled on the view's
    thread, or cached)."""
    import asyncio

    from geak_lsp.errors import BadArguments
    from geak_lsp.strategies import aot_arch
    try:
        req = parse_request(arg)
    except ValueError as e:
        raise BadArguments(f"{CODE}: {e}") from None
    if ls.open_document(req.uri) is None:
        raise BadArguments(f"{CODE}: {req.uri} is not open in the editor")
    doc, found = await ls.doc_targets(req.uri)
    target = target_to_compile(req, found)
    req.arch = req.arch or aot_arch(ls.projects.runner_for(ls.settings), ls.settings)
    listing = await asyncio.wrap_future(ls.compiled.get(req, target, doc.source, req.arch))
    return listing.as_dict()
