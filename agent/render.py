"""What people read: an evaluation, a tuning report, a GEAK-loop report, as plain text.

Pure functions of the records (``EvalResult``, ``TuneReport``, the loop's ``Report`` and
``Step``); the CLI prints them on stdout (stderr when ``--json`` owns stdout).
"""

from __future__ import annotations

import difflib
from typing import Optional

from runner.schema import EvalResult, KernelResources

from agent.tune.knobs import config_text


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


VERDICT_WORDS = {"runner_unavailable": "CANNOT RUN", "not_run_here": "NOT RUN HERE"}
"""Error kinds that say nothing of the code (the runner could not be used; the inputs cannot run
on this device), and the word the verdict uses for them instead of the status."""


def render_eval(result: EvalResult, target: str, candidate: Optional[str], head: Optional[str] = None) -> str:
    """An evaluation for people; ``head``: the first line (default ``geak eval  TARGET ...``)."""
    head = head or f"geak eval  {target}" + (f"  vs  {candidate}" if candidate else "  (against itself)")
    lines = [head]
    d = result.device
    if d:
        lines.append(f"device     {d.label}" + (f"   inputs: {result.inputs_convention}" if result.inputs_convention else ""))
    if result.cases:
        lines += _case_lines(result)
    verdict = VERDICT_WORDS.get(result.error.kind if result.error else "") or \
        {"ok": "VERIFIED" if candidate else "OK"}.get(result.status, result.status.upper())
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


def terminal_width(default: int = 100) -> int:
    """The width to fit: the terminal's (``COLUMNS`` first), else ``default``; at least 60."""
    import shutil
    return max(60, shutil.get_terminal_size((default, 24)).columns)


def _wrap_items(items: list[str], width: int, indent: str = "  ") -> list[str]:
    """``items`` joined by ", " in lines of at most ``width``, breaking between items (an item
    longer than a line is broken inside); continuation lines start with ``indent``."""
    import textwrap
    lines: list[str] = []
    cur = ""
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        lead = indent if lines or cur.startswith(indent) else ""
        if cur and len(cur) + 1 + len(piece) <= width:
            cur += " " + piece
            continue
        if cur:
            lines.append(cur)
            lead = indent
        if len(lead + piece) <= width:
            cur = lead + piece
        else:
            parts = textwrap.wrap(piece, max(8, width - len(indent)), break_long_words=True,
                                  break_on_hyphens=False)
            lines += [(lead if j == 0 else indent) + part for j, part in enumerate(parts[:-1])]
            cur = indent + parts[-1]
    if cur or not lines:
        lines.append(cur)
    return lines


def _wrapped_table(rows: list[tuple], flex: int, width: int) -> list[str]:
    """Left-aligned columns, indented by two spaces, fitted to ``width``: column ``flex`` (a list
    of items) takes what the others leave and wraps between its items; nothing is cut."""
    cells = [[", ".join(c) if isinstance(c, (list, tuple)) else str(c) for c in r] for r in rows]
    n = len(rows[0])
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    others = sum(w for i, w in enumerate(widths) if i != flex) + 2 * (n - 1) + 2
    widths[flex] = max(24, min(widths[flex], width - others))
    out = []
    for r, raw in zip(cells, rows):
        parts = (_wrap_items(list(raw[flex]), widths[flex]) if isinstance(raw[flex], (list, tuple)) else
                 _hanging("", r[flex], widths[flex], "  ") or [""])
        for j, part in enumerate(parts):
            vals = [part if i == flex else (v if j == 0 else "") for i, v in enumerate(r)]
            out.append(("  " + "  ".join(v.ljust(widths[i]) for i, v in enumerate(vals))).rstrip())
    return out


def _said(label: str, text: str, width: int) -> list[str]:
    """``label`` (10 wide) and ``text``, wrapped to ``width`` under the text's start."""
    import textwrap
    return textwrap.wrap(text, width, initial_indent=f"{label:<10} ", subsequent_indent=" " * 11,
                         break_long_words=True, break_on_hyphens=False) or [label]


def _differs(config: dict, original: dict) -> list[str]:
    """The knobs a config sets otherwise than the original (all of them when it has none)."""
    return [f"{n}={v}" for n, v in sorted(config.items()) if n not in original or original[n] != v] or \
        ["(as the original)"]


def _value_order(config: dict) -> tuple:
    """Configs in order of their values, numbers by size."""
    return tuple((n, (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))) for n, v in sorted(config.items()))


def _hanging(lead: str, text: str, width: int, indent: Optional[str] = None) -> list[str]:
    """``text`` after ``lead``, wrapped to ``width``, continuation lines under the text's start
    (or after ``indent``)."""
    import textwrap
    return textwrap.wrap(text, width, initial_indent=lead, subsequent_indent=" " * len(lead) if indent is None else indent,
                         break_long_words=True, break_on_hyphens=False)


