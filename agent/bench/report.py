"""The Markdown report (a table per task and the summary metrics) and the PNG plot of speedups.

matplotlib is imported only when a plot is drawn (``pip install -e '.[bench]'``), so ``geak``
starts without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from agent.bench.suite import budget_spent, stopped_by_call


def _f(x: Optional[float], spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _result(t: dict) -> str:
    if t.get("error"):
        return "harness error"
    samples = t["samples"]
    if not samples:
        return ("stopped by the time budget (not scored)" if stopped_by_call(t) else
                "the task budget was spent checking the original (not scored)" if budget_spent(t) else "no sample")
    if all(s.get("not_run") for s in samples):
        return "not run here (not scored)"
    if all(s.get("not_checkable") for s in samples):
        return "the original cannot be checked here (not scored)"
    good = [s for s in samples if s["correct"] and s["status"] == "ok"]
    stop = " (stopped by the time budget)" if stopped_by_call(t) else ""
    if len(samples) > 1:
        return f"{len(good)}/{len(samples)} correct{stop}"
    s = samples[0]
    return ("correct" if good else s["status"]) + stop


def _best_speedup(t: dict) -> Optional[float]:
    vals = [s["speedup"] for s in t["samples"] if s["correct"] and s["status"] == "ok" and s["speedup"] is not None]
    return max(vals) if vals else None


def _best_peak(t: dict) -> Optional[float]:
    good = [s for s in t["samples"] if s["correct"] and s["status"] == "ok"]
    if not good:
        return None
    best = max(good, key=lambda s: s["speedup"] if s["speedup"] is not None else -1)
    return best.get("pct_peak")


def markdown(doc: dict, plot_name: Optional[str] = None) -> str:
    """The report: what ran where, the summary metrics, a row per task, the tuner per task, what
    failed, notes, the plot, and how the figures are defined."""
    lines = (_head(doc) + _summary(doc["summary"]) + _against(doc) + _tasks(doc["tasks"]) + _tuner(doc["tasks"])
             + _lists(doc))
    if plot_name:
        lines += ["", "## Speedup per task", "", f"![speedup per task]({plot_name})"]
    lines += ["", "Speedup = Σ reference ms / Σ candidate ms over a task's timed input cases, the "
              "reference being the task's own first version (GEAK / TritonBench); the suite figures "
              "are over correct, timed tasks. `fast_p` is the share of all tasks that are correct "
              "and more than p times as fast. `1st version vs torch eager` is the first version's "
              "speedup over its PyTorch reference on the same GPU.", ""]
    return "\n".join(lines)


def _head(doc: dict) -> list[str]:
    dev = doc.get("device") or {}
    lines = [f"# geak bench: {doc['suite']}", "",
             f"* strategy: `{doc['strategy']}`; device: {dev.get('name', '?')} "
             f"({dev.get('backend', '?')}{', ' + dev['arch'] if dev.get('arch') else ''}); "
             f"torch {dev.get('torch') or '?'}, triton {dev.get('triton') or '?'}"]
    if doc.get("command"):
        lines.append(f"* command: `{doc['command']}`")
    if doc.get("code"):
        lines.append(f"* code: `{doc['code']}` (a digest of `agent/` and `runner/`: one table measures one code)")
    for where, part in [("", doc)] + [(f"{p['run_directory']}: ", p) for p in doc.get("parts") or []]:
        said = []
        if part.get("started"):
            said.append(f"{part['started']['workers']} worker(s) started before the first task, in "
                        f"{part['started']['s']} s")
        lock = part.get("device_lock")
        if lock and dev.get("backend") not in (None, "interpreter"):
            said.append(f"the GPU held alone (timing) {lock['write']:.0f} s, shared (checks) {lock['read']:.0f} s "
                        f"of {lock['wall']:.0f} s")
        if "exit" in part:
            said.insert(0, (f"CUDA_VISIBLE_DEVICES={part['cuda_visible_devices']}, " if part.get("cuda_visible_devices")
                            else "") + f"{part['tasks']} task(s), exit {part['exit']}")
        if said:
            lines.append(f"* {where}" + "; ".join(said))
    return lines + [""]


def _summary(s: dict) -> list[str]:
    lines = ["## Summary", "", "| metric | value |", "| --- | --- |",
             f"| tasks | {s['tasks']} ({s['samples']} samples) |",
             f"| call accuracy | {_pct(s['call_accuracy'])} |",
             f"| execution accuracy | {_pct(s['execution_accuracy'])} |",
             f"| correct and timed | {s['timed']} |",
             *([f"| not run here (no input case could run on this runner; left out of every figure) | "
                f"{s['not_run_here']} |"] if s.get("not_run_here") else []),
             *([f"| the original cannot be checked here (its results vary, or its own test fails here; left "
                f"out of every figure) | {s['not_checkable']} |"] if s.get("not_checkable") else []),
             f"| mean speedup (correct, timed) | {_f(s['speedup_mean'], '.3f', 'x')} |",
             f"| geometric-mean speedup | {_f(s['speedup_geomean'], '.3f', 'x')} |"]
    lines += [f"| {k} | {_pct(v)} |" for k, v in [*s["fast_p"].items(), *s["pass_at_k"].items()]]
    lines.append(f"| mean % of peak (correct, timed) | {_f(s['pct_peak_mean'], '.1f', '%')} |")
    if s["timed"] == 0:
        lines += ["", "Nothing was timed (the CPU interpreter checks correctness only): speedups, "
                  "fast_p above 0 and % of peak need a GPU runner."]
    return lines + [""]


def _tasks(tasks: list[dict]) -> list[str]:
    kinds = sorted({k for t in tasks for k in t.get("baselines", {})})
    head = ["task", "format", "result", "cases run / skipped", "speedup", "% of peak"]
    for k in kinds:
        head += [f"1st version vs torch {k}", f"final vs torch {k}"]
    lines = ["## Tasks", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for t in tasks:
        sp = _best_speedup(t)
        row = [f"`{t['name']}`", t["format"], _result(t), f"{t['cases_run']} / {t['cases_skipped']}",
               _f(sp, ".3f", "x"), _peak(_best_peak(t), t)]
        for k in kinds:
            row += _baseline_cells(t.get("baselines", {}).get(k), sp)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _peak(pct: Optional[float], t: dict) -> str:
    """A share of the roofline; "unknown" where a timed task has none (no bytes or FLOPs known)."""
    if pct is not None:
        return f"{pct:.1f}%"
    return "unknown" if t.get("timed") else "-"


def _baseline_cells(b: Optional[dict], sp: Optional[float]) -> list[str]:
    """The first version against a PyTorch baseline, and the final kernel against it."""
    if not b:
        return ["-", "-"]
    if b.get("speedup") is None:
        chk = {True: "matches", False: "MISMATCH", None: "-"}[b.get("correct")]
        if b.get("correct") is False and b.get("status") not in (None, "mismatch"):
            chk = b["status"]  # rejected, crashed, ...: not a wrong answer
        return [chk, "-"]
    return [_f(b["speedup"], ".3f", "x") + (" (cached)" if b.get("cached") else ""),
            _f(b["speedup"] * sp, ".3f", "x") if sp is not None else "-"]


def _tuner(tasks: list[dict]) -> list[str]:
    against = any(t.get("autotune") for t in tasks)
    searched = [t for t in tasks if t.get("search") or (against and t.get("autotune"))]
    if not searched:
        return []
    head = ["task", "first version Σ ms", "final Σ ms", "speedup", "% of peak (first → final)",
            "configs run + pruned unrun / space", "search s", "stopped"]
    if against:
        head += ["Triton's autotune: speedup, search s (configs)", "verdict"]
    lines = ["", "## The tuner per task", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for t in searched:
        x = t.get("search") or {}
        stop = (f"{x['stopped']} after {x.get('stopped_after')}" if x.get("stopped") else "-")
        row = (f"| `{t['name']}` | {_f(x.get('first_ms'), '.4f')} | {_f(x.get('final_ms'), '.4f')} | "
               f"{_f(_best_speedup(t), '.3f', 'x')} | {_peak(x.get('pct_peak_first'), t)} → "
               f"{_peak(x.get('pct_peak_final'), t)} | {x.get('configs_run', '-')} + "
               f"{x.get('configs_pruned', '-')} / {x.get('space', '-')} | {_f(x.get('search_s'), '.1f')} | "
               f"{stop} |")
        if against:
            at = t.get("autotune") or {}
            row += f" {_autotune_cell(at)} | {at.get('verdict', '-')} |".replace("\n", " ")
        lines.append(row)
    return lines


def _autotune_cell(at: dict) -> str:
    """Triton's autotune on one task: its speedup, search seconds and configs, or why not."""
    n = f"{at.get('configs', '-')}{' sampled' if at.get('sampled') else ''}"
    if "status" not in at:
        return str(at.get("skipped", "-")).replace("|", "/")
    if at.get("speedup") is None:
        return f"{at['status']}{', correct' if at.get('correct') else ''}, untimed ({n})".replace("|", "/")
    return f"{at['speedup']:.3f}x, {at.get('search_s', '-')} s ({n})"


