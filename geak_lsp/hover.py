"""Hover on a kernel or wrapper: the last measurement from the workspace store."""

from __future__ import annotations

import time
from typing import Optional

from runner.schema import INTERPRETER

from geak_lsp.store import Record, Store
from geak_lsp.targets import DocumentTargets, Target
from geak_lsp.wording import editor_words


def _ago(ts: float) -> str:
    s = max(0, time.time() - ts)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 36 * 3600:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.0f} days ago"


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns aligned in a fenced block: a Markdown table renders without cell padding in
    VS Code's hover (its headers ran together) and as raw pipes in some clients."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return ["```text", *text, "```"]


def hover_text(doc: DocumentTargets, target: Target, store: Store, path: str,
               results_link: Optional[str] = None) -> str:
    """``results_link``: a command link that opens the editor's results view (shown last)."""
    symbol = target.evaluated
    rec: Optional[Record] = store.latest(path, symbol)
    title = f"**GEAK** `{target.name}`" + (f" (measured through `{symbol}`)" if symbol != target.name else "")
    link = f"\n\n[Show GEAK results]({results_link}): every config or candidate tried" if results_link else ""
    if rec is None:
        return (title + "\n\nNot measured yet. Run **Benchmark with GEAK** (measure only) or "
                "**Optimize with GEAK** on it." + link)
    stale = doc.syntax_error is None and doc.source_hash(target) != rec.source_hash
    lines = [title, ""]
    what = "benchmark" if rec.kind == "benchmark" else "optimize run"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.measured_at))
    lines.append(f"{what} on **{rec.device}**, {when} ({_ago(rec.measured_at)})"
                 + (" — **stale**: the source changed since" if stale else ""))
    lines.append("")
    lines.append(("correct on its inputs" if rec.correct else f"**{rec.status}**: {editor_words(rec.message)}")
                 + (f"; not timed: {editor_words(rec.timing_unavailable)}" if rec.timing_unavailable else ""))
    if rec.cases:
        rows = []
        for c in rec.cases:
            res = "skipped" if c.skipped else ("pass" if c.passed else "FAIL")
            peak = (f"{c.flops_pct_peak:.0f}% FLOP" if c.flops_pct_peak is not None else
                    f"{c.bw_pct_peak:.0f}% BW" if c.bw_pct_peak is not None else "-")
            rows.append([c.label, c.shapes, res, _ms(c.ref_ms), peak])
        lines += ["", *_table(["case", "shapes", "result", "ms", "% of peak"], rows)]
    kernels = [target.name] if target.kind == "kernel" else (target.kernels or rec.kernels)
    res = [r for r in rec.resources if r.kernel in kernels] or rec.resources
    if res:
        where = (" (compiled for that GPU here, without running on it; geak.arch chooses it)"
                 if rec.device == INTERPRETER else "")
        rows, seen = [], set()
        for r in res:
            row = (r.kernel, r.config, r.registers, r.spill_bytes, r.shared_bytes, r.occupancy_pct, r.error)
            if row in seen or len(seen) >= 8:
                continue
            seen.add(row)
            if r.error:
                rows.append([r.kernel, r.config, "-", "-", "-", r.error[:80]])
                continue
            shared = "-" if r.shared_bytes is None else (
                f"{r.shared_bytes} B" + (f" of {r.shared_limit} B" if r.shared_limit else ""))
            rows.append([r.kernel, r.config, str(r.registers if r.registers is not None else "?"),
                         f"{r.spill_bytes if r.spill_bytes is not None else '?'} B", shared,
                         "-" if r.occupancy_pct is None else f"{r.occupancy_pct:.0f}%"])
        lines += ["", f"ahead-of-time compile for {res[0].arch}{where}:", "",
                  *_table(["kernel", "config", "registers", "spills", "shared memory", "occupancy"], rows)]
    others = [r for r in store.for_target(path, symbol) if r.device != rec.device][:3]
    if others:
        lines += ["", "also measured on: " + ", ".join(f"{r.device} ({_ago(r.measured_at)})" for r in others)]
    return "\n".join(lines) + link
