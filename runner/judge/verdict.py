"""The verdict, decided in the pool's process (standard library only).

Inputs: the reference worker's judgments (trusted: that process never ran candidate code), the
candidate worker's observations (claims, which can only make a verdict worse), and what the
pool saw itself (processes left behind, namespaces, its own clock over the timed region).
Output: the ``EvalResult``.
"""

from __future__ import annotations

import math
from typing import Optional

from ..schema import (BYTES_BASES, UNWRITTEN, VARYING, CaseResult, CaseTiming, DeviceInfo, ErrorInfo, EvalRequest,
                      EvalResult, Flag, KernelResources, Timing, from_dict)

REF_SLOWDOWN_LIMIT = 1.25
GENERATED_MAX = 4 << 20  # bytes of Inductor code a result carries
"""The reference timed beside the candidate may be this much slower than timed alone (plus both
spreads) before the timing is not trusted."""


class Verdict:
    def __init__(self, req: EvalRequest, device: Optional[DeviceInfo]):
        self.req = req
        self.opts = req.options
        self.self_check = req.candidate is None
        self.require_triton = (self.opts.require_triton if self.opts.require_triton is not None
                               else not self.self_check)
        self.result = EvalResult(status="ok", correct=False, message="", id=req.id, device=device)
        self.cases: dict[int, CaseResult] = {}
        self.ref_ops: dict[str, int] = {}
        self.ref_raised: dict[int, str] = {}  # case -> what the original's own run raised there
        self.cand_ops: dict[str, int] = {}
        self.launches: dict[str, set[str]] = {"reference": set(), "candidate": set()}
        self.left_out: list[str] = []
        self.untimed_why: Optional[str] = None  # the first timed call that could not be timed, and why
        self.done = False
        self.static_rejects: list[Flag] = []
        self.static_checks()

    # ----------------------------------------------------------------- static checks

    def static_checks(self) -> None:
        """The candidate's files read statically, here, where no candidate code runs
        (``source.candidate_flags``): every flag goes into the result; a reject ends the
        evaluation as ``rejected`` (``static_rejected``). ``runner.serve.local.check_request`` does the
        same before any worker is taken; this is for a request that reaches the pool any other way."""
        if self.self_check:
            return
        from ..source import candidate_flags
        for f in candidate_flags(self.req):
            self.result.flags.append(f)
            if f.severity == "reject":
                self.static_rejects.append(f)

    def static_rejected(self) -> bool:
        """Rejected for what the static check found, unless the run already ended otherwise (a
        wrong answer, a crash, a rejection it observed: each is not correct either, and says
        what happened first)."""
        r = self.result
        if not self.static_rejects or (self.done and r.status != "ok"):
            return False
        first, more = self.static_rejects[0], len(self.static_rejects) - 1
        r.status, r.correct = "rejected", False
        r.message = first.message + (f" (and {more} more reason{'s' if more > 1 else ''} in the flags)"
                                     if more else "")
        self.done = True
        return True

    # ----------------------------------------------------------------- failures

    def fail(self, failure: dict) -> None:
        """A failure reported by a worker (the user's code raised, or a harness error)."""
        if self.done:
            return
        r = self.result
        r.status = failure.get("status", "crashed")
        r.correct = False
        r.message = failure.get("message", "")
        r.error = ErrorInfo(kind=failure.get("kind", "internal"), side=failure.get("side", "harness"),
                            message=r.message, hint=failure.get("hint"), traceback=failure.get("traceback"),
                            file=failure.get("file"), line=failure.get("line"))
        self.done = True

    def crashed(self, status: str, kind: str, side: str, message: str, hint: Optional[str] = None,
                log: Optional[str] = None) -> None:
        self.fail({"status": status, "kind": kind, "side": side, "message": message, "hint": hint,
                   "traceback": log})

    def reject(self, code: str, message: str) -> None:
        r = self.result
        if not any(f.code == code and f.message == message for f in r.flags):
            r.flags.append(Flag(code, "reject", message))
        if r.status != "rejected" and not (self.done and r.status != "ok"):
            r.status, r.correct, r.message = "rejected", False, message
            self.done = True

    def flag(self, code: str, severity: str, message: str) -> None:
        self.result.flags.append(Flag(code, severity, message))

    # ----------------------------------------------------------------- loading

    def loaded_reference(self, reply: dict) -> list[int]:
        """The cases that run here (in order)."""
        r = self.result
        r.inputs_convention = reply.get("convention")
        for n in reply.get("notes", []):
            self.flag("reference_note", "warning", n)
        run = []
        for c in reply.get("cases", []):
            cr = CaseResult(index=c["index"], label=c["label"], shapes=c.get("shapes", ""),
                            skipped=c.get("skipped"), detail=c.get("detail"))
            self.cases[cr.index] = cr
            r.cases.append(cr)
            if cr.skipped is None:
                run.append(cr.index)
        if not run:
            smallest = r.cases[0] if r.cases else None
            # Every case was left out for this device (too large, bf16 under the interpreter): not
            # run here, which says nothing of the code; "no_inputs" only when there is no case.
            self.crashed("compile_error", "not_run_here" if smallest else "no_inputs", "reference",
                         "no input case can run here: " + (smallest.skipped if smallest else "no cases"),
                         hint="add a small case to INPUT_CASES for the interpreter, or use a GPU runner")
            r.error.file = self.req.target.path
        return run

    def loaded_candidate(self, reply: dict) -> None:
        tampered = reply.get("tampered") or []
        if tampered and not self.self_check:
            self.reject("tampering", "importing the candidate replaced " + ", ".join(map(str, tampered[:6]))
                        + ": timers and library functions must not be changed")

    # ----------------------------------------------------------------- trials

    def reference_ran(self, case: int, reply: dict) -> None:
        self.ref_ops = _max_counts(self.ref_ops, reply.get("ops") or {})
        self.launches["reference"] |= set(reply.get("launches") or [])
        cr = self.cases[case]
        if reply.get("shapes") and not cr.shapes:
            cr.shapes = reply["shapes"]
        for b in reply.get("oob") or []:
            note = f"{cr.label}: the original writes outside its tensors ({b})"
            if not any(f.message == note for f in self.result.flags):
                self.flag("reference_note", "warning", note)
        for b in reply.get("reads_outside") or []:
            note = (f"{cr.label}: the original reads outside its tensors ({b}): what it reads there is no "
                    "tensor's data, and its results may change with it")
            if not any(f.message == note for f in self.result.flags):
                self.flag("reference_note", "warning", note)
        if reply.get("raised"):
            self.ref_raised[case] = str(reply["raised"])
            note = f"{cr.label} fails on the original code: {reply['raised']}"
            if not any(f.message == note for f in self.result.flags):
                self.flag("reference_note", "warning", note)

    def skip(self, case: int, reason: str) -> None:
        self.cases[case].skipped = reason

    def candidate_ran(self, reply: dict) -> None:
        self.launches["candidate"] |= set(reply.get("launches") or [])
        pinned = [str(k) for k in (reply.get("pinned") or [])][:8]
        if pinned and not any(f.code == "autotune_pinned" for f in self.result.flags):
            self.flag("autotune_pinned", "info",
                      "checked with the @triton.autotune config the original chose for each key: "
                      + ", ".join(pinned) + (" (and timed with it)" if self.self_check
                                             else " (timing lets each side choose its own)"))

    def judged(self, case: int, trial: int, reply: dict, seed: int) -> bool:
        cr = self.cases[case]
        cr.trials += 1
        for k, attr in (("max_abs", "max_abs_err"), ("max_rel", "max_rel_err")):
            v = reply.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                setattr(cr, attr, max(getattr(cr, attr) or 0.0, float(v)))
        for note in reply.get("left_out") or []:
            if note not in self.left_out:
                self.left_out.append(note)
            cr.excluded = "; ".join(dict.fromkeys(([cr.excluded] if cr.excluded else []) + [note]))
        if reply.get("passed"):
            cr.passed = True
            return True
        cr.passed = False
        cr.detail = f"{reply.get('detail') or 'outputs differ'} (seed {seed})"
        if reply.get("no_answer"):
            # Not the candidate's fault: the original gives different results on the same
            # inputs (it reads memory outside its tensors, or races), so there is nothing to
            # check the candidate against there.
            self.crashed("runtime_error", "original_varies", "reference",
                         f"{cr.label}: cannot be checked: {cr.detail}",
                         hint="make the original deterministic (mask its loads to its tensors; no races), or "
                              "check another case (--cases)")
        return False

    # ----------------------------------------------------------------- anti-cheat

    def observed(self, obs: dict, extra_processes: int) -> None:
        r = self.result
        self.cand_ops = dict(obs.get("ops") or {})
        self.launches["candidate"] |= set(obs.get("launches") or [])
        r.launches = {s: sorted(v) for s, v in self.launches.items()}
        r.torch_ops = {"candidate": sorted(self.cand_ops)}
        if self.ref_ops:
            r.torch_ops["reference"] = sorted(self.ref_ops)
        if self.self_check:
            if not self.launches["candidate"]:
                self.flag("no_triton_launch", "info", "no Triton kernel launched: the target runs on PyTorch alone")
            return
        ran = [c for c in r.cases if c.trials and not c.skipped]
        if ran and all(c.index in self.ref_raised for c in ran) and not self.launches["candidate"]:
            # The original's own test fails on this device in every case that ran, and the
            # candidate fails the same way: nothing was computed to compare, by either.
            first = self.ref_raised[ran[0].index]
            self.crashed("runtime_error", "original_fails_here", "reference",
                         f"the original's own test fails on this device ({first}), and so does the candidate's: "
                         "nothing can be compared here", hint="run on a runner where the original runs (a GPU "
                         "runner: --runner URL), or give the file inputs the CPU interpreter can run")
            return
        failed = any(c.trials and not c.passed for c in r.cases)  # a candidate whose test raised, say:
        if self.require_triton and not self.launches["candidate"] and not failed:  # that is what it is told
            self.reject("no_triton_launch", "the candidate launched no Triton kernel while computing its outputs")
        if obs.get("side_stream"):
            self.reject("side_stream", "the candidate launched work on a stream other than the current one, "
                                       "where the timer cannot see it")
        calls = int(obs.get("reference_calls") or 0)
        if calls:
            self.reject("calls_reference", f"the candidate calls the reference {self.req.target.symbol} "
                                           f"({calls} call(s))")
        allowed = set(self.opts.allow_torch_ops)
        extra = {op: n for op, n in self.cand_ops.items()
                 if op not in allowed and op.split(".")[-1] not in allowed and n > self.ref_ops.get(op, 0)}
        if extra and (self.require_triton or self.opts.allow_torch_ops):
            shown = ", ".join(f"{o} ×{n}" for o, n in sorted(extra.items())[:8])
            self.reject("torch_compute", f"the candidate computes with PyTorch ops ({shown}) beyond what the "
                                         "reference itself uses; only allocation, views and copies are allowed "
                                         "besides Triton kernels (allow more with allow_torch_ops)")
        tampered = obs.get("tampered") or []
        if tampered:
            self.reject("tampering", "the candidate replaced " + ", ".join(map(str, tampered[:6])))
        if obs.get("threads_left"):
            self.reject("background_thread", f"the candidate left {obs['threads_left']} thread(s) running after "
                                             "it returned")
        if extra_processes:
            self.reject("background_process", f"the candidate left {extra_processes} process(es) running after "
                                              "it returned")
        if not failed:  # a wrong answer is reported as one (mismatch, next)
            self.static_rejected()

    def mismatch(self) -> bool:
        bad = [c for c in self.result.cases if c.trials and not c.passed]
        if not bad:
            return False
        run = [c for c in self.result.cases if not c.skipped]
        self.result.status = "mismatch"
        self.result.message = (f"wrong result on {len(bad)} of {len(run)} case(s); first: "
                               f"{bad[0].label}: {bad[0].detail}")
        self.done = True
        return True

    # ----------------------------------------------------------------- after correctness

    def generated(self, got) -> None:
        """Inductor's module as the worker wrote it down (a claim: only text, cut to its size)."""
        if not isinstance(got, dict):
            got = {"error": "the worker gave no account of what PyTorch's compiler wrote"}
        size = sum(len(v.get("code") or "") for v in (got.get("variants") or [got]) if isinstance(v, dict))
        if size > GENERATED_MAX:
            got = {"error": f"PyTorch's compiler wrote more than {GENERATED_MAX >> 20} MB of code"}
        self.result.generated = got

    def resources(self, items: list) -> None:
        out = []
        from ..aot import share_listings  # noqa: imports no torch at module level
        for item in items:
            try:
                out.append(from_dict(KernelResources, item))
            except Exception:
                continue
        share_listings(out)  # the workers' claims, kept to the size they may have
        self.result.resources = out

    def timed(self, case: int, t: dict, alone: Optional[dict], wall_s: float) -> None:
        """One case's timing from the candidate's process, checked against the reference timed
        alone (in its own process) and the pool's clock over the time op."""
        cr = self.cases[case]
        ref_ms, cand_ms = _num(t.get("ref_ms")), _num(t.get("cand_ms"))
        reps = int(t.get("reps") or 0)
        if ref_ms is None or cand_ms is None or ref_ms <= 0 or cand_ms <= 0 or reps <= 0:
            self.untrusted(f"case '{cr.label}': the timing it reported is not usable")
            return
        # Reps of both sides happened inside the op: they cannot add up to more than its wall time.
        if reported_busy_s(t, reps, ref_ms, cand_ms) > wall_s * 1.05 + 0.01:
            self.untrusted(f"case '{cr.label}': the reported times add up to more than the "
                           f"{wall_s:.3f} s the timing took")
            return
        slowed = reference_slowed(t, alone)
        if slowed:
            self.untrusted(f"case '{cr.label}': {slowed}")
            return
        ct = CaseTiming(ref_ms=ref_ms, cand_ms=cand_ms, speedup=ref_ms / cand_ms,
                        ref_spread_pct=float(t.get("ref_spread_pct") or 0),
                        cand_spread_pct=float(t.get("cand_spread_pct") or 0), reps=reps,
                        method=str(t.get("method") or "events"), bytes_moved=_int(t.get("bytes_moved")),
                        bytes_basis=t.get("bytes_basis") if t.get("bytes_basis") in BYTES_BASES else None)
        dev = self.result.device
        if dev and dev.peak_bandwidth_gbs and ct.bytes_moved:
            ct.cand_bw_pct_peak = 100.0 * ct.bytes_moved / (cand_ms * 1e-3) / (dev.peak_bandwidth_gbs * 1e9)
        flops = _num(t.get("flops"))
        if flops:
            ct.cand_tflops = flops / (cand_ms * 1e-3) / 1e12
            key = str(t.get("dtype") or "float32")
            key = "tf32" if key == "float32" else ("float8" if "float8" in key else key)
            peak = dev.peak_tflops.get(key) if dev else None
            if peak:
                ct.cand_flops_pct_peak = 100.0 * ct.cand_tflops / peak
        self.beyond_peak(cr.label, ct)
        cr.timing = ct
        for n in list(t.get("notes") or []) + list(t.get("notes_work") or []):
            if not any(f.message == n for f in self.result.flags):
                self.flag("timing_note", "info", str(n))
        for hw in t.get("hidden_work") or []:
            self.flag("hidden_work", "warning", f"case '{cr.label}': {hw}")

    def beyond_peak(self, label: str, ct: CaseTiming) -> None:
        """A share of peak over 100% is no share: the bytes or FLOPs counted are more than the
        kernel does (a kernel that touches part of its tensors, a get_bytes or get_flops that
        overcounts). It is left unknown, never shown or used to stop a search, and said why."""
        if ct.cand_bw_pct_peak is not None and ct.cand_bw_pct_peak > 100:
            counted = ("the file's get_bytes" if ct.bytes_basis == "get_bytes" else
                       "its inputs and outputs, counted from their sizes")
            self.flag("exceeds_peak", "warning",
                      f"case '{label}': {counted} ({ct.bytes_moved / 1e6:.3g} MB) in {ct.cand_ms:.4g} ms would be "
                      f"{ct.cand_bw_pct_peak:.0f}% of the GPU's peak bandwidth, more than it can move: the kernel "
                      "moves less than that, so its share of peak is unknown"
                      + ("" if ct.bytes_basis == "get_bytes" else
                         " (it touches part of its tensors; a get_bytes in the file would say what it moves)"))
            ct.cand_bw_pct_peak = None
        if ct.cand_flops_pct_peak is not None and ct.cand_flops_pct_peak > 100:
            self.flag("exceeds_peak", "warning",
                      f"case '{label}': the file's get_flops in {ct.cand_ms:.4g} ms would be "
                      f"{ct.cand_flops_pct_peak:.0f}% of the GPU's peak FLOP/s, more than it can compute: "
                      "get_flops counts more than the kernel does, so its share of peak is unknown")
            ct.cand_flops_pct_peak = None

    def not_timed(self, case: int, why: str) -> None:
        """A call of the case that is not timed, and why; the first such reason is what the
        result says when no case was timed at all."""
        msg = f"case '{self.cases[case].label}': {why}; that call is not timed"
        self.untimed_why = self.untimed_why or msg
        if not any(f.message == msg for f in self.result.flags):
            self.flag("timing_note", "info", msg)

    def nothing_to_time(self, case: int, why: str) -> None:
        """A case with no call to time at all, and why (said when no case was timed)."""
        self.untimed_why = self.untimed_why or f"case '{self.cases[case].label}': {why}"

    def untrusted(self, why: str) -> None:
        self.flag("timing_untrusted", "warning", why + "; no speedup is claimed")
        self.result.timing_unavailable = "timing not trusted: " + why

    def finish_timing(self) -> None:
        r = self.result
        per = [c.timing for c in r.cases if c.timing]
        if r.timing_unavailable and r.timing_unavailable.startswith("timing not trusted"):
            for c in r.cases:
                c.timing = None
            return
        if not per:
            why = self.untimed_why
            r.timing_unavailable = r.timing_unavailable or ("no case was timed" + (f" ({why})" if why else ""))
            return
        ref_sum, cand_sum = sum(p.ref_ms for p in per), sum(p.cand_ms for p in per)
        geo = math.exp(sum(math.log(p.speedup) for p in per) / len(per))
        r.timing = Timing(ref_ms=ref_sum, cand_ms=cand_sum, speedup=ref_sum / cand_sum, speedup_geomean=geo,
                          spread_pct=max(max(p.ref_spread_pct, p.cand_spread_pct) for p in per),
                          method="+".join(sorted({p.method for p in per})), cases_timed=len(per))
        if not self.self_check and r.timing.speedup > self.opts.speedup_flag:
            self.flag("suspicious_speedup", "warning",
                      f"{r.timing.speedup:.1f}x faster is above {self.opts.speedup_flag:g}x: have a person "
                      "check that the candidate does all the work")

    def changed_when_timed(self, case: int, detail: str) -> None:
        """The candidate's run after timing is wrong (the original's check has no such run)."""
        cr = self.cases[case]
        self.reject("changes_when_timed", f"after timing, the candidate's output on case '{cr.label}' is wrong: {detail}")

    # ----------------------------------------------------------------- the end

    def summary(self) -> str:
        r = self.result
        run = [c for c in r.cases if not c.skipped]
        skipped = len(r.cases) - len(run)
        base = ("the target runs and agrees with itself" if self.self_check else "correct") + \
            f" on {len(run)} case(s) × {max((c.trials for c in run), default=0)} trial(s)"
        if skipped:
            base += f" ({skipped} skipped here)"
        if self.left_out:
            base += "; parts the original leaves unwritten or gives other values on each run are not compared" \
                if any(VARYING in n for n in self.left_out) and any(UNWRITTEN in n for n in self.left_out) else \
                "; parts that differ between two runs of the original are not compared" \
                if any(VARYING in n for n in self.left_out) else "; parts the original leaves unwritten are not compared"
        if r.timing:
            t = r.timing
            if self.self_check:
                base += f"; {t.ref_ms:.4f} ms (Σ over {t.cases_timed} case(s))"
            else:
                base += f"; {t.speedup:.2f}x ({t.ref_ms:.4f} ms -> {t.cand_ms:.4f} ms)"
        return base

    def finish(self) -> EvalResult:
        r = self.result
        self.static_rejected()
        r.launches = r.launches or {s: sorted(v) for s, v in self.launches.items() if v}
        for code, severity, notes in (("unwritten_output", "info", [n for n in self.left_out if VARYING not in n]),
                                      ("nondeterministic_original", "warning",
                                       [n for n in self.left_out if VARYING in n])):
            if notes:
                self.flag(code, severity, "left out of the comparison: " + "; ".join(notes[:4])
                          + (f" (and {len(notes) - 4} more)" if len(notes) > 4 else ""))
        if not self.done:
            r.status, r.correct = "ok", True
            r.message = self.summary()
        return r