def _against(doc: dict) -> list[str]:
    """``--against-autotune``: the tuner against Triton's autotune over the suite."""
    if doc.get("against_autotune") is None:
        return []
    from agent.bench.autotune import in_words
    return ["## Against Triton's autotune over the same space", "", in_words(doc["against_autotune"]) + ".",
            "Per task in the tuner's table below: Triton's `@triton.autotune` over the tuner's space (its literal "
            "configs, a seeded sample of `--max-configs` when larger), measured against the original by the same "
            "evaluator; its search seconds are that evaluation's worker seconds less the original's own check's.",
            ""]


def _lists(doc: dict) -> list[str]:
    """Harness errors, failures, baselines that did not verify, and notes."""
    tasks = doc["tasks"]
    sections = [
        ("Harness errors (not scored)", [f"* `{t['name']}`: {t['error']}" for t in tasks if t.get("error")]),
        ("Failures", [f"* `{t['name']}`: {s['message']}" for t in tasks for s in t["samples"]
                      if not (s["correct"] and s["status"] == "ok") and not s.get("not_checkable")]),
        ("Originals that cannot be checked here (not scored)",
         [f"* `{t['name']}`: {s['message']}" for t in tasks for s in t["samples"] if s.get("not_checkable")]),
        ("Baselines that did not verify", [f"* `{t['name']}` vs torch {k}: {b.get('message', '')}" for t in tasks
                                           for k, b in sorted(t.get("baselines", {}).items())
                                           if b.get("correct") is False]),
        ("Notes", [f"* {n}" for n in doc.get("notes", [])]
         + [f"* `{t['name']}`: {m}" for t in tasks for m in t.get("notes", [])]),
    ]
    lines = []
    for title, items in sections:
        if items:
            lines += ["", f"## {title}", ""] + items
    return lines


