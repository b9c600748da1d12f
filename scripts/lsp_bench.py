"""Latency of the GEAK language server, measured from a client over stdio (a benchmark, not a test).

  .venv/bin/python scripts/lsp_bench.py [--lines 3000] [--requests 200] [--starts 5] [--json FILE]

1. Start: spawn ``python -m geak_lsp`` and time until the ``initialize`` result arrives (median
   of ``--starts`` fresh processes); the server then reports whether torch was imported.
2. Code action and hover latency (p50 / p95) on a generated file of ``--lines`` lines
   (add_relu-sized kernels and wrappers, one after the other):
   * ``cached``: the document does not change between requests (the syntax tree is reused);
   * ``after edit``: a ``didChange`` before each request, so each one parses the file again;
   * ``during a job``: the same, ``cached``, while a real tuning job runs on the local runner
     (worker subprocesses on the Triton CPU interpreter, so the CPU is busy), measured from
     the moment the first tuned config has been evaluated.
Nothing here touches a GPU; the numbers are the server's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as t
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent

BLOCK = '''

@triton.jit
def add_relu_kernel_{i}(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Block {i}: relu(x + y) over one contiguous block; the last one is masked."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    # one add, one max, one store per element
    out = tl.maximum(x + y, 0.0)
    tl.store(out_ptr + offs, out, mask=mask)


def add_relu_{i}(x, y):
    """Launch add_relu_kernel_{i} over x and y (same shape, contiguous)."""
    assert x.shape == y.shape
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 256),)
    add_relu_kernel_{i}[grid](x, y, out, n, BLOCK=256)
    return out


class Scale{i}(torch.nn.Module):
    def __init__(self, s: float = 2.0):
        super().__init__()
        self.s = s

    def forward(self, x):
        return torch.relu(x) * self.s
'''

HEAD = '''"""A long file of small kernels, for the language server's latency benchmark."""

import torch
import triton
import triton.language as tl
'''

TAIL = '''

INPUT_CASES = [dict(n=300)]


def get_inputs(n=300):
    return [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]
