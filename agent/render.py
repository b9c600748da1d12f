"""What people read: an evaluation, a tuning report, a GEAK-loop report, as plain text.

Pure functions of the records (``EvalResult``, ``TuneReport``, the loop's ``Report`` and
``Step``); the CLI prints them on stderr.
"""

from __future__ import annotations

import difflib
from typing import Optional

from runner.schema import EvalResult, KernelResources


def _fmt(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _peak(t) -> str:
    """The candidate's share of the GPU's peak: compute when the file gives get_flops, else bandwidth."""
    if t is None:
        return "-"
    if t.cand_flops_pct_peak is not None:
        return f"{t.cand_flops_pct_peak:.0f}% FLOP ({t.cand_tflops:.0f} TF/s)"
    if t.cand_bw_pct_peak is not None:
        return f"{t.cand_bw_pct_peak:.0f}% BW"
    return "-"


def _without_status(message: str, status: str) -> str:
    """The result's message without a leading ``status:`` (the verdict already says it)."""
    head, sep, rest = message.partition(":")
    return rest.strip() if sep and head.strip().lower() == status.lower() and rest.strip() else message


def _table(rows: list[tuple], cap: int) -> list[str]:
    """Left-aligned columns, each at most ``cap`` wide, indented by two spaces."""
    widths = [min(max(len(str(r[i])) for r in rows), cap) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(v)[:widths[i]].ljust(widths[i]) for i, v in enumerate(r)).rstrip() for r in rows]


def _costs(k: Optional[KernelResources], unknown: str = "-") -> tuple[str, str, str, str]:
    """Registers, spills, shared memory and occupancy of one compiled kernel."""
    if k is None:
        return unknown, unknown, unknown, unknown
    return (str(k.registers) if k.registers is not None else unknown,
            f"{k.spill_bytes} B" if k.spill_bytes is not None else unknown,
            f"{k.shared_bytes} B" if k.shared_bytes is not None else unknown,
            f"{k.occupancy_pct:.0f}%" if k.occupancy_pct is not None else unknown)


# --------------------------------------------------------------------------- geak eval


def sandbox_warning(result: Optional[EvalResult]) -> Optional[str]:
    """One warning when the runner could not confine evaluated code (its self-test at start
    said so in ``result.sandbox``); None where it could, or where nothing is known."""
    fs = (result.sandbox or {}).get("filesystem", "") if result is not None else ""
    if not fs.startswith("NOT confined"):
        return None
    return ("warning: this runner does not sandbox evaluated code — " + fs + ". A candidate can change "
            "files on the runner's host and so its own and later verdicts. Run on a host with user "
            "namespaces (docs/evaluator.md, \"Processes\").")


def render_eval(result: EvalResult, target: str, candidate: Optional[str]) -> str:
    head = f"geak eval  {target}" + (f"  vs  {candidate}" if candidate else "  (against itself)")
    lines = [head]
    d = result.device
    if d:
        lines.append(f"device     {d}" + (f"   inputs: {result.inputs_convention}" if result.inputs_convention else ""))
    if result.cases:
        lines += _case_lines(result)
    verdict = {"ok": "VERIFIED" if candidate else "OK"}.get(result.status, result.status.upper())
    lines.append(f"verdict    {verdict}: {_without_status(result.message, result.status)}")
    if result.timing:
        t = result.timing
        lines.append(f"timing     Σ ref {t.ref_ms:.4f} ms, Σ cand {t.cand_ms:.4f} ms, speedup "
                     f"{t.speedup:.3f}x (geomean {t.speedup_geomean:.3f}x), {t.method}, "
                     f"spread ±{t.spread_pct:.1f}%")
    elif result.timing_unavailable:
        lines.append(f"timing     unavailable: {result.timing_unavailable}")
    if result.resources:
        lines += _resource_lines(result.resources)
    lines += _flag_and_error_lines(result)
    return "\n".join(lines)


