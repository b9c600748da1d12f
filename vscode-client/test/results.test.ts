import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { serverFailure, StderrTail } from "../src/errors";
import { JobEnds, jobEndMessage, SHOW_RESULTS } from "../src/jobEnd";
import { ResultsView } from "../src/results";
import { esc, resultsHtml, type Results, type RunRow } from "../src/resultsHtml";

const mock = vscode as unknown as typeof import("./vscode.mock");

const RUN: RunRow = {
  path: "k.py", name: "add_relu", symbol: "add_relu", kind: "optimize", strategy: "llm", device: "Triton CPU interpreter",
  started_at: 1_700_000_000, finished_at: 1_700_000_012, outcome: "not-timed",
  message: "iteration 1, candidate 1 is verified correct on the Triton CPU interpreter but not timed", speedup: null,
  original: [{ label: "n=300", shapes: "x: float32[300], y: float32[300]", passed: true, ref_ms: null }],
  candidates: [
    { label: "iteration 1, candidate 1", verdict: "verified", correct: true, speedup: null, message: "ok", chosen: true,
      cases: [{ label: "n=300", shapes: "", passed: true, max_abs_err: 0 }] },
    { label: "iteration 1, candidate 2", verdict: "mismatch", correct: false, speedup: null, chosen: false,
      message: "output 0 differs <b>at [3]</b>", cases: [{ label: "n=300", shapes: "", passed: false, max_abs_err: 2.5, detail: "at [3]" }] },
  ],
  notes: ["run directory .geak/runs/x"], source_hash: "h0", result_hash: "h1",
};
const RESULTS: Results = { uri: "file:///p/k.py", name: "add_relu", symbol: "add_relu", path: "k.py", source_hash: "h1", runs: [RUN] };

describe("the results page", () => {
  it("lists every candidate with its verdict, speedup and per-case results; the offered one marked", () => {
    const html = resultsHtml(RESULTS, "vscode-webview:");
    expect(html).toContain("GEAK results: <code>add_relu</code>");
    expect(html).toContain("verified correct, not timed");
    expect(html).toContain("Candidates tried <span class=\"count\">1 of 2 verified correct</span>");
    expect(html).toMatch(/iteration 1, candidate 1 <span class="tag">offered<\/span>/);
    expect(html).toContain('<span class="verdict bad">mismatch</span>');
    expect(html).toContain("not timed");
    expect(html).toContain("2.5e+0");
    expect(html).toContain("The offered result is your code now.");
    expect(html).toContain("x: float32[300], y: float32[300]");
    // Escaped, and no script.
    expect(html).toContain("output 0 differs &lt;b&gt;at [3]&lt;/b&gt;");
    expect(html).not.toMatch(/<script/i);
    expect(html).toContain("default-src 'none'");
  });

  it("a tuner run lists configs; pruned ones say they did not run; timed ones their speedup", () => {
    const run: RunRow = { ...RUN, strategy: "tune", outcome: "verified", speedup: 1.42, candidates: [
      { label: "BLOCK_SIZE=512, num_warps=8", verdict: "verified", correct: true, speedup: 1.42, message: "", chosen: true,
        cases: [{ label: "n=4096", shapes: "", passed: true, speedup: 1.5 }] },
      { label: "BLOCK_SIZE=65536, num_warps=4", verdict: "pruned", correct: false, message: "spills 64 bytes per thread on sm_90", chosen: false, cases: [] },
    ] };
    const html = resultsHtml({ ...RESULTS, runs: [run] });
    expect(html).toContain("Launch configs tried");
    expect(html).toContain("1.42x");
    expect(html).toContain("1.50x");
    expect(html).toContain("not run");
    expect(html).toContain("spills 64 bytes per thread on sm_90");
  });

  it("says in compiled terms what changed from your code to the offered result", () => {
    const run: RunRow = { ...RUN, compiled: { arch: "sm_90", stage: "sass", kernels: [
      { kernel: "add_relu_kernel", config: "BLOCK=256, warps=4, stages=3 -> BLOCK=1024, warps=4, stages=3", side: "both", error: null,
        rows: [["registers", "16", "24", true], ["spills (bytes)", "0", "0", false],
          ["global loads, vector", "0", "2", true], ["global loads, scalar", "2", "0", true]] },
      { kernel: "<helper>", config: "warps=4", side: "original", error: "ptxas <died>", rows: [] },
    ] } };
    const html = resultsHtml({ ...RESULTS, runs: [run] });
    expect(html).toContain("What the compiler made of it <span class=\"count\">sm_90 SASS, ahead of time</span>");
    expect(html).toMatch(/<tr class="changed"><td>global loads, vector<\/td><td class="num">0<\/td><td class="num">2<\/td><td>changed<\/td><\/tr>/);
    expect(html).toMatch(/<tr class=""><td>spills \(bytes\)<\/td>/);
    expect(html).toContain("BLOCK=256, warps=4, stages=3 -&gt; BLOCK=1024");
    expect(html).toContain("&lt;helper&gt;");
    expect(html).toContain("(not launched by the result)");
    expect(html).toContain("not compiled: ptxas &lt;died&gt;");
    expect(html).not.toContain("set <code>geak.arch</code>");
    expect(resultsHtml(RESULTS)).not.toContain("What the compiler made of it");
    // An offered result on the interpreter with no geak.arch: how to get the section.
    expect(resultsHtml(RESULTS)).toContain("there is no GPU to compile for: set <code>geak.arch</code>");
    const gpu = { ...RUN, device: "NVIDIA H100 80GB HBM3 (sm_90)" };
    expect(resultsHtml({ ...RESULTS, runs: [gpu] })).not.toContain("geak.arch");
  });

  it("says so when nothing ran yet, or the server could not answer", () => {
    expect(resultsHtml({ ...RESULTS, runs: [] })).toContain("No GEAK run on <code>add_relu</code> yet");
    expect(resultsHtml({ ...RESULTS, runs: [], error: "not running" })).toContain("not running");
    expect(esc(`<a href="x">'`)).toBe("&lt;a href=&quot;x&quot;&gt;&#39;");
  });

  it("the view opens once, and refreshes when a job on the shown target ends", async () => {
    mock.resetMock();
    const fetch = vi.fn(async () => RESULTS);
    const view = new ResultsView(fetch);
    await view.show({ uri: RESULTS.uri, name: "add_relu" });
    await view.show({ uri: RESULTS.uri, name: "add_relu" });
    expect(mock.panels).toHaveLength(1);
    expect(mock.panels[0].webview.html).toContain("iteration 1, candidate 2");
    fetch.mockResolvedValue({ ...RESULTS, runs: [] });
    await view.refresh({ uri: RESULTS.uri, name: "other" });
    expect(mock.panels[0].webview.html).toContain("iteration 1, candidate 2");
    await view.refresh({ uri: RESULTS.uri, name: "add_relu" });
    expect(mock.panels[0].webview.html).toContain("No GEAK run");
  });
});