def plot(doc: dict, path: Path) -> bool:
    """Bar chart of each task's speedup (log scale, 1x marked). False when nothing was timed."""
    rows = [(t["name"], _best_speedup(t)) for t in doc["tasks"]]
    rows = [(n, v) for n, v in rows if v is not None]
    if not rows:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows.sort(key=lambda r: r[1])
    names, vals = [r[0] for r in rows], [r[1] for r in rows]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(rows) + 1)))
    colors = ["#2a9d8f" if v >= 1 else "#e76f51" for v in vals]
    ax.barh(names, vals, color=colors)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speedup over the task's first version (log scale)")
    dev = (doc.get("device") or {}).get("name", "")
    gm = doc["summary"].get("speedup_geomean")
    ax.set_title(f"geak bench --strategy {doc['strategy']}  {dev}"
                 + (f"  (geomean {gm:.2f}x)" if gm else ""), fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    """``python -m agent.bench.report BENCH.json REPORT.md``: the report and plot again from a
    run's JSON (e.g. on a machine that has matplotlib, after a GPU run on one that has not)."""
    import json
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m agent.bench.report BENCH.json REPORT.md", file=sys.stderr)
        return 2
    try:
        doc = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"{args[0]}: cannot read the run's JSON: {e}", file=sys.stderr)
        return 2
    rp = Path(args[1])
    png = rp.with_suffix(".png")
    try:
        drew = plot(doc, png)
    except ImportError:
        drew = False
        print("note: no plot: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)
    rp.write_text(markdown(doc, png.name if drew else None), encoding="utf-8")
    print(f"wrote {rp}" + (f" and {png}" if drew else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