def static_rejection(req: EvalRequest) -> Optional[EvalResult]:
    """The result for a request whose candidate the static check rejects, before anything of it
    runs (``runner.serve.local.check_request``); None when it does not."""
    v = Verdict(req, None)
    if not v.static_rejects:
        return None
    return v.finish()


def _max_counts(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, int):
            out[k] = max(out.get(k, 0), v)
    return out


def _num(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _int(v) -> Optional[int]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def reported_busy_s(t: dict, reps: int, ref_ms: float, cand_ms: float) -> float:
    """The device time a case's reported timing says its reps took, seconds: each call's reps
    by that call's two times (``per_call``: [reps, ref_ms, cand_ms] a call, from
    ``Side.time_pairs``). The case's figures are sums over its calls, and so is its reps count:
    all reps by the sum of the times counts a slow call's time once for each rep of a fast one
    (TritonBench-G's triton_argmax: four calls from 3 µs to 0.7 ms, called untrusted on an
    H100). A ``per_call`` that does not add up to the case's figures is not used: then all reps
    by the summed times, the stricter bound."""
    strict = reps * (ref_ms + cand_ms) / 1000.0
    rows = t.get("per_call")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) and len(r) == 3 for r in rows):
        return strict
    n, a, b = [_int(r[0]) for r in rows], [_num(r[1]) for r in rows], [_num(r[2]) for r in rows]
    if any(x is None or x <= 0 for x in n) or any(x is None or x <= 0 for x in a + b):
        return strict
    if sum(n) != reps or not math.isclose(sum(a), ref_ms, rel_tol=1e-6) \
            or not math.isclose(sum(b), cand_ms, rel_tol=1e-6):
        return strict
    return sum(k * (x + y) for k, x, y in zip(n, a, b)) / 1000.0


def reference_slowed(t: Optional[dict], alone: Optional[dict]) -> Optional[str]:
    """Why the reference timed beside the candidate (``t``, from the candidate's process) cannot
    be trusted against the reference timed alone (``alone``, from its own process): it ran more
    than ``REF_SLOWDOWN_LIMIT`` (plus both spreads) slower there; None when it did not, or when
    either figure is missing."""
    if not t or not alone:
        return None
    ref_ms, ref_alone = _num(t.get("ref_ms")), _num(alone.get("ref_ms"))
    if not ref_ms or not ref_alone:
        return None
    spread = (float(t.get("ref_spread_pct") or 0) + float(alone.get("spread_pct") or 0)) / 100
    if ref_ms > ref_alone * (REF_SLOWDOWN_LIMIT + spread) and ref_ms - ref_alone > 0.005:
        return (f"the reference ran {ref_ms / ref_alone:.2f}x slower beside the candidate ({ref_ms:.4f} ms) "
                f"than alone ({ref_alone:.4f} ms)")
    return None