def _case_lines(result: EvalResult) -> list[str]:
    rows = [("case", "shapes", "result", "max abs", "max rel", "ref ms", "cand ms", "speedup", "% of peak")]
    for c in result.cases:
        status = "skipped" if c.skipped else ("pass" if c.passed else ("FAIL" if c.trials else "-"))
        t = c.timing
        # A case that failed with no numeric error failed on structure (shape, dtype, length,
        # mutation): an error of 0 would read as "equal".
        structural = not c.passed and c.trials and not (c.max_abs_err or c.max_rel_err)
        rows.append((c.label, c.shapes, status, "-" if structural else _fmt(c.max_abs_err),
                     "-" if structural else _fmt(c.max_rel_err),
                     _fmt(t.ref_ms, ".4f") if t else "-", _fmt(t.cand_ms, ".4f") if t else "-",
                     f"{t.speedup:.2f}x" if t else "-", _peak(t)))
    lines = [""] + _table(rows, 44) + [""]
    for c in result.cases:
        if c.skipped:
            lines.append(f"  skipped {c.label}: {c.skipped}")
        elif c.detail and not c.passed:
            lines.append(f"  {c.label}: {c.detail}")
    return lines


def _resource_lines(resources: list[KernelResources]) -> list[str]:
    lines = [f"ahead-of-time compile for {resources[0].arch} (per kernel and launch config):"]
    rows = [("kernel", "config", "regs", "spills", "shared", "occupancy")]
    for k in resources:
        cfg = ", ".join(f"{n}={v}" for n, v in k.constexprs.items() if v != "None")
        cfg = (cfg + ", " if cfg else "") + f"warps={k.num_warps}, stages={k.num_stages}"
        ptrs = sorted({t[1:] for t in k.arg_types.split(", ") if t.startswith("*")})
        cfg += f" [{'/'.join(ptrs)}]" if ptrs else ""
        if k.error:
            rows.append((k.kernel, cfg, "-", "-", "-", k.error))
            continue
        rows.append((k.kernel, cfg, *_costs(k, "?")))
    return lines + _table(rows, 60)


def _flag_and_error_lines(result: EvalResult) -> list[str]:
    lines = []
    for f in result.flags:
        if f.code == "limit_lowered":  # the runner's ceiling, not the candidate's doing
            lines.append(f"note       {f.message}")
        elif f.severity != "info" or result.status == "rejected":
            lines.append(f"{f.severity:<10} {f.code}: {f.message}")
    if result.error:
        e = result.error
        if e.hint:
            lines.append(f"what to do: {e.hint}")
        if e.traceback and e.traceback.strip() != e.message.strip():
            lines.append("")
            lines.extend("  " + ln for ln in e.traceback.strip().splitlines()[-25:])
    if result.log and result.status not in ("ok",):
        lines.append("")
        lines.append("output of the code (last lines):")
        lines.extend("  " + ln for ln in result.log.strip().splitlines()[-15:])
    return lines


# --------------------------------------------------------------------------- geak optimize --strategy tune


def _costliest(resources: list[KernelResources]) -> Optional[KernelResources]:
    """What does not fit, else what spills most, else what needs the most registers."""
    return max(resources, key=lambda r: (not r.fits, r.spill_bytes or 0, r.registers or 0), default=None)


def _config(config: dict) -> str:
    return ", ".join(f"{n}={v}" for n, v in sorted(config.items()))


def render_tune(report) -> str:
    lines = [f"geak optimize  {report.target}  --strategy tune  (kernel {report.kernel}, arch {report.arch})"]
    if report.device:
        lines.append(f"device     {report.device}")
    if report.original:
        lines.append("original   " + _config(report.original))
    if report.trials or report.screened:
        rows = [("config", "result", "regs", "spills", "shared", "occupancy", "speedup")]
        rows.append((_config(report.original) or "as written", "the original (reference)",
                     *_costs(_costliest(report.original_resources)), "1.000x" if report.timed else "-"))
        # The configs that ran, fastest first, then those pruned unrun by the compile screen.
        for t in sorted(report.trials, key=lambda t: -(t.speedup or 0.0)) + list(report.screened):
            result = (("pruned: " + t.pruned) if t.pruned and (t.correct or t.status == "pruned") else
                      ("correct" if t.correct else t.status))
            rows.append((_config(t.config), result, *_costs(_costliest(t.resources)),
                         f"{t.speedup:.3f}x" if t.speedup is not None else "-"))
        lines += [""] + _table(rows, 90) + [""]
    if report.per_shape:
        lines.append("best per input shape (speedup over the original, measured interleaved):")
        for c in report.per_shape:
            cfg = _config(c.config) if c.config else "the original"
            lines.append(f"  {c.case:<44} {cfg}  {c.speedup:.3f}x")
    if report.autotune_configs and report.source:
        lines.append(f"autotune   {len(report.autotune_configs)} config(s), key={report.autotune_key}")
    if report.confirmation is not None and report.confirmation.timing:
        t = report.confirmation.timing
        lines.append(f"confirmed  Σ ref {t.ref_ms:.4f} ms, Σ tuned {t.cand_ms:.4f} ms, {t.speedup:.3f}x "
                     f"(geomean {t.speedup_geomean:.3f}x), spread ±{t.spread_pct:.1f}%, {t.method}")
    if report.timed:
        lines.append("% of peak  " + _roof(report))
    if report.search_s is not None:
        lines.append(f"searched   {report.tried} config(s) in {report.search_s:.1f} s"
                     + (f", confirmed in {report.confirm_s:.1f} s" if report.confirm_s is not None else "")
                     + (f" (budget {report.budget_s:.0f} s)" if report.budget_s is not None else "")
                     + (f"; stopped on its {report.stopped} after {report.stopped_after} config(s)"
                        if report.stopped in ("task budget", "time budget") else
                        "; stopped near the roofline" if report.stopped == "roofline" else ""))
    for n in report.notes:
        lines.append(f"note       {n}")
    lines.append(f"verdict    {'IMPROVED' if report.improved else 'NO VERIFIED IMPROVEMENT'}: {report.message}")
    return "\n".join(lines)