'''


def make_file(lines: int) -> str:
    parts, i = [HEAD], 0
    while sum(p.count("\n") for p in parts) < lines - TAIL.count("\n"):
        parts.append(BLOCK.format(i=i))
        i += 1
    return "".join(parts) + TAIL


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_ms": round(pct(xs, 0.5), 2), "p95_ms": round(pct(xs, 0.95), 2),
            "max_ms": round(max(xs), 2)}


def client() -> LanguageClient:
    c = LanguageClient("geak-lsp-bench", "1")

    @c.feature(t.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def create(ls, params):
        return None

    @c.feature(t.WORKSPACE_CONFIGURATION)
    def configuration(ls, params):
        return [None for _ in params.items]

    c.progress_messages = []

    @c.feature(t.PROGRESS)
    def progress(ls, params):
        v = params.value or {}
        msg = v.get("message") if isinstance(v, dict) else getattr(v, "message", None)
        if msg:
            ls.progress_messages.append(msg)

    @c.feature(t.WINDOW_SHOW_MESSAGE)
    def show(ls, params):
        print("server says:", params.message, file=sys.stderr)

    return c


CAPS = t.ClientCapabilities(window=t.WindowClientCapabilities(work_done_progress=True),
                            workspace=t.WorkspaceClientCapabilities(configuration=True, apply_edit=True))


async def start(root: Path, init: dict) -> tuple[LanguageClient, float]:
    c = client()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    await c.start_io(sys.executable, "-m", "geak_lsp", env=env)
    await c.initialize_async(t.InitializeParams(capabilities=CAPS, root_uri=root.as_uri(),
                                                initialization_options=init))
    took = (time.perf_counter() - t0) * 1000
    c.initialized(t.InitializedParams())
    return c, took


async def stop(c: LanguageClient) -> None:
    await c.shutdown_async(None)
    c.exit(None)
    await c.stop()


async def measure(c: LanguageClient, uri: str, lines: list[int], n: int, edit_text=None) -> dict:
    rng = random.Random(0)
    ca, hv = [], []
    version = [1]

    def touch():
        if edit_text is not None:
            version[0] += 1
            c.text_document_did_change(t.DidChangeTextDocumentParams(
                text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=version[0]),
                content_changes=[t.TextDocumentContentChangeWholeDocument(text=edit_text(version[0]))]))

    doc = t.TextDocumentIdentifier(uri=uri)
    for _ in range(n):
        line = rng.choice(lines)
        touch()
        p = t.Position(line=line, character=0)
        t0 = time.perf_counter()
        await c.text_document_code_action_async(t.CodeActionParams(
            text_document=doc, range=t.Range(start=p, end=p), context=t.CodeActionContext(diagnostics=[])))
        ca.append((time.perf_counter() - t0) * 1000)
        touch()
        t0 = time.perf_counter()
        await c.text_document_hover_async(t.HoverParams(text_document=doc, position=t.Position(line=line, character=4)))
        hv.append((time.perf_counter() - t0) * 1000)
    return {"code_action": summary(ca), "hover": summary(hv)}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    load0 = round(os.getloadavg()[0], 2)  # other work on the machine shows in the numbers
    tmp = Path(tempfile.mkdtemp(prefix="geak-lsp-bench-"))
    (tmp / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    text = make_file(args.lines)
    f = tmp / "long.py"
    f.write_text(text)
    n_lines = text.count("\n")
    init = {"geak": {"device": "interpreter", "workers": 1, "trials": 1, "maxConfigs": 200}}

    starts = []
    for _ in range(args.starts):
        c, took = await start(tmp, init)
        starts.append(took)
        info = await c.workspace_execute_command_async(t.ExecuteCommandParams(command="geak.serverInfo"))
        await stop(c)
    out = {"machine": f"{platform.node()}: {platform.processor() or platform.machine()}, "
                      f"{os.cpu_count()} CPU(s), Python {platform.python_version()}",
           "file_lines": n_lines, "start_to_initialize_ms": {"runs": [round(x) for x in starts],
                                                             "median": round(statistics.median(starts))},
           "torch_imported_at_start": info["imported"]["torch"]}

    c, _ = await start(tmp, init)
    uri = f.resolve().as_uri()
    c.text_document_did_open(t.DidOpenTextDocumentParams(
        text_document=t.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    src = text.splitlines()
    def_lines = [i for i, s in enumerate(src) if s.startswith("def add_relu_")] + \
                [i for i, s in enumerate(src) if s.startswith("@triton.jit")]
    await measure(c, uri, def_lines, 10)  # warm-up
    out["cached"] = await measure(c, uri, def_lines, args.requests)
    out["after_edit"] = await measure(c, uri, def_lines, max(20, args.requests // 4),
                                      edit_text=lambda v: text + f"\n# edit {v}\n")
    # During a real job: tuning the first wrapper on the local runner (CPU interpreter).
    started = await c.workspace_execute_command_async(t.ExecuteCommandParams(
        command="geak.optimize", arguments=[{"uri": uri, "name": "add_relu_0"}]))
    # Measure once configs are being evaluated (worker processes busy on the interpreter).
    t0 = time.monotonic()
    while not any(m.startswith("tuning batch") for m in c.progress_messages) and time.monotonic() - t0 < 120:
        await asyncio.sleep(0.1)
    out["during_job_waited_s"] = round(time.monotonic() - t0, 1)
    info = await c.workspace_execute_command_async(t.ExecuteCommandParams(command="geak.serverInfo"))
    running = [j["state"] for j in info["jobs"]] == ["running"]
    out["during_job"] = await measure(c, uri, def_lines, args.requests)
    info = await c.workspace_execute_command_async(t.ExecuteCommandParams(command="geak.serverInfo"))
    out["during_job"]["job_running_throughout"] = running and [j["state"] for j in info["jobs"]] == ["running"]
    await c.workspace_execute_command_async(t.ExecuteCommandParams(command="geak.cancel", arguments=[started["job"]]))
    await stop(c)

    out["load_average_1m"] = {"start": load0, "end": round(os.getloadavg()[0], 2)}
    print(json.dumps(out, indent=2))
    rows = [("", "code action p50 / p95 (ms)", "hover p50 / p95 (ms)")]
    for k in ("cached", "after_edit", "during_job"):
        rows.append((k.replace("_", " "), f"{out[k]['code_action']['p50_ms']} / {out[k]['code_action']['p95_ms']}",
                     f"{out[k]['hover']['p50_ms']} / {out[k]['hover']['p95_ms']}"))
    print(f"\nstart to initialize result: median {out['start_to_initialize_ms']['median']} ms "
          f"(torch imported: {out['torch_imported_at_start']}); file {n_lines} lines", file=sys.stderr)
    for r in rows:
        print(f"  {r[0]:<12} {r[1]:<28} {r[2]}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
