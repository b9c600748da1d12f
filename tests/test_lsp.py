"""The language server end to end: the real ``python -m geak_lsp`` subprocess driven over LSP by
pytest-lsp, real evaluations on the Triton CPU interpreter, the real OpenAI SDK against the
scripted LLM server on loopback.

On the CPU nothing is timed, so nothing is ever "faster". The edit path is exercised with the
GEAK loop and ``geak.applyUntimed`` on: a candidate verified correct (and, merged into the
user's file, verified again) is offered as an edit labelled "verified correct, not timed".
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lsprotocol import types as t

from conftest import ADD_RELU, ROOT, Project, kernel_variant
from llm_server import ScriptedLLM
from lsp.geak_editor import VSCODE_EXTENSION, Editor, check_wire, start, stop

aio = pytest.mark.asyncio(loop_scope="function")

WRAPPER_LINE = ADD_RELU.splitlines().index("def add_relu(x, y):")
KERNEL_LINE = ADD_RELU.splitlines().index("@triton.jit")
GOOD = "Wider blocks.\n\n```python\n" + textwrap.dedent(kernel_variant(block=512)).lstrip() + "```\n"
BASE = {"device": "interpreter", "trials": 1, "workers": 2}


def llm_settings(**more):
    return {"geak": {**BASE, "strategy": "llm", "provider": "openai", "model": "scripted", "iterations": 1,
                     "applyUntimed": True, **more}}


@pytest.fixture
def proj(tmp_path) -> Project:
    return Project(tmp_path).write("k.py", ADD_RELU)


@pytest.fixture
def llm():
    servers = []

    def run(replies):
        s = ScriptedLLM(replies).start()
        servers.append(s)
        return {"OPENAI_BASE_URL": s.openai_base_url, "OPENAI_API_KEY": "test-key"}

    yield run
    for s in servers:
        s.stop()


def messages(ed: Editor) -> list[str]:
    return [m.message for m in ed.client.messages]


@aio
async def test_optimize_end_to_end_progress_edit_diagnostics_hover(proj, llm):
    env = llm([{"text": GOOD}])
    ed = await start(proj.root, init=llm_settings(), env=env)
    try:
        uri = ed.open(proj.root / "k.py")
        acts = await ed.actions(uri, WRAPPER_LINE + 1)
        assert [a.title for a in acts] == ["Optimize with GEAK", "Benchmark with GEAK"]
        opt = acts[0]
        assert opt.command.command == "geak.optimize" and opt.edit is None
        started = await ed.execute(opt.command)
        token = started["token"]
        end = await ed.job_end(token)
        reports = [v for v in ed.progress(token)]
        assert isinstance(reports[0], t.WorkDoneProgressBegin) and reports[0].cancellable
        texts = [v.message for v in reports if isinstance(v, t.WorkDoneProgressReport)]
        assert any(m.startswith("checking the original") for m in texts), texts
        assert any(m.startswith("iteration 1/1") and "verified" in m for m in texts), texts
        assert "applied" in end.message, end.message
        # The edit: asked for confirmation through a change annotation, made for the version
        # the job started from, replacing the wrapper only.
        assert len(ed.applied) == 1
        edit = ed.applied[0].edit
        ann = edit.change_annotations["geak-result"]
        assert ann.needs_confirmation and ann.label == "Apply GEAK result (verified correct, not timed)"
        dc = edit.document_changes[0]
        assert dc.text_document.version == 1 and all(e.annotation_id == "geak-result" for e in dc.edits)
        new = ed.text(uri)
        assert "add_relu_kernel[(triton.cdiv(n, 512),)](x, y, out, n, BLOCK=512)" in new
        assert "INPUT_CASES = [dict(n=300), dict(n=2048)]" in new and "def get_inputs(n=300):" in new
        assert new.count("def add_relu_kernel") == 1
        # Diagnostics: the verified (not timed) result, on the wrapper's name, not stale.
        diags = await ed.until(lambda: [d for d in ed.diagnostics(uri) if d.code == "not-timed"], 10, "diagnostics")
        d = diags[0]
        assert d.severity == t.DiagnosticSeverity.Information and d.source == "geak"
        assert "verified correct" in d.message and "not timed" in d.message and "faster" not in d.message
        assert d.range.start.line == WRAPPER_LINE
        # Hover on the kernel: the measurement of the code now in the file.
        h = await ed.hover(uri, KERNEL_LINE)
        assert "optimize run on **Triton CPU interpreter**" in h and "stale" not in h
        assert re.search(r"\n```text\ncase +shapes +result +ms +% of peak\n"
                         r"n=300 +x: float32\[300\], y: float32\[300\] +pass +", h), h
        assert "--runner" not in h and "GEAK_RUNNER_URL" not in h and "geak.runner.url" in h
        # Persisted in the workspace, keyed by source hash and device.
        doc = json.loads((proj.root / ".geak" / "lsp-results.json").read_text())
        kinds = {(r["kind"], r["device"]) for r in doc["records"]}
        assert kinds == {("optimize", "Triton CPU interpreter")} and len(doc["records"]) == 2
        assert len({r["source_hash"] for r in doc["records"]}) == 2
        # Editing the kernel marks the findings stale.
        ed.change(uri, new.replace("tl.maximum(x + y, 0.0)", "tl.maximum(y + x, 0.0)"))
        await ed.until(lambda: any(x.message.startswith("stale") for x in ed.diagnostics(uri)), 10, "stale")
        assert "**stale**" in await ed.hover(uri, KERNEL_LINE)
    finally:
        await stop(ed)


@aio
async def test_benchmark_fills_the_hover_and_torch_stays_out_of_the_server(proj):
    ed = await start(proj.root, init={"geak": BASE})
    try:
        uri = ed.open(proj.root / "k.py")
        acts = await ed.actions(uri, KERNEL_LINE + 3)  # inside the kernel
        assert acts[1].title == "Benchmark with GEAK"
        assert "Not measured yet" in await ed.hover(uri, KERNEL_LINE)
        info = await ed.info()
        assert info["imported"]["torch"] is False and info["imported"]["triton"] is False
        started = await ed.execute(acts[1].command)
        end = await ed.job_end(started["token"])
        assert "correct on 2 case(s) on the Triton CPU interpreter" in end.message and "not timed" in end.message
        h = await ed.hover(uri, KERNEL_LINE + 1)
        assert "benchmark on **Triton CPU interpreter**" in h
        assert "ahead-of-time compile for sm_90 (compiled for that GPU here, without running on it" in h and re.search(r"\nadd_relu_kernel +BLOCK=256, warps=4", h)
        diags = await ed.until(lambda: ed.diagnostics(uri), 10, "diagnostics")
        assert diags[0].code == "benchmark" and diags[0].severity == t.DiagnosticSeverity.Information
        info = await ed.info()
        assert info["imported"]["torch"] is False, "the server imported torch: it belongs in the workers"
    finally:
        await stop(ed)


@aio
async def test_cancel_from_the_progress_token_and_by_geak_cancel_while_the_server_answers(proj):
    # The tuner on a space of many configs: long enough to cancel in the middle.
    ed = await start(proj.root, init={"geak": {**BASE, "maxConfigs": 40, "workers": 1}})
    try:
        uri = ed.open(proj.root / "k.py")
        opt = await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")
        started = await ed.execute(opt.command)
        token = started["token"]
        await ed.until(lambda: any(isinstance(v, t.WorkDoneProgressReport) and (v.message or "").startswith(
                                       "checking launch settings on the Triton CPU interpreter (compile report for sm_90")
                                   for v in ed.progress(token)) or None, 90, "the tuning to start")
        # The server answers while the job runs.
        t0 = time.monotonic()
        assert "Not measured yet" in await ed.hover(uri, KERNEL_LINE)
        acts = await ed.actions(uri, WRAPPER_LINE)
        assert time.monotonic() - t0 < 2.0
        assert "Cancel GEAK job on add_relu" in [a.title for a in acts]
        assert any(a.disabled and "already running" in a.disabled.reason for a in acts if a.title == "Optimize with GEAK")
        info = await ed.info()
        assert [j["state"] for j in info["jobs"]] == ["running"]
        ed.client.window_work_done_progress_cancel(t.WorkDoneProgressCancelParams(token=token))
        end = await ed.job_end(token, timeout=10)
        assert end.message == "cancelled"
        n = len(ed.progress(token))
        await asyncio.sleep(1.5)  # the job's thread stops at its next evaluation and reports nothing more
        assert len(ed.progress(token)) == n and isinstance(ed.progress(token)[-1], t.WorkDoneProgressEnd)
        info = await ed.info()
        assert [j["state"] for j in info["jobs"]] == ["cancelled"]
        assert not ed.applied
        # Again, cancelled by the command this time.
        started = await ed.execute(opt.command)
        res = await ed.execute(t.Command(title="cancel", command="geak.cancel", arguments=[started["job"]]))
        assert res == {"cancelled": [started["job"]]}
        assert (await ed.job_end(started["token"], timeout=10)).message == "cancelled"
    finally:
        await stop(ed)


@aio
async def test_jobs_beyond_geak_max_jobs_wait_their_turn(proj):
    proj.write("k2.py", ADD_RELU)
    ed = await start(proj.root, init={"geak": {**BASE, "maxJobs": 1}})
    try:
        uris = [ed.open(proj.root / "k.py"), ed.open(proj.root / "k2.py")]
        started = []
        for uri in uris:
            bench = await ed.action(uri, WRAPPER_LINE, "Benchmark with GEAK")
            started.append(await ed.execute(bench.command))
        second = [v.message for v in ed.progress(started[1]["token"])]
        await ed.until(lambda: any("queued: 1 GEAK job(s) ahead (geak.maxJobs = 1)" in (v.message or "")
                                   for v in ed.progress(started[1]["token"])), 10, f"queued, got {second}")
        ends = [await ed.job_end(s["token"]) for s in started]
        assert all("correct on 2 case(s)" in e.message for e in ends)
        info = await ed.info()
        assert [j["state"] for j in info["jobs"]] == ["done", "done"]
    finally:
        await stop(ed)


@aio
async def test_a_document_edited_during_the_job_is_not_touched_and_the_result_is_offered(proj, llm):
    env = llm([{"text": GOOD, "delay_s": 2}])
    ed = await start(proj.root, init=llm_settings(), env=env)
    try:
        uri = ed.open(proj.root / "k.py")
        opt = await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")
        started = await ed.execute(opt.command)
        edited = ed.text(uri) + "\n# a note the user typed while GEAK ran\n"
        ed.change(uri, edited)
        end = await ed.job_end(started["token"])
        assert "not applied: the document changed while GEAK ran" in end.message
        assert not ed.applied and ed.text(uri) == edited
        diag = await ed.until(lambda: [d for d in ed.diagnostics(uri) if d.code == "not-applied"], 10, "why")
        assert diag[0].severity == t.DiagnosticSeverity.Warning
        apply = await ed.action(uri, WRAPPER_LINE, "Apply GEAK result")
        assert apply.title == "Apply GEAK result (verified correct, not timed)"
        assert apply.edit.document_changes[0].text_document.version == 2
        # Choosing the action is the confirmation: no second one (VS Code would show its refactor
        # preview with the edit unchecked).
        assert not any(a.needs_confirmation for a in apply.edit.change_annotations.values())
        assert ed.apply(apply.edit)
        assert "BLOCK=512" in ed.text(uri) and ed.text(uri).endswith("# a note the user typed while GEAK ran\n")
        await ed.until(lambda: not [d for d in ed.diagnostics(uri) if d.code == "not-applied"], 10, "cleared")
        assert [d.code for d in ed.diagnostics(uri)] == ["not-timed"]
        # Applied: the offer is gone.
        assert not [a for a in await ed.actions(uri, WRAPPER_LINE) if a.title.startswith("Apply GEAK")]
    finally:
        await stop(ed)


@aio
async def test_failed_candidates_never_warn_on_the_users_code_and_go_once_a_result_is_applied(proj, llm):
    """A failed candidate is about GEAK's attempts: while the result waits (declined in the
    preview) it is a Hint, never a Warning; once the result is applied it is gone."""
    env = llm([{"text": GOOD}, {"text": WRONG}])
    ed = await start(proj.root, init=llm_settings(parallel=2), env=env)
    ed.accept_edits = False
    try:
        uri = ed.open(proj.root / "k.py")
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")).command)
        await ed.job_end(started["token"])
        failed = await ed.until(lambda: [d for d in ed.diagnostics(uri) if d.code == "candidates-failed"], 10, "diags")
        assert failed[0].severity == t.DiagnosticSeverity.Hint and "1 candidate(s) failed" in failed[0].message
        assert not [d for d in ed.diagnostics(uri) if d.severity in (t.DiagnosticSeverity.Warning,
                                                                     t.DiagnosticSeverity.Error)]
        apply = await ed.action(uri, WRAPPER_LINE, "Apply GEAK result")
        assert ed.apply(apply.edit)
        await ed.until(lambda: not [d for d in ed.diagnostics(uri) if d.code == "candidates-failed"], 10, "cleared")
        assert [d.code for d in ed.diagnostics(uri)] == ["not-timed"]
    finally:
        await stop(ed)


@aio
async def test_a_file_that_does_not_parse_gets_reasons_not_a_crash(proj):
    ed = await start(proj.root, init={"geak": BASE})
    try:
        uri = ed.open(proj.root / "k.py")
        assert len(await ed.actions(uri, WRAPPER_LINE)) == 2
        broken = ed.text(uri).replace("def add_relu(x, y):", "def add_relu(x, y)")
        ed.change(uri, broken)
        acts = await ed.actions(uri, WRAPPER_LINE)  # the last good tree
        assert [a.title for a in acts] == ["Optimize with GEAK", "Benchmark with GEAK"]
        assert all(a.disabled and "does not parse (line" in a.disabled.reason for a in acts)
        assert await ed.hover(uri, KERNEL_LINE) is not None
        res = await ed.execute(acts[0].command)
        assert "does not parse" in res["error"] and "nothing was run" in res["error"]
        assert any("does not parse" in m for m in messages(ed))
        # A file that never parsed, a NUL byte, an empty file: nothing to offer, no error.
        for text in ("def f(:\n", "x = 1\x00\n", ""):
            u = ed.open(proj.root / "other.py", text)
            assert await ed.actions(u, 0) == [] and await ed.hover(u, 0) is None
        assert (await ed.info())["version"]
    finally:
        await stop(ed)


@aio
async def test_invalid_settings_are_named_and_replaced_by_defaults(proj):
    ed = await start(proj.root, init={"geak": {"iterations": "many", "maxJobs": 0, "strategy": "fast",
                                               "runner": {"url": "ftp://x"}, "colour": "blue"}},
                     configuration={"parallel": 3, "device": "gpu"})
    try:
        await ed.until(lambda: len(ed.client.messages) >= 2, 10, "messages")
        text = "\n".join(messages(ed))
        for needle in ("geak.iterations: expected an integer from 1 to 100, got 'many'; using the default 3",
                       "geak.maxJobs: expected an integer from 1 to 16, got 0",
                       "geak.strategy: expected one of 'auto', 'tune', 'llm', 'compile', got 'fast'",
                       "geak.runner.url: expected 'local', an http(s):// URL",
                       "geak.colour: unknown setting", "geak.device: expected one of 'auto', 'cuda', 'interpreter', got 'gpu'"):
            assert needle in text, (needle, text)
        s = (await ed.info())["settings"]
        assert (s["iterations"], s["max_jobs"], s["strategy"], s["runner_url"], s["parallel"], s["device"]) == \
            (3, 2, "auto", None, 3, "auto")
        # A later configuration change is validated the same way.
        ed.client.set_configuration({"parallel": 2, "provider": "nobody"}, section="geak")
        ed.client.workspace_did_change_configuration(t.DidChangeConfigurationParams(settings=None))
        await ed.until(lambda: any("geak.provider: expected one of 'openai', 'anthropic' or null" in m
                                   for m in messages(ed)), 10, "the new message")
        assert (await ed.info())["settings"]["parallel"] == 2
    finally:
        await stop(ed)


@aio
async def test_add_geak_inputs_scaffolds_get_inputs_from_the_signature(tmp_path):
    p = Project(tmp_path).write("k.py", ADD_RELU.split("INPUT_CASES")[0])
    ed = await start(p.root, init={"geak": BASE})
    try:
        uri = ed.open(p.root / "k.py")
        acts = await ed.actions(uri, WRAPPER_LINE)
        add = [a for a in acts if a.title == "Add GEAK inputs"]
        assert add and add[0].edit is not None
        assert ed.apply(add[0].edit)
        text = ed.text(uri)
        compile(text, "k.py", "exec")
        assert "def get_inputs(n=1024):" in text and "return [x, y]" in text
        assert 'x = torch.randn(n, device="cuda", dtype=torch.float32)' in text
        assert "Add GEAK inputs" not in [a.title for a in await ed.actions(uri, WRAPPER_LINE)]
    finally:
        await stop(ed)


def test_geak_lsp_starts_without_torch():
    """`python -X importtime -m geak_lsp --help`: the server's whole import graph, no torch, no triton."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import geak_lsp.server"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mods = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "geak_lsp.server" in mods and "pygls.lsp.server" in mods
    assert not {m for m in mods if m.split(".")[0] in ("torch", "triton", "numpy")}