describe("the end of a job, said once", () => {
  beforeEach(() => mock.resetMock());

  it("one notification with the outcome and a button to the results", async () => {
    const show = vi.fn();
    mock.window.showInformationMessage.mockResolvedValue(SHOW_RESULTS);
    const ends = new JobEnds(show, vi.fn(), vi.fn());
    ends.serverSaysEnds = true;
    ends.progressEnded("GEAK: optimizing add_relu", "result ready: review it, then apply or discard");
    ends.jobEnded({ job: "job-1", token: "geak-job-1", uri: "file:///p/k.py", name: "add_relu", kind: "optimize",
      outcome: "not-timed", message: "applied: iteration 1, candidate 1 is verified correct", results: true });
    await new Promise((r) => setTimeout(r, 10));
    expect(mock.window.showInformationMessage).toHaveBeenCalledTimes(1);
    expect(mock.window.showInformationMessage.mock.calls[0]).toEqual([
      "GEAK Optimize add_relu: applied: iteration 1, candidate 1 is verified correct", SHOW_RESULTS]);
    expect(show).toHaveBeenCalledWith({ uri: "file:///p/k.py", name: "add_relu" });
    const failed = jobEndMessage({ job: "j", token: null, uri: "u", name: "f", kind: "benchmark", outcome: "error",
      message: "GEAK: [tool.geak] bogus: unknown key", results: false });
    expect(failed).toEqual({ text: "GEAK Benchmark f: [tool.geak] bogus: unknown key", warning: true, buttons: ["Show Log"] });
  });

  it("a server without geak/jobEnd: its progress-end message is shown; a cancelled job says nothing", async () => {
    const ends = new JobEnds(vi.fn(), vi.fn(), vi.fn());
    ends.progressEnded("GEAK: optimizing f", "no verified improvement (timing needs a GPU)");
    ends.progressEnded("GEAK: optimizing f", "cancelled");
    expect(mock.window.showInformationMessage).toHaveBeenCalledTimes(1);
    expect(mock.window.showInformationMessage.mock.calls[0][0]).toBe("GEAK: optimizing f: no verified improvement (timing needs a GPU)");
  });
});

describe("why the server did not start", () => {
  it("picks the error line from the server's stderr and says what to do", () => {
    const tail = new StderrTail();
    for (const l of ["usage: geak-lsp [-h] [--tcp]", "geak-lsp: error: unrecognized arguments: --stdio", ""]) tail.push(l);
    expect(tail.reason()).toBe("geak-lsp: error: unrecognized arguments: --stdio");
    const f = serverFailure("/v/bin/python", tail.reason(), "start", "/src/geak");
    expect(f.message).toBe("GEAK: the language server did not start: geak-lsp: error: unrecognized arguments: --stdio. " +
      "The GEAK in /v/bin/python is older than this extension: update the GEAK checkout at /src/geak and reinstall it " +
      "(/v/bin/python -m pip install -e '/src/geak[lsp]'), then Restart.");
    expect(f.fix).toBe("/v/bin/python -m pip install -e '/src/geak[lsp]'");
    const t2 = new StderrTail();
    for (const l of ["Traceback (most recent call last):", '  File "x.py", line 1', "ModuleNotFoundError: No module named 'pygls'"]) t2.push(l);
    expect(serverFailure("/v/bin/python", t2.reason(), "start").message).toContain(
      "No module named 'pygls'. Install GEAK in /v/bin/python from a GEAK checkout (/path/to/geak: where yours is) " +
      "(/v/bin/python -m pip install -e '/path/to/geak[lsp]'), or set geak.interpreter");
    expect(serverFailure("/v/bin/python", undefined, "stopped").message).toBe(
      "GEAK: the language server stopped and was not restarted. Its output is in the GEAK log (/v/bin/python -m geak_lsp); geak.interpreter chooses the Python.");
  });
});
