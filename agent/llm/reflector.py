"""The reflector: what the model is told about its last candidate, one prompt per outcome.

* did not run: the compiler or runtime message, the hint, the traceback trimmed to the user's
  frames, and the last lines the code printed;
* ran but wrong: which cases failed, their shapes, max abs/rel error and where the first
  mismatch shows;
* rejected: which anti-cheat rule it broke;
* correct: what was measured (speedup, per-case times, % of peak, registers and spills when
  compiled ahead of time), so the model can say what made it fast or slow; for a candidate
  slower than the original or one that spills, what the compiler made of it against the
  original (registers, spills, shared memory, occupancy, vector or scalar memory instructions,
  tensor-core use), read from both compiled listings.
"""

from __future__ import annotations

from typing import Optional

from runner.schema import EvalResult

from . import prompts
from agent.llm.records import Step

MAX_ERROR_CHARS = 4000


def _fmt(x, spec=".3g") -> str:
    return "-" if x is None or x != x else format(x, spec)


def error_text(r: EvalResult) -> str:
    lines = [r.message]
    e = r.error
    if e:
        if e.message and e.message.strip() != r.message.strip():
            lines.append(e.message)
        if e.file:
            lines.append(f"at {e.file}" + (f":{e.line}" if e.line else ""))
        if e.hint:
            lines.append(f"hint: {e.hint}")
        if e.traceback and e.traceback.strip() not in "\n".join(lines):
            lines += ["", e.traceback.strip()]
    if r.log.strip():
        lines += ["", "output (last lines):", *r.log.strip().splitlines()[-10:]]
    text = "\n".join(lines)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS // 2] + "\n...\n" + text[-MAX_ERROR_CHARS // 2:]


def cases_text(r: EvalResult) -> str:
    rows = []
    for c in r.cases:
        if c.skipped:
            continue
        if c.passed:
            rows.append(f"* case {c.label} ({c.shapes}): passed")
        else:
            rows.append(f"* case {c.label} ({c.shapes}): FAILED, max abs err {_fmt(c.max_abs_err)}, "
                        f"max rel err {_fmt(c.max_rel_err)}" + (f"; {c.detail}" if c.detail else ""))
    if not rows:
        rows.append(f"* {r.message}")
    return "\n".join(rows)


def flags_text(r: EvalResult) -> str:
    rows = [f"* {f.code}: {f.message}" for f in r.flags if f.severity == "reject"]
    return "\n".join(rows) or f"* {r.message}"


def compiled_feedback(original: list, r: EvalResult) -> Optional[str]:
    """The compiled difference for the reflector, for a verified candidate that is slower than
    the original or spills; None otherwise (or when either side has no compile report)."""
    from agent.render import render_compiled_diff
    cand = [k for k in r.resources if k.variant is None]
    if not r.verified or not original or not cand:
        return None
    slow = r.speedup is not None and r.speedup < 1.0
    spills = any((k.spill_bytes or 0) > 0 for k in cand)
    if not (slow or spills):
        return None
    return render_compiled_diff(original, cand) or None


def measurement(r: EvalResult, compiled: Optional[str] = None) -> str:
    t = r.timing
    if t is None:
        why = r.timing_unavailable or "not measured"
        return f"Verified correct on every case. Not timed: {why}." + _compiled_block(compiled)
    lines = [f"Verified correct. Speedup over the original: {t.speedup:.3f}x (Σ ref {t.ref_ms:.4f} ms, "
             f"Σ candidate {t.cand_ms:.4f} ms, spread ±{t.spread_pct:.1f}%)."]
    for c in r.cases:
        ct = c.timing
        if ct:
            peak = f", {ct.cand_bw_pct_peak:.0f}% of peak bandwidth" if ct.cand_bw_pct_peak is not None else ""
            lines.append(f"* case {c.label} ({c.shapes}): {ct.ref_ms:.4f} ms -> {ct.cand_ms:.4f} ms "
                         f"({ct.speedup:.2f}x{peak})")
    for k in r.resources[:6]:
        lines.append(f"* {k.kernel} on {k.arch}: {k.registers} registers, {k.spill_bytes} B spilled, "
                     f"{k.shared_bytes} B shared memory")
    return "\n".join(lines) + _compiled_block(compiled)


def _compiled_block(compiled: Optional[str]) -> str:
    if not compiled:
        return ""
    return ("\n\nWhat the compiler made of it, against the original (compiled ahead of time; it is "
            "slower or spills, and these figures say where):\n\n```text\n" + compiled + "\n```")


def reflect(step: Step, task_block: str, symbol: str) -> tuple[str, str]:
    """(kind, prompt) for the next attempt after a failed ``step``."""
    r = step.result
    if step.outcome == "no_code":
        return "fix_no_code", prompts.render("no_code", task=task_block, reason=step.extraction, symbol=symbol)
    if step.outcome == "wrong":
        return "fix_wrong", prompts.render("reflect_wrong", task=task_block, candidate=step.source,
                                           cases=cases_text(r))
    if step.outcome == "rejected":
        return "fix_rejected", prompts.render("reflect_rejected", task=task_block, candidate=step.source,
                                              flags=flags_text(r))
    error = error_text(r)
    if step.truncated:
        error += "\n\nNote: your answer was cut off at the max-tokens limit; the code above may be incomplete."
    return "fix_did_not_run", prompts.render("reflect_did_not_run", task=task_block, candidate=step.source,
                                             status=r.status, error=error)