@aio
async def test_geak_lsp_over_tcp(proj):
    """`geak-lsp --tcp --host H --port P`: the same server on a socket."""
    import socket

    from pygls.lsp.client import LanguageClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "geak_lsp", "--tcp", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    c = LanguageClient("tcp-test", "1")
    try:
        for attempt in range(150):  # the first connection is the session: no probing
            try:
                await c.start_tcp("127.0.0.1", port)
                break
            except OSError:
                if attempt == 149:
                    raise
                await asyncio.sleep(0.1)
        res = await c.initialize_async(t.InitializeParams(capabilities=t.ClientCapabilities(),
                                                          root_uri=proj.root.as_uri()))
        assert res.server_info.name == "geak-lsp"
        assert {"geak.optimize", "geak.benchmark", "geak.cancel"} <= set(res.capabilities.execute_command_provider.commands)
        uri = (proj.root / "k.py").as_uri()
        c.text_document_did_open(t.DidOpenTextDocumentParams(text_document=t.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=ADD_RELU)))
        pos = t.Position(line=WRAPPER_LINE, character=0)
        acts = await c.text_document_code_action_async(t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=pos, end=pos),
            context=t.CodeActionContext(diagnostics=[])))
        assert [a.title for a in acts] == ["Optimize with GEAK", "Benchmark with GEAK"]
        await c.shutdown_async(None)
        c.exit(None)
        assert proc.wait(timeout=10) == 0
    finally:
        await c.stop()
        if proc.poll() is None:
            proc.kill()


