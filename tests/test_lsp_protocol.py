"""The language server as a protocol peer: the transports editors' client libraries ask for,
an answer to every request (malformed ones included), ``context.only``, and huge documents.

The real ``python -m geak_lsp`` subprocess, driven by pytest-lsp (or by hand, for the pipe and
socket transports, where the client listens and the server connects)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as t
from pygls.exceptions import JsonRpcException

from conftest import ADD_RELU, ROOT, Project
from lsp.geak_editor import start, stop

aio = pytest.mark.asyncio(loop_scope="function")

WRAPPER_LINE = ADD_RELU.splitlines().index("def add_relu(x, y):")
BASE = {"geak": {"device": "interpreter", "trials": 1, "workers": 1}}
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def proj(tmp_path) -> Project:
    return Project(tmp_path).write("k.py", ADD_RELU)


# ------------------------------------------------------------------ transports


@aio
async def test_stdio_flag_that_vscode_languageclient_appends(proj):
    """vscode-languageclient starts an executable server as `command args... --stdio`."""
    ed = await start(proj.root, init=BASE, args=("--stdio",))
    try:
        uri = ed.open(proj.root / "k.py")
        assert [a.title for a in await ed.actions(uri, WRAPPER_LINE)] == ["Optimize with GEAK", "Benchmark with GEAK"]
    finally:
        await stop(ed)


def _frame(doc: dict) -> bytes:
    body = json.dumps(doc).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


async def _read_message(reader: asyncio.StreamReader) -> dict:
    length = None
    while True:
        line = await reader.readline()
        if not line:
            raise EOFError("the server closed the connection")
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif line in (b"\r\n", b"\n") and length is not None:
            return json.loads(await reader.readexactly(length))


async def _session_over(reader, writer, root: Path) -> dict:
    """initialize -> the answer; shutdown; exit. Notifications the server sends are skipped."""
    writer.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}}}))
    await writer.drain()
    while (msg := await _read_message(reader)).get("id") != 1:
        pass
    writer.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    writer.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
    await writer.drain()
    while (await _read_message(reader)).get("id") != 2:
        pass
    writer.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
    await writer.drain()
    return msg


@pytest.mark.parametrize("kind", ["pipe", "socket"])
@aio
async def test_pipe_and_socket_transports_connect_to_the_client(proj, tmp_path, kind):
    """`--pipe=NAME` and `--socket=PORT`: the client listens, the server connects to it."""
    connected: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_connect(reader, writer):
        if not connected.done():
            connected.set_result((reader, writer))

    if kind == "pipe":
        path = str(tmp_path / "geak.sock")
        listener = await asyncio.start_unix_server(on_connect, path=path)
        arg = f"--pipe={path}"
    else:
        listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        arg = f"--socket={listener.sockets[0].getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-m", "geak_lsp", arg, f"--clientProcessId={os.getpid()}"],
                            cwd=proj.root, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        reader, writer = await asyncio.wait_for(connected, 30)
        answer = await asyncio.wait_for(_session_over(reader, writer, proj.root), 30)
        assert answer["result"]["serverInfo"]["name"] == "geak-lsp"
        assert proc.wait(timeout=15) == 0
        assert proc.stdout.read() == b"", "the protocol went over the connection, not stdout"
        writer.close()
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()


def test_a_transport_that_cannot_connect_is_named():
    out = subprocess.run([sys.executable, "-m", "geak_lsp", "--pipe=/nonexistent/geak.sock"],
                         env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot connect to the client at pipe /nonexistent/geak.sock" in out.stderr


def test_the_server_leaves_when_its_client_process_is_gone(tmp_path):
    """--clientProcessId: the editor died without closing stdin; the server does not linger."""
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    proc = subprocess.Popen([sys.executable, "-m", "geak_lsp", "--stdio", f"--clientProcessId={editor.pid}"],
                            cwd=tmp_path, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        editor.wait(timeout=30)
        assert proc.wait(timeout=30) == 0
        assert b"is gone" in proc.stderr.read()
    finally:
        for p in (proc, editor):
            if p.poll() is None:
                p.kill()


# ------------------------------------------------------------------ every request answered


@aio
async def test_malformed_code_action_requests_get_invalid_params_not_silence(proj):
    ed = await start(proj.root, init=BASE)
    try:
        uri = ed.open(proj.root / "k.py")
        ctx = {"diagnostics": []}
        bad = {
            "params: null": None,
            "range not a range": {"textDocument": {"uri": uri}, "range": 5, "context": ctx},
            "negative line": {"textDocument": {"uri": uri}, "context": ctx,
                              "range": {"start": {"line": -1, "character": 0}, "end": {"line": 0, "character": 0}}},
            "no textDocument": {"range": {"start": {"line": 0, "character": 0},
                                          "end": {"line": 0, "character": 0}}, "context": ctx},
        }
        for what, params in bad.items():
            with pytest.raises(JsonRpcException) as e:
                await ed.raw_request("textDocument/codeAction", params)
            assert e.value.code == -32602, what
            assert "Invalid params for textDocument/codeAction" in e.value.message, what
        err = e.value.message
        assert "textDocument" in err, err  # says which field
        # A malformed hover too; and the server still answers well-formed requests afterwards,
        # with no "Invalid Params" popup for the user.
        with pytest.raises(JsonRpcException) as e:
            await ed.raw_request("textDocument/hover", {"textDocument": {"uri": uri}, "position": "here"})
        assert e.value.code == -32602
        good = await ed.raw_request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "context": ctx,
            "range": {"start": {"line": WRAPPER_LINE, "character": 0}, "end": {"line": WRAPPER_LINE, "character": 0}}})
        assert [a["title"] for a in good] == ["Optimize with GEAK", "Benchmark with GEAK"]
        assert not [m.message for m in ed.client.messages if "Invalid" in m.message]
    finally:
        await stop(ed)


@aio
async def test_code_actions_honour_context_only(tmp_path):
    """VS Code asks for `quickfix` only (diagnostic fixes) and drops, with a warning, actions of
    other kinds: the server sends only what was asked for."""
    Project(tmp_path).write("k.py", ADD_RELU.replace("INPUT_CASES", "CASES").replace("get_inputs", "make"))
    ed = await start(tmp_path, init=BASE)
    try:
        uri = ed.open(tmp_path / "k.py")
        pos = t.Position(line=WRAPPER_LINE, character=0)

        async def titles(only):
            got = await ed.client.text_document_code_action_async(t.CodeActionParams(
                text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=pos, end=pos),
                context=t.CodeActionContext(diagnostics=[], only=only)))
            return [(a.title, a.kind) for a in got or []]

        everything = await titles(None)
        assert [x[0] for x in everything] == ["Optimize with GEAK", "Benchmark with GEAK", "Add GEAK inputs"]
        assert await titles([t.CodeActionKind.QuickFix]) == [("Add GEAK inputs", t.CodeActionKind.QuickFix)]
        assert [x[0] for x in await titles([t.CodeActionKind.Refactor])] == ["Optimize with GEAK", "Benchmark with GEAK"]
        assert [x[0] for x in await titles(["refactor.rewrite.geak"])] == ["Optimize with GEAK", "Benchmark with GEAK"]
        assert await titles([t.CodeActionKind.SourceOrganizeImports]) == []
    finally:
        await stop(ed)


@aio
async def test_geak_cancel_with_a_malformed_argument_cancels_nothing(proj):
    """Only nothing (every job), a job id or {"uri": ...} cancel; anything else is -32602 and the
    running job runs on (it used to cancel every job)."""
    ed = await start(proj.root, init={"geak": {**BASE["geak"], "maxConfigs": 40}})
    try:
        uri = ed.open(proj.root / "k.py")
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")).command)
        for bad in ([[1, 2]], [{"uri": 5}], [{"uri": uri, "name": 7}], [5], [None], [{}], [started["job"], "x"]):
            with pytest.raises(JsonRpcException) as e:
                await ed.raw_request("workspace/executeCommand", {"command": "geak.cancel", "arguments": bad})
            assert e.value.code == -32602, bad
            assert e.value.message.startswith("geak.cancel: expected a job id, {\"uri\": ...} or no argument"), bad
        assert [j["state"] for j in (await ed.info())["jobs"]] in (["queued"], ["running"])
        assert not any(isinstance(v, t.WorkDoneProgressEnd) for v in ed.progress(started["token"]))
        # Well-formed: a job id nobody has cancels nothing; the job's own id cancels it.
        cancel = t.Command(title="cancel", command="geak.cancel", arguments=["no-such-job"])
        assert await ed.execute(cancel) == {"cancelled": []}
        cancel.arguments = [{"uri": uri}]
        assert await ed.execute(cancel) == {"cancelled": [started["job"]]}
        assert (await ed.job_end(started["token"], timeout=10)).message == "cancelled"
    finally:
        await stop(ed)


@aio
async def test_geak_commands_answer_bad_arguments_with_invalid_params(proj):
    """A geak command whose arguments do not fit is a JSON-RPC error -32602 that says what it
    takes, not a result with an "error" in it (and no popup besides)."""
    ed = await start(proj.root, init=BASE)
    try:
        uri = ed.open(proj.root / "k.py")
        target = {"uri": uri, "name": "add_relu"}
        never_opened = (proj.root / "absent.py").as_uri()
        for command in ("geak.optimize", "geak.benchmark", "geak.results"):
            for bad in ([], [None], [5], ["add_relu"], [{"uri": uri}], [{"uri": 5, "name": "add_relu"}],
                        [{"uri": uri, "name": ["add_relu"]}], [target, target]):
                with pytest.raises(JsonRpcException) as e:
                    await ed.raw_request("workspace/executeCommand", {"command": command, "arguments": bad})
                assert e.value.code == -32602, (command, bad)
                assert e.value.message.startswith(f'{command}: expected one argument {{"uri": ..., "name": ...}}'), \
                    (command, bad, e.value.message)
        for command in ("geak.optimize", "geak.benchmark"):  # a document the editor never opened
            with pytest.raises(JsonRpcException) as e:
                await ed.raw_request("workspace/executeCommand", {"command": command, "arguments": [
                    {"uri": never_opened, "name": "add_relu"}]})
            assert e.value.code == -32602 and "is not open in the editor" in e.value.message, e.value.message
        with pytest.raises(JsonRpcException) as e:  # not a file on disk
            await ed.raw_request("workspace/executeCommand", {"command": "geak.results", "arguments": [
                {"uri": "untitled:Untitled-1", "name": "add_relu"}]})
        assert e.value.code == -32602 and "save the document first" in e.value.message
        # Well-formed arguments still get results.
        res = await ed.execute(t.Command(title="results", command="geak.results", arguments=[target]))
        assert res["name"] == "add_relu" and res["runs"] == [] and "error" not in res
        assert not [m.message for m in ed.client.messages]
    finally:
        await stop(ed)


@aio
async def test_hovers_and_code_actions_on_a_document_never_opened_answer_nothing(proj):
    """pygls reads a URI the editor never opened from disk (-32603 when it is not there): such a
    request gets a null answer, whether or not the file exists."""
    ed = await start(proj.root, init=BASE)
    try:
        pos = {"line": WRAPPER_LINE, "character": 4}
        for path in (proj.root / "absent.py", proj.root / "k.py"):  # not on disk; on disk but not open
            doc = {"uri": path.as_uri()}
            assert await ed.raw_request("textDocument/hover", {"textDocument": doc, "position": pos}) is None
            assert await ed.raw_request("textDocument/codeAction", {
                "textDocument": doc, "range": {"start": pos, "end": pos}, "context": {"diagnostics": []}}) is None
        uri = ed.open(proj.root / "k.py")  # once open, it answers
        assert "Not measured yet" in await ed.hover(uri, WRAPPER_LINE)
    finally:
        await stop(ed)


# ------------------------------------------------------------------ huge documents


def _huge(target_chars: int = 6_700_000) -> str:
    """examples/softmax.py again and again under new names: about 6.7 MB, 5,000 targets."""
    src = (ROOT / "examples" / "softmax.py").read_text()
    parts, n, i = [src], len(src), 0
    while n < target_chars:
        i += 1
        parts.append(src.replace("softmax", f"softmax{i}"))
        n += len(parts[-1])
    return "".join(parts)


@aio
async def test_code_actions_and_hovers_stay_fast_on_a_huge_file(tmp_path):
    text = _huge()
    (tmp_path / "big.py").write_text(text)
    lines = text.splitlines()
    last_def = max(i for i, line in enumerate(lines) if line.startswith("def softmax") and "(x:" in line)
    ed = await start(tmp_path, init=BASE)
    try:
        uri = ed.open(tmp_path / "big.py")

        async def timed(coro):
            t0 = time.monotonic()
            out = await coro
            return out, time.monotonic() - t0

        # Right after opening: an answer at once, either the actions or "still reading".
        acts, s = await timed(ed.actions(uri, last_def + 1))
        assert s < 3.0, s
        assert acts and acts[0].title == "Optimize with GEAK"
        if acts[0].disabled:
            assert "still reading this file (6.7 MB)" in acts[0].disabled.reason
        deadline = time.monotonic() + 60
        while (await ed.actions(uri, last_def + 1))[0].disabled and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        acts, s = await timed(ed.actions(uri, last_def + 1))
        assert [a.title for a in acts] == ["Optimize with GEAK", "Benchmark with GEAK"] and not acts[0].disabled
        assert s < 1.5, s
        hover, s = await timed(ed.hover(uri, last_def))
        assert s < 1.5 and "Not measured yet" in hover, (s, hover)

        # Typing inside a line: every keystroke answered from the last tree, quickly.
        version, cur = 1, text
        worst = 0.0
        for k in range(8):
            version += 1
            col = len(lines[last_def + 2])
            ed.client.text_document_did_change(t.DidChangeTextDocumentParams(
                text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[t.TextDocumentContentChangePartial(
                    range=t.Range(start=t.Position(line=last_def + 2, character=col),
                                  end=t.Position(line=last_def + 2, character=col)), text=" ")]))
            acts, s = await timed(ed.actions(uri, last_def + 1))
            worst = max(worst, s)
            assert [a.title for a in acts][:1] == ["Optimize with GEAK"] and not acts[0].disabled
        assert worst < 2.0, worst

        # A syntax error typed into the huge file: found without parsing it block by block
        # from every block onwards (which took minutes), and the server keeps answering.
        version += 1
        ed.client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[t.TextDocumentContentChangePartial(
                range=t.Range(start=t.Position(line=last_def + 2, character=0),
                              end=t.Position(line=last_def + 2, character=0)), text="x")]))
        t0 = time.monotonic()
        while True:
            acts = await ed.actions(uri, last_def + 1)
            if acts[0].disabled and "does not parse" in acts[0].disabled.reason:
                break
            assert time.monotonic() - t0 < 20, [a.disabled for a in acts]
            await asyncio.sleep(0.1)
        assert f"line {last_def + 3}" in acts[0].disabled.reason, acts[0].disabled.reason
        _, s = await timed(ed.hover(uri, last_def))
        assert s < 1.5, s
    finally:
        await stop(ed)