def _reason(t) -> str:
    """Why a config is not among the verified ones, in one text (configs with the same reason share it)."""
    import re
    why = t.pruned if t.pruned and (t.correct or t.status == "pruned") else (t.message or t.status)
    m = re.fullmatch(r"spills \d+ bytes per thread on (\S+)( \(the original: \d+\))?", why or "")
    if m:
        return ((f"verified correct, but " if t.correct else "") + f"spills registers to local memory on "
                f"{m.group(1)} (bytes per thread in the spills column)" + (", more than the original" if m.group(2) else ""))
    return _without_status(why, t.status) if why else t.status


def render_tune(report, width: Optional[int] = None) -> str:
    width = width or terminal_width()
    lines = _hanging("", f"geak optimize  {report.target}  --strategy tune  (kernel {report.kernel}, arch "
                         f"{report.arch})", width, "  ")
    if report.device:
        lines.append(f"device     {report.device}")
    if report.original:
        lines += _said("original", config_text(report.original), width)
    notes: list[str] = []
    if report.trials or report.screened:
        lines += [""] + _tune_table(report, width, notes)
    if report.per_shape:
        lines.append("best per input shape (speedup over the original, measured interleaved):")
        for c in report.per_shape:
            cfg = config_text(c.config) if c.config else "the original"
            lines.append(f"  {c.case:<44} {cfg}  {c.speedup:.3f}x")
    if report.autotune_configs and report.source:
        lines.append(f"autotune   {len(report.autotune_configs)} config(s), key={report.autotune_key}")
    if report.confirmation is not None and report.confirmation.timing:
        t = report.confirmation.timing
        lines.append(f"confirmed  Σ ref {t.ref_ms:.4f} ms, Σ tuned {t.cand_ms:.4f} ms, {t.speedup:.3f}x "
                     f"(geomean {t.speedup_geomean:.3f}x), spread ±{t.spread_pct:.1f}%, {t.method}")
    if report.timed:
        lines += _said("% of peak", _roof(report), width)
    if report.search_s is not None:
        lines.append(f"searched   {report.tried} config(s) in {report.search_s:.1f} s"
                     + (f", confirmed in {report.confirm_s:.1f} s" if report.confirm_s is not None else "")
                     + (f" (budget {report.budget_s:.0f} s)" if report.budget_s is not None else "")
                     + (f"; stopped on its {report.stopped} after {report.stopped_after} config(s)"
                        if report.stopped in ("task budget", "time budget") else
                        "; stopped near the roofline" if report.stopped == "roofline" else ""))
    for n in notes + list(report.notes):
        lines += _said("note", n, width)
    lines += _said("verdict", f"{'IMPROVED' if report.improved else 'NO VERIFIED IMPROVEMENT'}: {report.message}",
                   width)
    return "\n".join(lines)


def _tune_table(report, width: int, notes: list[str]) -> list[str]:
    """The original, then every config tried: only the knobs it sets otherwise than the original,
    its result (with a numbered reason below the table where it is not verified) and its costs on
    the arch. Timed: fastest first; untimed: verified first, then those ruled out, those that
    failed and those pruned unrun, each group in order of its values."""
    from agent.tune.tuner import changes_results
    original = report.original
    head = ["config (what differs from the original)", "result", "regs", "spills", "shared", "occupancy"]
    if report.timed:
        head.append("speedup")
        order = "fastest first"
        ranked = sorted(report.trials, key=lambda t: -(t.speedup or 0.0)) + list(report.screened)
    else:
        order = ("verified first, then ruled out after running, failed, and pruned before running; "
                 "each group in order of its values; the reasons [n] below the table")

        def group(t) -> int:
            if t.status == "pruned" and not t.correct:
                return 3
            return 0 if t.correct and not t.pruned else 1 if t.correct else 2
        ranked = sorted(list(report.trials) + list(report.screened), key=lambda t: (group(t), _value_order(t.config)))
    reasons: dict[str, list] = {}
    rows = [tuple(head)]
    rows.append(("the original (its config above)" if original else "the original", "reference", *_costs(_costliest(report.original_resources)))
                + (("1.000x",) if report.timed else ()))
    for t in ranked:
        if t.correct and not t.pruned:
            result = "correct"
        else:
            why = _reason(t)
            reasons.setdefault(why, []).append(t)
            n = list(reasons).index(why) + 1
            result = (f"ruled out [{n}]" if t.correct else
                      f"pruned [{n}]" if t.status == "pruned" else f"{t.status.replace('_', ' ')} [{n}]")
        rows.append((_differs(t.config, original), result, *_costs(_costliest(t.resources)))
                    + ((f"{t.speedup:.3f}x" if t.speedup is not None else "-",) if report.timed else ()))
    lines = _said("configs", f"{len(ranked)} tried, {order}", width) + _wrapped_table(rows, 0, width)
    for n, (why, ts) in enumerate(reasons.items(), 1):
        lines += _hanging(f"  [{n}] ", f"{len(ts)} config(s): {why}", width)
    learned = changes_results(report.trials, original)
    if learned:
        notes.append("values that change the kernel's results (a config that failed differs from the original, "
                     "or from a verified config, in that value alone): "
                     + ", ".join(f"{k}={v}" for k, v in sorted(learned, key=str)))
    return lines + [""]