WRONG = "Subtracted by mistake.\n\n```python\n" + textwrap.dedent(
    kernel_variant(block=512, value="tl.maximum(x - y, 0.0)")).lstrip() + "```\n"


@aio
async def test_results_view_data_job_end_and_the_links_to_it(proj, llm):
    """What the VS Code extension's results view shows comes from geak.results: every candidate
    with its verdict and per-case results, the original's cases. A client that declares
    geakShowResults gets a "Show GEAK results" quick fix and a hover link; one that declares
    geakJobEnd gets geak/jobEnd once per job (and no popup of its own for a failed job); one that
    declares geakJobStatus gets each job's status as numbers (geak/jobStatus)."""
    env = llm([{"text": GOOD}, {"text": WRONG}])
    # geak.arch names a GPU, so the results view gets what changed in compiled terms (on the
    # interpreter with no arch it goes without: tests/test_lsp_compiled.py).
    ed = await start(proj.root, init=llm_settings(parallel=2, arch="sm_90"), env=env, capabilities=VSCODE_EXTENSION)
    try:
        uri = ed.open(proj.root / "k.py")
        assert [a.title for a in await ed.actions(uri, WRAPPER_LINE)] == ["Optimize with GEAK", "Benchmark with GEAK"]
        assert ed.initialize_result.capabilities.experimental == {"geakResults": True, "geakJobEnd": True,
                                                                  "geakJobStatus": True, "geakCompiledCode": True}
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")).command)
        # For this client the job's progress ends when the result waits for review; the outcome
        # (after the choice) comes in geak/jobEnd.
        assert (await ed.job_end(started["token"])).message == "result ready: review it, then apply or discard"
        end = await ed.until(lambda: ed.job_ends, 10, "geak/jobEnd")
        assert len(end) == 1 and end[0]["job"] == started["job"] and end[0]["outcome"] == "not-timed"
        assert end[0]["results"] is True and end[0]["message"].startswith("applied: iteration 1, candidate ")
        res = await ed.execute(t.Command(title="r", command="geak.results", arguments=[{"uri": uri, "name": "add_relu"}]))
        assert res["symbol"] == "add_relu" and res["path"] == "k.py" and len(res["runs"]) == 1
        # What the extension's types say it gets (one schema for both sides, tests/test_wire.py).
        check_wire("Results", res)
        for payload in ed.job_statuses:
            check_wire("JobStatus", payload)
        for payload in ed.job_ends:
            check_wire("JobEnd", payload)
        run = res["runs"][0]
        assert (run["strategy"], run["outcome"], run["device"]) == ("llm", "not-timed", "Triton CPU interpreter")
        assert run["result_hash"] == res["source_hash"], "the applied result is the code now"
        # What changed in compiled terms (the results view's section): the block size, for sm_90.
        comp = run["compiled"]
        assert (comp["arch"], comp["stage"]) == ("sm_90", "sass") and comp["kernels"]
        for k in comp["kernels"]:  # n=300 and n=2048 may specialise differently (2048 divides by 16)
            assert (k["kernel"], k["side"], k["error"]) == ("add_relu_kernel", "both", None)
            assert k["config"].startswith("BLOCK=256") and "-> BLOCK=512" in k["config"], k["config"]
            labels = {r[0] for r in k["rows"]}
            assert labels >= {"registers", "spills (bytes)", "instructions"} and any("global loads" in x for x in labels)
        assert len({k["config"] for k in comp["kernels"]}) == len(comp["kernels"])
        # The job's status, as numbers: running through its stages, then done; two candidates,
        # one verified; no speedup, since nothing is timed on the CPU.
        mine = [s for s in ed.job_statuses if s["job"] == started["job"]]
        assert mine[0]["state"] in ("queued", "running") and mine[-1]["state"] == "done"
        assert {"original", "search", "iteration"} <= {s["stage"] for s in mine}
        last = [s for s in mine if s["stage"] == "iteration"][-1]
        assert (last["evaluated"], last["verified"], last["done"], last["total"]) == (2, 1, 1, 1)
        assert all(s["bestSpeedup"] is None for s in mine) and mine[-1]["token"] == started["token"]
        assert [c["label"] for c in run["original"]] == ["n=300", "n=2048"] and all(c["passed"] for c in run["original"])
        cands = sorted(run["candidates"], key=lambda c: c["verdict"])
        assert [c["label"] for c in sorted(run["candidates"], key=lambda c: c["label"])] == [
            "iteration 1, candidate 1", "iteration 1, candidate 2"]
        assert [(c["verdict"], c["correct"], c["chosen"]) for c in cands] == [("mismatch", False, False),
                                                                             ("verified", True, True)]
        assert all(c["passed"] for c in cands[1]["cases"]) and len(cands[1]["cases"]) == 2
        assert not cands[0]["cases"][0]["passed"] and cands[0]["cases"][0]["max_abs_err"] > 0
        assert cands[1]["speedup"] is None  # nothing is timed on the CPU
        # No internal ids in what people read.
        # The result is applied: no word of the failed candidate stays on the code (the results
        # view has it), and nothing there reads as a problem of the user's code.
        diags = await ed.until(lambda: [d for d in ed.diagnostics(uri) if d.code == "not-timed"], 10, "diags")
        assert [d.code for d in ed.diagnostics(uri)] == ["not-timed"], ed.diagnostics(uri)
        assert diags[0].severity == t.DiagnosticSeverity.Information
        assert not [d for d in ed.diagnostics(uri) if "i00-c" in d.message] and "i00-c" not in end[0]["message"]
        # The ways to the view: a quick fix on the diagnostic, and a link in the hover.
        for only in (None, [t.CodeActionKind.QuickFix]):
            pos = t.Position(line=WRAPPER_LINE, character=4)
            got = await ed.client.text_document_code_action_async(t.CodeActionParams(
                text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=pos, end=pos),
                context=t.CodeActionContext(diagnostics=diags, only=only)))
            show = [a for a in got if a.title == "Show GEAK results for add_relu"]
            assert show and show[0].command.command == "geak.showResults", [a.title for a in got]
            assert list(show[0].command.arguments) == [{"uri": uri, "name": "add_relu"}] and show[0].diagnostics
        assert "[Show GEAK results](command:geak.showResults?" in await ed.hover(uri, WRAPPER_LINE)
        # A job that fails: geak/jobEnd says so, and the server does not pop up a message itself.
        proj.write("pyproject.toml", "[project]\nname = 'userproj'\n[tool.geak]\nbogus = 1\n")
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Benchmark with GEAK")).command)
        await ed.job_end(started["token"])
        end = await ed.until(lambda: ed.job_ends[1:], 10, "the second geak/jobEnd")
        assert end[0]["outcome"] == "error" and "bogus" in end[0]["message"] and end[0]["results"] is False
        assert not [m for m in ed.client.messages if "bogus" in m.message and isinstance(m, t.ShowMessageParams)]
    finally:
        await stop(ed)


