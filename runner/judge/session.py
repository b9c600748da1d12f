"""One evaluation: the pool's conversation with a reference worker and a candidate worker.

Standard library only (the pool's process never imports torch). The steps, each an op of
``runner.worker.channel``:

1. load both sides at once (import stage): the reference finds the cases; the candidate imports
   its tree (and the reference's, to time it);
2. per case and trial (run stage): the reference writes the inputs and runs; the candidate runs
   on those inputs and writes its record; the reference judges it. A wrong trial ends its case;
3. the candidate's observations (anti-cheat), then the processes it left behind;
4. ahead-of-time compile reports, when asked for;
5. on a GPU (timing stage), per case under the exclusive device lock: the reference timed alone
   in its own process, then reference and candidate interleaved in the candidate's; then the
   candidate runs once more on fresh inputs and must still be right.

The verdict is assembled by ``runner.judge.verdict`` from what each side said.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import Optional

from .. import sandbox
from .process import FROM_CANDIDATE, FROM_REFERENCE, Budget, WorkerProcess, Stopped, promote_compiles
from ..schema import EvalRequest, EvalResult, beats
from .verdict import Verdict, reference_slowed


class Evaluation:
    def __init__(self, pool, req: EvalRequest, ref: WorkerProcess, cand: WorkerProcess, xdirs: tuple[str, str],
                 started: Optional[float] = None):
        self.pool, self.req, self.opts = pool, req, req.options
        self.end_by = (started if started is not None else time.monotonic()) + req.options.limits.total_s
        """``limits.total_s`` after the evaluation was accepted: no phase runs past it."""
        self.ref, self.cand = ref, cand
        self.xdirs = {id(ref): xdirs[0], id(cand): xdirs[1]}
        """Each side's exchange directory, in its own scratch (see ``relay``)."""
        self.v = Verdict(req, cand.device or ref.device)
        self.marks = {id(ref): ref.log_count, id(cand): cand.log_count}
        self.stages: dict[str, float] = {}
        self.stage = "import"
        self.ran: list[int] = []
        self.together = False
        """The candidate's first run of a case starts with the reference's (``load`` says when)."""
        from ..units import resolve
        self.opts.unit = resolve(self.opts.unit, req.files.get(req.target.path, ""))
        limits = self.opts.limits
        for job in (ref, cand):
            job.memory_limit_mb = limits.memory_mb
            job.new_evaluation()

    def budget(self, phase_s: float) -> Budget:
        """A phase's limit, no longer than what ``limits.total_s`` leaves of the evaluation."""
        return Budget(max(0.05, min(phase_s, self.end_by - time.monotonic())))

    @property
    def gpu(self) -> bool:
        d = self.cand.device
        return d is not None and d.is_gpu

    def seed(self, case: int, trial: int) -> int:
        return self.opts.seed + 1000 * case + (trial if trial >= 0 else 997)

    # ----------------------------------------------------------------- the steps

    def run(self) -> EvalResult:
        v = self.v
        try:
            run = self.load()
            if run is not None and not v.done:
                self.trials(run)
            if not v.done:
                self.observe()
            if not v.done and not v.mismatch():
                self.after_correctness(run)
        except Stopped as s:
            self.stopped(s)
        finally:
            self.ref.memory_limit_mb = None
        return self.finish()

    def load(self) -> Optional[list[int]]:
        t0 = time.monotonic()
        limit = self.opts.limits.import_s
        replies: dict[str, object] = {}

        def go(name: str, job: WorkerProcess, msg: dict):
            try:
                replies[name] = job.call(msg, "read", self.budget(limit))
            except Stopped as s:
                replies[name] = s

        base = {"request": _request_dict(self.req), "layer": self.ref.digest}
        ref_base = {**base, "exchange": self.xdirs[id(self.ref)]}
        ref_msg = {"op": "attach", **ref_base} if self.ref.loaded is not None \
            else {"op": "load", "role": "reference", **ref_base, "described": self.pool.described(self.ref.digest)}
        threads = [threading.Thread(target=go, args=("reference", self.ref, ref_msg)),
                   threading.Thread(target=go, args=("candidate", self.cand,
                                                     {"op": "load", "role": "candidate", **base,
                                                      "exchange": self.xdirs[id(self.cand)]}))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.stages["import"] = time.monotonic() - t0
        for name in ("reference", "candidate"):
            r = replies.get(name)
            if isinstance(r, Stopped):
                raise r
        ref_reply = replies["reference"]
        self.relay(self.ref)
        if ref_msg["op"] == "load" and "failure" not in ref_reply:
            self.ref.loaded = ref_reply
            if ref_msg["described"] is None and isinstance(ref_reply.get("cases"), list):
                self.pool.remember_cases(self.ref.digest, ref_reply["cases"])
        if "failure" in ref_reply:
            self.ref.clean = False
            self.v.fail(ref_reply["failure"])
            return None
        self.ref.uses += 1
        loaded = self.ref.loaded or ref_reply
        run = self.v.loaded_reference(loaded)
        # A test makes its own inputs: the candidate's first run need not wait for the
        # reference's, unless the candidate is to start from the reference's autotune choices.
        self.together = self.opts.unit == "tests" and loaded.get("autotuned") is False
        cand_reply = replies["candidate"]
        if "failure" in cand_reply:
            self.v.fail(cand_reply["failure"])
            return None
        self.v.loaded_candidate(cand_reply)
        return run

    def ask(self, job: WorkerProcess, msg: dict, budget: Budget, lock: Optional[str] = "read") -> Optional[dict]:
        """One op; a failure reply ends the evaluation (None)."""
        return self.settle(job, job.call(msg, lock, budget))

    def trials(self, run: list[int]) -> None:
        """Per case, the trials in a pipeline: while the candidate runs trial t, the reference
        prepares trial t + 1; then the reference judges trial t."""
        self.stage = "run"
        t0 = time.monotonic()
        rb, cb = self.budget(self.opts.limits.run_s), self.budget(self.opts.limits.run_s)
        ran: list[int] = []
        try:
            for case in run:
                outcome = self.case_trials(case, rb, cb)
                if outcome is None:  # the evaluation ended
                    return
                if outcome != "skipped":
                    ran.append(case)
        finally:
            self.ran = ran
            self.stages["run"] = time.monotonic() - t0
        if not ran and not self.v.done:
            first = next((c for c in self.v.result.cases if c.skipped), None)
            self.v.crashed("compile_error", "not_run_here" if first else "no_inputs", "reference",
                           "no input case can run here: " + (first.skipped if first else "no cases"),
                           hint="add a small case to INPUT_CASES for the interpreter, or use a GPU runner")

    @property
    def n_trials(self) -> int:
        """Trials per case. The original's check (no candidate) runs one: the original against
        itself in a second process on one draw per case shows it runs and agrees with itself;
        the other draws are made when a candidate is judged on them (the reference worker keeps
        each draw's run for every later candidate), not twice before any search begins."""
        return 1 if self.v.self_check else max(1, self.opts.trials)

    def case_trials(self, case: int, rb: Budget, cb: Budget):
        """True (every trial right), False (a wrong trial), "skipped", or None (the end)."""
        early = self.start_candidate(case, 0, cb) if self.together else None
        try:
            r = self.settle(self.ref, self.ref.call({"op": "reference", "case": case, "trial": 0}, "read", rb))
        except BaseException:
            if early is not None:  # the evaluation ends with the reference: the candidate's run is not waited for
                self.cand.kill("stopped", "the evaluation ended on the reference's side")
                early[0].join()
            raise
        if early is not None:
            if r is None:
                self.cand.kill("stopped", "the evaluation ended on the reference's side")
            early[0].join()
        if r is None or r.get("skipped"):
            if early is not None:
                # Its run is of no use now (nothing to judge it against): what it handed over is
                # dropped, and a candidate stopped by a limit still ends the evaluation.
                self.cand.discard_outbox()
                if isinstance(early[1].get("c"), Stopped) and r is not None:
                    raise early[1]["c"]
            if r is None:
                return None
            self.v.skip(case, r["skipped"])
            return "skipped"
        promote_compiles(self.ref, self.pool.compile_cache, self.ref.digest)  # the candidate finds them compiled
        self.v.reference_ran(case, r)
        trials = self.n_trials
        run = early if early is not None else self.start_candidate(case, 0, cb)
        # While the candidate runs trial t, the reference runs trial t + 1 (``nxt``) and judges
        # trial t - 1. Nothing is relayed while the candidate's op is under way: each reply is
        # settled once the candidate's run is joined.
        nxt = self.beside(run, lambda: self.ref.call({"op": "reference", "case": case, "trial": 1}, "read", rb)
                          if trials > 1 else None)
        for trial in range(trials):
            if isinstance(run[1]["c"], Stopped):
                raise run[1]["c"]
            c = self.settle(self.cand, run[1]["c"])
            if c is None:
                return None
            self.v.candidate_ran(c)
            if nxt is not None:
                if self.settle(self.ref, nxt) is None:
                    return None
                self.v.reference_ran(case, nxt)
            judge = {"op": "judge", "case": case, "trial": trial}
            if trial + 1 == trials:
                j = self.ask(self.ref, judge, rb)
                return None if j is None else self.v.judged(case, trial, j, self.seed(case, trial))

            def reference_side(trial=trial, judge=judge):
                j = self.ref.call(judge, "read", rb)
                more = "failure" not in j and j.get("passed") and trial + 2 < trials
                return j, (self.ref.call({"op": "reference", "case": case, "trial": trial + 2}, "read", rb)
                           if more else None)

            run = self.start_candidate(case, trial + 1, cb)  # the next trial, while this one is judged
            j, nxt = self.beside(run, reference_side)
            j = self.settle(self.ref, j)
            if j is None:
                self.cand.discard_outbox()
                return None
            if not self.v.judged(case, trial, j, self.seed(case, trial)):
                # The case ends here: the next trial's run is of no use. A candidate that died in
                # it cannot go on to the next case.
                self.cand.discard_outbox()
                if isinstance(run[1]["c"], Stopped):
                    raise run[1]["c"]
                return False
        return True

    def beside(self, run: tuple[threading.Thread, dict], reference_side):
        """``reference_side()`` (the reference's ops) while the candidate's ``run`` goes on; then
        the run is joined. If the reference's side raises (it died, or reached a limit), the
        candidate's run is killed rather than waited for."""
        try:
            out = reference_side()
        except BaseException:
            self.cand.kill("stopped", "the evaluation ended on the reference's side")
            run[0].join()
            raise
        run[0].join()
        return out

    def start_candidate(self, case: int, trial: int, cb: Budget) -> tuple[threading.Thread, dict]:
        """The candidate's run of (case, trial), started on a thread: (thread, box); the reply,
        or the ``Stopped`` that ended it, is ``box["c"]`` once the thread is joined."""
        box: dict = {}

        def candidate():
            try:
                box["c"] = self.cand.call({"op": "candidate", "case": case, "trial": trial}, "read", cb)
            except Stopped as s:
                box["c"] = s

        th = threading.Thread(target=candidate)
        th.start()
        return th, box

    def relay(self, job: WorkerProcess) -> None:
        """Hand what ``job`` (a side that just replied) gave for the other side to it: each
        side writes only in its own scratch and sees no other. Only what is named for that
        direction moves (the reference's inputs, timing inputs and autotune choices; the
        candidate's outputs): shared-memory files the pool checked are sealed (sent with the
        other side's next op), and regular files, by rename, only those with no other name (so
        none that the writer could still change through a second link)."""
        src = self.xdirs[id(job)]
        to_ref = job is self.cand
        other = self.ref if to_ref else self.cand
        dst = self.xdirs[id(other)]
        allowed = FROM_CANDIDATE if to_ref else FROM_REFERENCE
        # Shared memory (sealed memfds: runner.worker.exchange) first, then files.
        for name in list(job.outbox):
            fd = job.outbox.pop(name)
            if name.startswith(allowed) and ".tmp-" not in name:
                other.hand(name, fd)
            else:
                os.close(fd)
        try:
            names = os.listdir(src)
        except OSError:
            return
        for name in names:
            if not name.startswith(allowed) or ".tmp-" in name:
                continue
            path = os.path.join(src, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    continue
                os.replace(path, os.path.join(dst, name))
            except OSError:
                continue

    def settle(self, job: WorkerProcess, reply: dict) -> Optional[dict]:
        """A reply, or None when it reports a failure (which ends the evaluation)."""
        self.relay(job)
        if "failure" in reply:
            if job is self.ref:
                self.ref.clean = False
            self.v.fail(reply["failure"])
            return None
        return reply

    def observe(self) -> None:
        obs = self.ask(self.cand, {"op": "observe"}, self.budget(self.opts.limits.run_s), None)
        if obs is None:
            return
        # Every process of the job but the worker and its parents (the job's init) is left over:
        # children of the worker, and orphans the init took in.
        # The worker's pid as the kernel gave it with its first message (SCM_CREDENTIALS).
        worker = self.cand.sender or self.cand.worker_pid() or self.cand.find_worker()
        if not worker:  # not found (a busy machine's /proc read at the hello): nothing to tell
            self.v.observed(obs, 0)
            return
        table = sandbox.process_table()
        chain = set()
        p = worker
        while p and p != self.cand.keeper and p not in chain:
            chain.add(p)
            p = table.get(p)
        extra = [p for p in (sandbox.descendants(self.cand.keeper, table) if self.cand.keeper else [])
                 if p not in chain]
        self.v.observed(obs, len(extra))

    def after_correctness(self, run) -> None:
        if self.opts.inductor:
            t0 = time.monotonic()
            got = self.ask(self.cand, {"op": "inductor"}, self.budget(max(self.opts.limits.run_s, 120.0)), None)
            self.stages["generate"] = time.monotonic() - t0
            if got is None:
                return
            self.v.generated(got.get("generated"))
        if self.opts.aot_arch:
            res = self.ask(self.cand, {"op": "aot"}, self.budget(self.opts.limits.run_s), None)
            if res is None:
                return
            resources = list(res.get("resources") or [])
            if res.get("compile"):  # what the interpreter's process cannot compile (runner.aot)
                t0 = time.monotonic()
                resources += self.pool.compile(res["compile"], self.budget(self.opts.limits.run_s))
                self.cand.compile_s += time.monotonic() - t0
            self.v.resources(resources)
        if not self.gpu:
            self.v.result.timing_unavailable = ("CPU interpreter: correctness only, no timing; connect a GPU "
                                                "runner (--runner URL or GEAK_RUNNER_URL) to measure speed")
            return
        if not self.opts.timing:
            self.v.result.timing_unavailable = "timing not requested"
            return
        self.timing(self.ran)

    def timing(self, cases: list[int]) -> None:
        self.stage = "timing"
        t0 = time.monotonic()
        limits = self.opts.limits
        tb, rb = self.budget(limits.timing_s), self.budget(limits.timing_s)
        for case in cases:
            if self.v.self_check:
                if not self.time_self(case, tb):
                    break
                continue
            got = self.ask(self.ref, {"op": "time_inputs", "case": case}, rb)
            if got is None:
                break
            for why in got.get("not_timed") or []:
                self.v.not_timed(case, f"{why}, which cannot be handed to the timing process")
            if got.get("none"):
                self.v.nothing_to_time(case, str(got["none"]))
            if not got.get("calls"):
                continue
            self.cand.take_device("write")
            alone = None
            try:
                t0_op = time.monotonic()
                t = self.ask(self.cand, {"op": "time", "case": case}, tb, "held")
                wall = time.monotonic() - t0_op
                if t is not None and _claims_faster(t.get("timing")) and not self.v.self_check:
                    # A candidate that looks faster: the reference timed by itself, in its own
                    # process, must agree with the reference timed beside the candidate.
                    # A figure of it from a recent evaluation serves (the reference alone does
                    # not depend on the candidate), unless it disagrees: then it is timed anew.
                    alone = self.ask(self.ref, {"op": "time_alone", "case": case, "reuse": True}, rb, "held")
                    if alone is not None and alone.get("reused_s") is not None \
                            and reference_slowed(t.get("timing"), alone):
                        alone = self.ask(self.ref, {"op": "time_alone", "case": case}, rb, "held")
                    if alone is None:
                        break
            finally:
                self.cand.release_device("write")
            if t is None:
                break
            if t.get("timing"):
                self.v.timed(case, t["timing"], alone, wall)
            if not self.v.self_check and not self.post_check(case):
                break
        self.stages["timing"] = time.monotonic() - t0
        if not self.v.done:
            self.v.finish_timing()

    def time_self(self, case: int, tb: Budget) -> bool:
        """The original's check: the original against itself, timed in the reference's own
        process (nothing handed over, nothing autotuned again). False: the evaluation ended."""
        self.ref.take_device("write")
        try:
            t0 = time.monotonic()
            got = self.ask(self.ref, {"op": "time_self", "case": case}, tb, "held")
            wall = time.monotonic() - t0
        finally:
            self.ref.release_device("write")
        if got is None:
            return False
        for why in got.get("not_timed") or []:
            self.v.not_timed(case, why)
        if got.get("none"):
            self.v.nothing_to_time(case, str(got["none"]))
        if got.get("timing"):
            self.v.timed(case, got["timing"], None, wall)
        return True

    def post_check(self, case: int) -> bool:
        """After timing, the candidate on fresh inputs must still be right."""
        rb, cb = self.budget(self.opts.limits.run_s), self.budget(self.opts.limits.run_s)
        at = {"case": case, "trial": -1}
        if self.ask(self.ref, {"op": "reference", **at}, rb) is None:
            return False
        if self.ask(self.cand, {"op": "candidate", **at}, cb) is None:
            return False
        j = self.ask(self.ref, {"op": "judge", **at}, rb)
        if j is None:
            return False
        if not j.get("passed"):
            self.v.changed_when_timed(case, j.get("detail") or "outputs differ")
            return False
        return True

    # ----------------------------------------------------------------- endings

    def stopped(self, s: Stopped) -> None:
        job = s.job
        side = "reference" if job is self.ref else "candidate"
        job.clean = False
        stage = self.stage
        where = job.where or f" (the {side})"
        log = job.log_since(self.marks[id(job)])
        limits = self.opts.limits
        if s.kind == "timeout" and time.monotonic() >= self.end_by - 0.1:
            self.v.crashed("timeout", "timeout", side,
                           f"reached the evaluation's limit of {limits.total_s:g} s in all (limits.total_s) in the "
                           f"{stage} phase{where}; the worker was killed",
                           hint="a time budget lowers limits.total_s to the time it leaves; otherwise raise it "
                                "([tool.geak.limits])", log=log)
            self.v.result.status = "timeout"
        elif s.kind == "timeout":
            limit = {"import": limits.import_s, "run": limits.run_s, "timing": limits.timing_s}[stage]
            self.v.crashed("timeout", "timeout",
                           side, f"timed out after {limit:g} s in the {stage} phase{where}; the worker was killed",
                           hint="an endless loop or a kernel that never finishes? If the work is just long, "
                                "raise the limit (--timeout, or [tool.geak.limits]; a runner daemon caps "
                                "limits at its own ceilings)", log=log)
            self.v.result.status = "timeout"
        elif s.kind == "wait":
            self.v.crashed("timeout", "wait", "harness", f"{s.message} (limits.wait_s, "
                           f"{limits.wait_s:g} s), before the {stage} phase{where} could go on",
                           hint="fewer evaluations at once on this GPU, or a longer limits.wait_s")
            self.v.result.status = "timeout"
        elif s.kind == "host_oom":
            self.v.crashed("crashed", "host_oom", side, f"{s.message} in the {stage} phase{where}; the worker was "
                                                        "killed", log=log)
        else:
            hint = "out-of-bounds loads or stores crash the interpreter; check masks" if s.kind == "segfault" else None
            self.v.crashed("crashed", s.kind, side, f"{s.message} in the {stage} phase{where}", hint=hint, log=log)
        self.pool.replaced += 1

    def finish(self) -> EvalResult:
        r = self.v.finish()
        r.log = "\n".join(x for x in (self.ref.log_since(self.marks[id(self.ref)]),
                                      self.cand.log_since(self.marks[id(self.cand)])) if x)
        r.phases = {k: round(v, 3) for k, v in self.stages.items() if v > 0}
        for job, op, phase in ((self.ref, "reference", "reference_runs"), (self.cand, "candidate", "candidate_runs"),
                               (self.ref, "judge", "judge"), (self.cand, "observe", "observe"),
                               (self.ref, "time_inputs", "timing_inputs"), (self.ref, "time_alone", "time_alone")):
            v = job.op_s.get(op, 0.0)
            if v > 0.0005:
                r.phases[phase] = round(v, 3)
        for job in (self.ref, self.cand):  # each op's steps, as its worker timed them ("time.warmup")
            for k, v in job.step_s.items():
                if v > 0.0005:
                    r.phases[k] = round(r.phases.get(k, 0.0) + v, 3)
        compile_s = self.ref.compile_s + self.cand.compile_s
        wait_s = self.ref.wait_s + self.cand.wait_s
        if compile_s > 0:
            r.phases["compile"] = round(compile_s, 3)
        if wait_s > 0.001:
            r.phases["device_wait"] = round(wait_s, 3)
        for kind in ("read", "write"):  # seconds the evaluation held the GPU, shared and alone
            held = self.ref.held_s[kind] + self.cand.held_s[kind]
            if held > 0.001:
                r.phases[f"device_{kind}"] = round(held, 3)
        r.sandbox = self.sandbox_report()
        return r

    def sandbox_report(self) -> dict[str, str]:
        """What holds for the candidate's processes now, as the pool sees them."""
        facts = self.cand.facts
        out = {"scratch": "per-job directory, removed after"}
        # The view of the files and what the job may create: the runner's self-test at start
        # (a probe job tried to break out), checked against what this job's worker said it got.
        out.update(self.pool.sandbox_facts)
        if self.pool.confined and not str(facts.get("filesystem", "")).startswith("host read-only"):
            out["filesystem"] = "NOT confined for this job: its worker did not get the read-only view"
        pids = self.cand.tree()
        mine = sandbox.namespace("self", "net")
        nets = {sandbox.namespace(p, "net") for p in pids} - {""}
        if not pids:
            out["network"] = "isolated (own network namespace)" if facts.get("network") == "own namespace" \
                else "not isolated (needs root or user namespaces)"
        elif nets and mine and mine not in nets:
            out["network"] = "isolated (own network namespace)"
        elif mine in nets:
            out["network"] = "not isolated (needs root or user namespaces)"
        else:
            out["network"] = "isolated (own network namespace)" if facts.get("network") == "own namespace" \
                else "unknown"
        caps = {sandbox.capabilities(p) for p in pids} - {None}
        out["capabilities"] = "none" if (caps == {0} or (not caps and facts.get("capabilities") == "none")) \
            else "some"
        out["processes"] = ("own PID namespace, killed with the job" if facts.get("pid_namespace") == "own namespace"
                            else "killed with the job (subreaper sweep)")
        return out


def _claims_faster(t: Optional[dict]) -> bool:
    try:
        spread = max(float(t.get("ref_spread_pct") or 0), float(t.get("cand_spread_pct") or 0))
        return beats(float(t["ref_ms"]) / float(t["cand_ms"]), spread)
    except (TypeError, KeyError, ValueError, AttributeError, ZeroDivisionError):
        return False


def _request_dict(req: EvalRequest) -> dict:
    from ..schema import to_dict
    return to_dict(req)