def _roof(report) -> str:
    """The original's and the chosen config's share of the roofline, or why it is unknown."""
    from agent.roofline import BASIS_TEXT
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


# --------------------------------------------------------------------------- geak asm


def _launch_head(k: KernelResources) -> str:
    cfg = ", ".join(f"{n}={v}" for n, v in k.constexprs.items() if v != "None")
    return (f"{k.kernel}  {k.arch} {k.listing_stage or ''}  num_warps={k.num_warps} num_stages={k.num_stages}"
            + (f"  {cfg}" if cfg else "") + (f"  ({k.arg_types})" if k.arg_types else ""))


def listing_lines(resources: list[KernelResources], files: dict[str, str],
                  raw: bool = False) -> list[tuple[str, Optional[tuple[str, int]]]]:
    """Each compiled launch config: its resources and summary, then its instructions in the
    listing's order, each run of them under the kernel source line it came from. Per line of
    text, the project file (relative path) and 1-based line it came from, or None: the CLI
    prints the text, the editor's compiled view maps its cursor with the positions."""
    from agent.asm import CUT_PREFIX, blocks, describe, source_path, summarize
    out: list[tuple[str, Optional[tuple[str, int]]]] = []

    def say(text: str, where: Optional[tuple[str, int]] = None) -> None:
        out.append((text, where))
    for k in resources:
        say(f"== {_launch_head(k)}")
        if k.error:
            say(f"   not compiled: {k.error}")
            say("")
            continue
        regs, spills, shared, occ = _costs(k, "?")
        say(f"   registers {regs}, spills {spills}, shared {shared}, occupancy {occ}")
        if k.listing is None:
            say("   no listing came back: this runner sends none (a version before compile listings)")
            say("")
            continue
        text = k.listing
        if raw:
            for ln in text.rstrip().splitlines():
                say(ln)
            say("")
            continue
        bl = blocks(text, k.listing_stage or "")
        say("   " + describe(summarize([i for b in bl for i in b.instructions], k.listing_stage or "")))
        if not bl and text:
            say("   (no instructions read from this listing; --raw shows it as it came)")
        for b in bl:
            rel = source_path(b.file, files)
            where = (rel, b.line) if rel is not None and b.line else None
            if b.line is None:
                mark = "(no source line)"
            elif rel is not None:
                src = files[rel].splitlines()
                mark = f"{rel}:{b.line}  {src[b.line - 1].strip() if b.line <= len(src) else ''}"
            else:
                mark = f"{b.file}:{b.line}"
            say(f"# {mark}", where)
            for i in b.instructions:
                say(f"    {i}", where)
        if CUT_PREFIX in text:
            for ln in text[text.index(CUT_PREFIX):].strip().splitlines():
                say(ln)
        say("")
    while out and not out[-1][0].strip():
        out.pop()
    return out


def render_listing(resources: list[KernelResources], files: dict[str, str], raw: bool = False) -> str:
    """``listing_lines`` as text (``geak asm``)."""
    return "\n".join(text for text, _ in listing_lines(resources, files, raw)).rstrip()


def render_compiled_diff(original: list[KernelResources], candidate: list[KernelResources]) -> str:
    """Per kernel and launch config, the original's compiled figures beside the candidate's:
    registers, spills, shared memory, occupancy and the instruction mix."""
    from agent.asm import compiled_difference
    d = compiled_difference(original, candidate)
    if d is None:
        return ""
    lines = [f"compiled difference on {d['arch']}" + (f" ({d['stage']})" if d["stage"] else "") + ", original -> candidate:"]
    for k in d["kernels"]:
        lines.append(f"  {k['kernel']}  [{k['config']}]"
                     + ("  (only in the candidate)" if k["side"] == "candidate" else
                        "  (not launched by the candidate)" if k["side"] == "original" else ""))
        if k["error"]:
            lines.append(f"    not compiled: {k['error']}")
            continue
        rows = [(label, a, "->", b, "changed" if changed else "") for label, a, b, changed in k["rows"]]
        lines += ["  " + r for r in _table(rows, 30)] if rows else ["    (nothing known)"]
    return "\n".join(lines)