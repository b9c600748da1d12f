/** The results view's page, from the server's geak.results answer. Pure: plain HTML (no
 * script), themed with VS Code's CSS variables, every value escaped. */

import type { CandidateRecord, CaseRecord, CompiledDiff, Results, RunRecord } from "./wire";

/** What geak.results answers: its types are generated from the wire schema (src/wire.ts). */
export type CaseRow = CaseRecord;
export type CandidateRow = CandidateRecord;
export type RunRow = RunRecord;
export type { CompiledDiff, Results };

export function esc(x: unknown): string {
  return String(x ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]!));
}

const STRATEGY: Record<string, string> = { tune: "the tuner", llm: "the GEAK loop", benchmark: "a benchmark" };
const OUTCOME: Record<string, [string, string]> = {
  verified: ["verified faster", "good"],
  "not-timed": ["verified correct, not timed", "good"],
  "no-improvement": ["no verified improvement", "neutral"],
  benchmark: ["measured", "neutral"],
  "fails-own-inputs": ["the original fails its own inputs", "bad"],
  error: ["failed", "bad"],
};

function ms(x: number | null | undefined): string {
  return x === null || x === undefined ? "–" : x < 0.1 ? x.toFixed(4) : x.toFixed(3);
}

function times(x: number | null | undefined): string {
  return x === null || x === undefined || Number.isNaN(x) ? "not timed" : `${x.toFixed(2)}x`;
}

function err(x: number | null | undefined): string {
  return x === null || x === undefined ? "–" : x.toExponential(1);
}

