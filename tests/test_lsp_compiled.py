"""The compiled view over LSP: the real ``python -m geak_lsp`` driven by pytest-lsp, the target's
launches recorded on the Triton CPU interpreter and compiled ahead of time (no GPU) for sm_90
and gfx942, with Triton's own line info mapping the listing to the source and back."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams

from conftest import ADD_RELU, Project
from lsp.geak_editor import VSCODE_EXTENSION, check_wire, start, stop

aio = pytest.mark.asyncio(loop_scope="function")
INIT = {"geak": {"device": "interpreter", "trials": 1, "workers": 2}}
SRC = ADD_RELU.splitlines()
KERNEL_DEF = next(i for i, s in enumerate(SRC) if s.startswith("def add_relu_kernel"))
LOADS = [i for i, s in enumerate(SRC) if "tl.load(" in s]
STORE = next(i for i, s in enumerate(SRC) if "tl.store(" in s)
NO_WRAPPER = ADD_RELU + '''

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(
        x_ptr + offs,
        mask=offs < n,
    )
    tl.store(out_ptr + offs, x * 2.0, mask=offs < n)


def scale(x, y):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out

@triton.jit
def lonely_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
'''


def compiled(uri: str, name: str, **more) -> t.Command:
    return t.Command(title="c", command="geak.compiledCode", arguments=[{"uri": uri, "name": name, **more}])


def has(lines: list[str], op: str) -> bool:
    """An instruction of ``lines`` is ``op`` (after a predicate such as ``@!P0``)."""
    return any(re.sub(r"^@!?%?\w+\s+", "", s.strip()).startswith(op) for s in lines if not s.startswith("#"))


def following(doc: dict, source_line: int) -> list[str]:
    """What the view highlights for the cursor on ``source_line``: the listing's lines mapped to
    it, or to any line of the statement it is part of."""
    a, b = next(((a, b) for a, b in doc["spans"] if a <= source_line <= b), (source_line, source_line))
    text = doc["text"].splitlines()
    return [text[i] for i, src in enumerate(doc["lines"]) if a <= src <= b]


@pytest.fixture
def proj(tmp_path) -> Project:
    return Project(tmp_path).write("k.py", NO_WRAPPER)


@aio
async def test_the_compiled_view_maps_sass_ptx_and_amdgcn_to_source_lines_and_back(proj):
    ed = await start(proj.root, init=INIT, capabilities=VSCODE_EXTENSION)
    try:
        uri = ed.open(proj.root / "k.py")
        assert ed.initialize_result.capabilities.experimental["geakCompiledCode"] is True
        lenses = await ed.client.text_document_code_lens_async(t.CodeLensParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))
        assert [(lens.range.start.line, lens.command.command, lens.command.arguments[0]["name"]) for lens in lenses] == [
            (KERNEL_DEF, "geak.showCompiled", "add_relu_kernel"),
            (NO_WRAPPER.splitlines().index("def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):"), "geak.showCompiled",
             "scale_kernel"),
            (NO_WRAPPER.splitlines().index("def lonely_kernel(x_ptr, BLOCK: tl.constexpr):"), "geak.showCompiled",
             "lonely_kernel")]
        assert lenses[0].command.title == "GEAK: compiled code"
        # Before the view is opened, a kernel line has no hover (nothing is compiled on hover).
        assert await ed.hover(uri, LOADS[0]) is None

        sass = await ed.execute(compiled(uri, "add_relu_kernel"))
        check_wire("CompiledDoc", sass)
        assert (sass["arch"], sass["stage"], sass["kernels"], sass["error"]) == ("sm_90", "sass", ["add_relu_kernel"], None)
        assert sass["stages"] == ["ttir", "ttgir", "llir", "ptx", "sass"] and "gfx942" in sass["archs"]
        assert len(sass["lines"]) == len(sass["text"].splitlines())
        # Cursor on a source line -> its instructions; cursor on an instruction -> its source line.
        for line in LOADS:
            assert has(following(sass, line), "LDG"), following(sass, line)
        assert has(following(sass, STORE), "STG")
        listing = sass["text"].splitlines()
        ldg = next(i for i, s in enumerate(listing) if has([s], "LDG"))
        assert "tl.load(" in SRC[sass["lines"][ldg]]
        assert all(src == -1 for s, src in zip(listing, sass["lines"]) if s.startswith("=="))

        # The hover on a body line now says what it compiled to, with a link back to the view.
        hover = await ed.hover(uri, LOADS[0])
        assert "compiled for **sm_90** (sass)" in hover and "global load" in hover and "BLOCK=256" in hover
        assert "command:geak.showCompiled?" in hover
        assert "global store" in await ed.hover(uri, STORE)

        ptx = await ed.execute(compiled(uri, "add_relu_kernel", stage="ptx"))
        assert ptx["stage"] == "ptx" and has(following(ptx, LOADS[0]), "ld.global")
        gcn = await ed.execute(compiled(uri, "add_relu_kernel", arch="gfx942"))
        assert (gcn["arch"], gcn["stage"]) == ("gfx942", "amdgcn")
        assert gcn["stages"] == ["ttir", "ttgir", "llir", "amdgcn"]
        assert has(following(gcn, LOADS[0]), "global_load")
        assert has(following(gcn, STORE), "global_store")

        # Cached by the document's text: asking again answers at once, and an edit compiles anew.
        t0 = time.monotonic()
        again = await ed.execute(compiled(uri, "add_relu_kernel"))
        assert again == sass and time.monotonic() - t0 < 1.0

        # A load written over several lines: the cursor on any of them finds its instructions
        # (Triton gives the load the line of its mask, not of `tl.load(`).
        lines = NO_WRAPPER.splitlines()
        call = lines.index("    x = tl.load(")
        multi = await ed.execute(compiled(uri, "scale_kernel"))
        check_wire("CompiledDoc", multi)
        assert [call, call + 3] in multi["spans"]
        for line in range(call, call + 4):
            assert has(following(multi, line), "LDG"), (line, following(multi, line))
        assert "global load" in await ed.hover(uri, call) and "lines" in await ed.hover(uri, call + 2)

        # What cannot be shown is said in the user's terms; a malformed argument is an error.
        lonely = await ed.execute(compiled(uri, "lonely_kernel"))
        assert "no function in this file launches lonely_kernel" in lonely["error"]
        with pytest.raises(JsonRpcInvalidParams, match="no compile stage 'sass' for gfx942"):
            await ed.execute(compiled(uri, "add_relu_kernel", arch="gfx942", stage="sass"))
        with pytest.raises(JsonRpcInvalidParams, match="unknown arch 'sm_999'"):
            await ed.execute(compiled(uri, "add_relu_kernel", arch="sm_999"))
    finally:
        await stop(ed)


@aio
async def test_hovers_answer_while_a_compile_runs_and_other_clients_get_no_lens(proj):
    """The compile runs on a thread of its own: hovers and code actions keep answering (p95 <
    50 ms). A client without the view gets no code lens, but the data is there for it."""
    ed = await start(proj.root, init=INIT)
    try:
        uri = ed.open(proj.root / "k.py")
        assert not await ed.client.text_document_code_lens_async(t.CodeLensParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))
        job = asyncio.ensure_future(ed.execute(compiled(uri, "add_relu_kernel", arch="sm_80")))
        await asyncio.sleep(0.3)
        took = []
        while not job.done() and len(took) < 200:
            t0 = time.perf_counter()
            await ed.hover(uri, KERNEL_DEF)
            await ed.actions(uri, LOADS[0])
            took.append((time.perf_counter() - t0) / 2)
            await asyncio.sleep(0.02)
        doc = await job
        assert len(took) >= 10, "the compile ended before the editor was asked anything"
        took.sort()
        assert took[int(0.95 * (len(took) - 1))] < 0.05, took[-5:]
        assert doc["arch"] == "sm_80" and has(following(doc, LOADS[0]), "LDG")
        h = await ed.hover(uri, LOADS[0])
        assert h and "compiled for **sm_80**" in h and "command:" not in h
    finally:
        await stop(ed)