@aio
async def test_other_clients_get_no_links_to_a_view_they_do_not_have(proj, llm):
    env = llm([{"text": GOOD}])
    ed = await start(proj.root, init=llm_settings(), env=env)
    try:
        uri = ed.open(proj.root / "k.py")
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")).command)
        await ed.job_end(started["token"])
        assert not ed.job_ends
        assert "Show GEAK results" not in " ".join(a.title for a in await ed.actions(uri, WRAPPER_LINE))
        assert "command:" not in await ed.hover(uri, WRAPPER_LINE)
        res = await ed.execute(t.Command(title="r", command="geak.results", arguments=[{"uri": uri, "name": "add_relu"}]))
        assert len(res["runs"]) == 1  # the data is there for any client that asks
        # On the interpreter with no geak.arch there is no GPU to compile for: no compiled difference.
        assert res["runs"][0]["compiled"] is None
    finally:
        await stop(ed)


@aio
async def test_apply_untimed_with_the_tuner_says_it_is_for_the_geak_loop(proj):
    """On the CPU the tuner has no timings to choose a config by: geak.applyUntimed cannot make
    it offer one, and the end of the job says so (so does the setting's description)."""
    ed = await start(proj.root, init={"geak": {**BASE, "strategy": "tune", "maxConfigs": 1, "applyUntimed": True}})
    try:
        uri = ed.open(proj.root / "k.py")
        started = await ed.execute((await ed.action(uri, WRAPPER_LINE, "Optimize with GEAK")).command)
        end = await ed.job_end(started["token"], timeout=120)
        assert "no verified improvement (timing needs a GPU)" in end.message
        assert "geak.applyUntimed offers untimed results of the GEAK loop only" in end.message
        assert not ed.applied
    finally:
        await stop(ed)