def _roof(report) -> str:
    """The original's and the chosen config's share of the roofline, or why it is unknown."""
    from .roofline import BASIS_TEXT
    if report.original_pct_peak is None:
        return ("unknown: no bytes or FLOPs could be counted, the counts came to more than the GPU's peak "
                "(an exceeds_peak note says which), or the GPU's peaks are not known")
    what = BASIS_TEXT.get(report.peak_basis or "", "of peak")
    if report.best_pct_peak is None or not report.improved:
        return f"the original {report.original_pct_peak:.0f}% {what}"
    return f"the original {report.original_pct_peak:.0f}% → tuned {report.best_pct_peak:.0f}% {what}"


def diff_text(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}")).rstrip("\n")


# --------------------------------------------------------------------------- geak optimize --strategy llm


def step_line(st) -> str:
    """One attempt of the GEAK loop, once evaluated."""
    sp = st.result.speedup if st.result is not None else None
    what = st.outcome.replace("_", " ")
    if sp is not None:
        what += f", {sp:.3f}x"
    elif st.outcome == "correct":
        what += ", not timed"
    detail = st.error or (st.extraction if st.outcome == "no_code" else (st.result.message if st.result else ""))
    return f"  {st.id}  {st.kind:<16} {what}" + (f": {detail[:160]}" if detail and st.outcome != "correct" else "")


def iteration_status(p) -> str:
    """The GEAK loop's progress bar after an iteration (``p``: its ``Progress``)."""
    return (f"{p.verified} verified of {p.evaluated}, "
            + (f"best {p.best_speedup:.3f}x" if p.best_speedup is not None else "no verified speedup yet")
            + f", {p.tokens} tokens")


def render_llm(rep) -> str:
    lines = [f"geak optimize  {rep.target}  --strategy llm  ({rep.provider} {rep.model}, "
             f"{rep.iterations_run} iteration(s) x {rep.parallel})"]
    if rep.device:
        lines.append(f"device     {rep.device}")
    lines.append(f"knowledge  {', '.join(rep.knowledge)}")
    if rep.candidates:
        rows = [("candidate", "prompt", "outcome", "speedup", "detail")]
        for c in rep.candidates:
            rows.append((c.id, c.kind, c.outcome.replace("_", " "),
                         f"{c.speedup:.3f}x" if c.speedup is not None else "-", (c.message or "")[:100]))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines.append("")
        for r in rows:
            lines.append("  " + "  ".join(v.ljust(widths[i]) for i, v in enumerate(r[:4])) + "  " + r[4])
        lines.append("")
    u = rep.usage
    lines.append(f"tokens     {u.get('input_tokens', 0)} in, {u.get('output_tokens', 0)} out, "
                 f"{u.get('calls', 0)} call(s)" + (f", {u['failed_calls']} failed" if u.get("failed_calls") else "")
                 + (f", budget {u['budget_tokens']}" if u.get("budget_tokens") else ""))
    lines.append(f"run dir    {rep.run_dir}")
    for n in rep.notes:
        lines.append(f"note       {n}")
    lines.append(f"verdict    {'IMPROVED' if rep.improved else 'NO VERIFIED IMPROVEMENT'}: {rep.message}")
    return "\n".join(lines)