function when(t: number): string {
  const d = new Date(t * 1000);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function caseResult(c: CaseRow): string {
  if (c.skipped) return `<span class="neutral">skipped</span>`;
  return c.passed ? `<span class="good">pass</span>` : `<span class="bad">FAIL</span>`;
}

function peak(c: CaseRow): string {
  if (c.flops_pct_peak !== null && c.flops_pct_peak !== undefined) return `${c.flops_pct_peak.toFixed(0)}% of peak FLOP/s`;
  if (c.bw_pct_peak !== null && c.bw_pct_peak !== undefined) return `${c.bw_pct_peak.toFixed(0)}% of peak bandwidth`;
  return "–";
}

function originalTable(cases: CaseRow[]): string {
  if (!cases.length) return "";
  const rows = cases.map((c) => `<tr><td>${esc(c.label)}</td><td class="mono">${esc(c.shapes)}</td><td>${caseResult(c)}</td>` +
    `<td class="num">${ms(c.ref_ms)}</td><td>${esc(peak(c))}</td></tr>`).join("");
  return `<h2>Your code, per input case</h2><table class="cases"><thead><tr><th>case</th><th>inputs</th><th>result</th>` +
    `<th>time (ms)</th><th>% of peak</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function candidateCases(c: CandidateRow): string {
  if (!c.cases.length) return "";
  const rows = c.cases.map((x) => `<tr><td>${esc(x.label)}</td><td>${caseResult(x)}</td><td class="num">${err(x.max_abs_err)}</td>` +
    `<td class="num">${x.ref_ms !== null && x.ref_ms !== undefined ? ms(x.ref_ms) : "–"}</td><td class="num">${times(x.speedup)}</td>` +
    `<td>${esc(x.detail ?? "")}</td></tr>`).join("");
  return `<details><summary>${c.cases.length} case(s)</summary><table class="cases"><thead><tr><th>case</th><th>result</th>` +
    `<th>max abs error</th><th>time (ms)</th><th>speedup</th><th>detail</th></tr></thead><tbody>${rows}</tbody></table></details>`;
}

function verdict(v: string): string {
  const cls = v === "verified" ? "good" : v === "pruned" ? "neutral" : "bad";
  return `<span class="verdict ${cls}">${esc(v.replace(/_/g, " "))}</span>`;
}

function candidatesTable(run: RunRow): string {
  if (!run.candidates.length) return run.kind === "benchmark" ? "" : `<p class="neutral">No candidate was evaluated.</p>`;
  const what = run.strategy === "tune" ? "Launch configs tried" : "Candidates tried";
  const verified = run.candidates.filter((c) => c.correct).length;
  const rows = run.candidates.map((c, i) => `<tr class="${c.chosen ? "chosen" : ""}"><td class="num">${i + 1}</td>` +
    `<td class="mono label">${esc(c.label)}${c.chosen ? ` <span class="tag">offered</span>` : ""}</td><td>${verdict(c.verdict)}</td>` +
    `<td class="num">${c.verdict === "pruned" ? "not run" : times(c.speedup)}</td>` +
    `<td>${esc(c.message.length > 300 ? c.message.slice(0, 300) + "…" : c.message)}${candidateCases(c)}</td></tr>`).join("");
  return `<h2>${what} <span class="count">${verified} of ${run.candidates.length} verified correct</span></h2>` +
    `<table class="candidates"><thead><tr><th>#</th><th>${run.strategy === "tune" ? "config" : "candidate"}</th>` +
    `<th>verdict</th><th>speedup</th><th>notes and per-case results</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function codeState(r: Results, run: RunRow): string {
  if (!r.source_hash) return "";
  if (r.source_hash === run.source_hash) return "Your code is the one this run started from.";
  if (run.result_hash && r.source_hash === run.result_hash) return "The offered result is your code now.";
  return "Your code has changed since this run.";
}

function runSection(r: Results, run: RunRow): string {
  const [label, cls] = OUTCOME[run.outcome] ?? [run.outcome, "neutral"];
  const took = Math.max(0, run.finished_at - run.started_at);
  const head = `<div class="summary"><span class="outcome ${cls}">${esc(label)}</span>` +
    (run.speedup ? ` <span class="outcome good">${run.speedup.toFixed(2)}x</span>` : "") +
    `<p>${esc(run.message)}</p><p class="meta">${run.kind === "benchmark" ? "Benchmark" : "Optimize"} with ` +
    `${esc(STRATEGY[run.strategy] ?? run.strategy)} on ${esc(run.device)}, ${esc(when(run.finished_at))}, ` +
    `${took.toFixed(0)} s. ${esc(codeState(r, run))}</p></div>`;
  const notes = run.notes.length ? `<details><summary>notes</summary><ul>${run.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul></details>` : "";
  return head + compiledSection(run) + originalTable(run.original) + candidatesTable(run) + notes;
}

const STAGE: Record<string, string> = { sass: "SASS", ptx: "PTX", amdgcn: "AMDGCN", llir: "LLVM IR", ttir: "TTIR", ttgir: "TTGIR" };

/** What changed in compiled terms from the original to the offered result, per kernel and launch config. */
function compiledSection(run: RunRow): string {
  const d = run.compiled;
  if (!d && run.result_hash && /interpreter/.test(run.device)) {
    return `<p class="meta">On the CPU interpreter there is no GPU to compile for: set <code>geak.arch</code> ` +
      `(sm_90, gfx942, ...) to see what the compiler made of the result against your code.</p>`;
  }
  if (!d || !d.kernels.length) return "";
  const stage = d.stage ? ` ${STAGE[d.stage] ?? d.stage}` : "";
  const parts = d.kernels.map((k) => {
    const where = k.side === "candidate" ? " (only in the result)" : k.side === "original" ? " (not launched by the result)" : "";
    const head = `<h3 class="mono">${esc(k.kernel)} <span class="meta">[${esc(k.config)}]${esc(where)}</span></h3>`;
    if (k.error) return head + `<p class="bad">not compiled: ${esc(k.error)}</p>`;
    const rows = k.rows.map(([label, a, b, changed]) => `<tr class="${changed ? "changed" : ""}"><td>${esc(label)}</td>` +
      `<td class="num">${esc(a)}</td><td class="num">${esc(b)}</td><td>${changed ? "changed" : ""}</td></tr>`).join("");
    return head + `<table class="compiled"><thead><tr><th></th><th>your code</th><th>the result</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join("");
  return `<h2>What the compiler made of it <span class="count">${esc(d.arch)}${esc(stage)}, ahead of time</span></h2>` + parts;
}

function earlier(runs: RunRow[]): string {
  if (!runs.length) return "";
  const rows = runs.map((run) => `<tr><td>${esc(when(run.finished_at))}</td><td>${esc(STRATEGY[run.strategy] ?? run.strategy)}</td>` +
    `<td>${esc((OUTCOME[run.outcome] ?? [run.outcome])[0])}</td><td>${esc(run.message)}</td></tr>`).join("");
  return `<h2>Earlier runs</h2><table><tbody>${rows}</tbody></table>`;
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground);
  background: var(--vscode-editor-background); padding: 0 16px 24px; }
h1 { font-size: 1.4em; font-weight: 600; margin: 16px 0 4px; }
h2 { font-size: 1.1em; font-weight: 600; margin: 20px 0 6px; }
h3 { font-size: 1em; font-weight: 600; margin: 12px 0 4px; }
table.compiled { width: auto; min-width: 50%; }
tr.changed td { font-weight: 600; }
.path, .meta, .count { color: var(--vscode-descriptionForeground); font-weight: normal; }
.count { font-size: 0.9em; margin-left: 8px; }
.mono { font-family: var(--vscode-editor-font-family); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--vscode-panel-border, #8884); vertical-align: top; }
th { font-weight: 600; color: var(--vscode-descriptionForeground); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.candidates td.label { min-width: 10em; }
tr.chosen td { background: var(--vscode-editor-selectionHighlightBackground, #8882); }
.good { color: var(--vscode-testing-iconPassed, #3a3); }
.bad { color: var(--vscode-testing-iconFailed, #d33); }
.neutral { color: var(--vscode-descriptionForeground); }
.outcome { font-weight: 600; font-size: 1.1em; }
.tag { font-size: 0.8em; padding: 1px 6px; border-radius: 8px; background: var(--vscode-badge-background); color: var(--vscode-badge-foreground); }
.summary p { margin: 4px 0; }
details { margin-top: 4px; }
details table { margin: 4px 0 8px; }
summary { cursor: pointer; color: var(--vscode-textLink-foreground); }
`;

/** The whole page. ``cspSource``: the webview's own source, for the content security policy. */
export function resultsHtml(r: Results, cspSource = "'none'"): string {
  const title = `GEAK results: ${r.name}`;
  let body: string;
  if (r.error) body = `<p class="bad">${esc(r.error)}</p>`;
  else if (!r.runs.length) body = `<p>No GEAK run on <code>${esc(r.name)}</code> yet: run <b>Optimize with GEAK</b> or <b>Benchmark with GEAK</b> on it.</p>`;
  else body = runSection(r, r.runs[0]) + earlier(r.runs.slice(1));
  const through = r.symbol && r.symbol !== r.name ? ` (measured through <code>${esc(r.symbol)}</code>)` : "";
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">` +
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${cspSource} 'unsafe-inline';">` +
    `<meta name="viewport" content="width=device-width, initial-scale=1"><title>${esc(title)}</title><style>${STYLE}</style></head>` +
    `<body><h1>GEAK results: <code>${esc(r.name)}</code>${through}</h1><div class="path">${esc(r.path)}</div>${body}</body></html>`;
}