TORCH_FN = '''import torch


def gelu_sum(x, y):
    """gelu(x * y + 1), summed over the last dimension."""
    return torch.nn.functional.gelu(x * y + 1).sum(-1)


def get_inputs(n=16, m=40):
    return [torch.randn(n, m, device="cuda"), torch.randn(n, m, device="cuda")]


INPUT_CASES = [dict(n=16, m=40), dict(n=7, m=130)]
'''


@aio
async def test_a_pytorch_function_with_no_key_gets_a_verified_triton_rewrite(tmp_path):
    """No provider, strategy auto, no GPU: PyTorch's compiler writes the Triton, the edit is
    offered as verified correct and not timed, and the file then holds the kernel."""
    proj = Project(tmp_path).write("fused.py", TORCH_FN)
    ed = await start(proj.root, init={"geak": {**BASE}})
    try:
        uri = ed.open(proj.root / "fused.py")
        line = TORCH_FN.splitlines().index("def gelu_sum(x, y):")
        started = await ed.execute((await ed.action(uri, line, "Optimize with GEAK")).command)
        end = await ed.job_end(started["token"], timeout=240)
        assert "applied" in end.message and "standalone Triton file" in end.message, end.message
        new = ed.text(uri)
        assert "@triton.jit" in new and "torch._inductor" not in new
        assert "def gelu_sum(x, y):" in new and "def get_inputs(n=16, m=40):" in new
        label = ed.applied[0].edit.change_annotations["geak-result"].label
        assert "verified correct, not timed" in label, label
    finally:
        await stop(ed)
