"""Run a benchmark suite: every task through a strategy on one runner, resumable.

Each task gives one or more samples (candidates), each an ``EvalResult``:

* ``none``: the candidates from ``--candidates`` (several per task for pass@k), or without them
  the task checked (and on a GPU timed) against itself;
* ``tune``: the no-LLM tuner, through ``agent.optimize``; the sample is the confirmation run of
  the tuned file when the tuner offers one, else the original (which is what the user keeps);
* ``llm``: the GEAK loop, through ``agent.optimize``, ``--samples`` times per task.

Tasks run concurrently, whatever the strategy (``jobs`` threads on the one runner, whose worker
pool spreads them).
After each task its record is written to ``OUT/state.json`` (atomic replace) and its results to
``OUT/results/<task>.json``; ``resume=True`` keeps the records of tasks whose digest and run
settings are unchanged, measured by the same code (``code``: ``agent.bench.parts.code_digest``).
With ``Settings.against_autotune`` each tuning task is also measured against Triton's own
``@triton.autotune`` over the same space (``agent.bench.autotune``).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from runner.schema import EvalOptions, EvalResult, to_dict
from runner.source import find_project_root

from . import metrics
from agent.bench.baselines import BaselineCache, baseline_request
from agent.bench.tasks import Task

STATE_SCHEMA = "geak.bench-state/1"
BENCH_SCHEMA = "geak.bench/1"


@dataclass
class Settings:
    strategy: str = "none"
    format: str = "auto"
    trials: int = 3
    timing: bool = True
    """False (``--no-timing``): correctness only, no speedups."""
    arch: Optional[str] = None
    max_configs: int = 48
    task_budget: Optional[float] = None
    """tune: seconds per task (``--task-budget``); None: no limit."""
    tune_trials: int = 2
    emit: str = "constants"
    samples: int = 1
    baselines: list[str] = field(default_factory=list)
    candidates: Optional[str] = None
    llm: dict = field(default_factory=dict)
    against_autotune: bool = False
    """tune: also ``@triton.autotune`` over the tuner's space, measured the same way
    (``--against-autotune``)."""

    def fingerprint(self) -> dict:
        """What must be equal for a recorded task to be reused on --resume."""
        d = asdict(self)
        d.pop("baselines")  # baselines are cached separately, per GPU
        return d


@dataclass
class SampleRecord(metrics.Sample):
    """A sample as the state file keeps it: its metrics, and what it was."""

    message: str = ""
    source: Optional[str] = None
    """Where the sample came from: a candidate file, "tuned", "original", an llm run directory."""


@dataclass
class TaskRecord:
    name: str
    format: str
    symbol: str
    path: str
    digest: str
    samples: list[SampleRecord] = field(default_factory=list)
    cases_run: int = 0
    cases_skipped: int = 0
    skipped_why: str = ""
    """Why cases were left out, in a few words (``too large for the interpreter``)."""
    timed: bool = False
    baselines: dict[str, dict] = field(default_factory=dict)
    """kind -> {correct, speedup (first version vs that baseline, GPU only), cached, message}."""
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    error: Optional[str] = None
    """A harness-side failure (the runner unreachable): the task is reported, not scored."""
    search: dict = field(default_factory=dict)
    """``tune``: what the tuner did (``tune_summary``): first-version and final Σ ms, configs
    run and pruned unrun, the space, the search's wall time, % of peak, why it stopped early."""
    stopped: Optional[str] = None
    """"time budget": ``--time-budget`` ran out while the task ran; it keeps what it had verified
    (nothing, when it stopped before the original was checked: then it is not scored), and
    ``--resume`` runs it again (a GEAK-loop task goes on from its run directory)."""
    autotune: dict = field(default_factory=dict)
    """``--against-autotune``: Triton's ``@triton.autotune`` over the tuner's space, measured by
    the same evaluator against the original (``agent.bench.autotune.against_autotune``: configs,
    sampled, key, status, correct, speedup, tuned_ms, pct_peak, search_s, eval_s, message; or
    ``skipped``), and ``verdict``: the tuner against it, in words."""

    def best(self) -> Optional[SampleRecord]:
        return metrics.best_sample(self.samples)


def record_from_dict(d: dict) -> TaskRecord:
    samples = [SampleRecord(**s) for s in d.get("samples", [])]
    return TaskRecord(**{**d, "samples": samples})


# --------------------------------------------------------------------------- state


class State:
    """``OUT/state.json``: the run's settings, the code that measured (``code``), the device its
    results came from, and every task's record."""

    def __init__(self, out: Path, settings: Settings, resume: bool, code: Optional[str] = None):
        self.out = out
        self.path = out / "state.json"
        self.settings = settings
        self.code = code
        self.device: Optional[dict] = None
        self.records: dict[str, TaskRecord] = {}
        self.lock = threading.Lock()
        self.stale: list[str] = []
        self.stale_why = ""
        """Why nothing recorded was kept: "other settings", or other code (one table measures one code)."""
        if resume and self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                data = {}
            if (data.get("schema") == STATE_SCHEMA and data.get("settings") == settings.fingerprint()
                    and data.get("code") == code):
                self.device = data.get("device")
                for name, rec in data.get("tasks", {}).items():
                    try:
                        self.records[name] = record_from_dict(rec)
                    except TypeError:
                        self.stale.append(name)
            elif data:
                self.stale.append("*")  # other settings or code: start again
                self.stale_why = ("other settings" if data.get("settings") != settings.fingerprint() else
                                  f"other code ({data.get('code') or 'unknown'}; this is {code})")

    def done(self, task: Task) -> Optional[TaskRecord]:
        r = self.records.get(task.name)
        return r if r is not None and r.digest == task.digest and r.error is None and not stopped_by_call(r) else None

    def save(self, rec: TaskRecord, results: dict) -> None:
        with self.lock:
            self.records[rec.name] = rec
            self.out.mkdir(parents=True, exist_ok=True)
            rdir = self.out / "results"
            rdir.mkdir(exist_ok=True)
            _atomic_write(rdir / (rec.name.replace("/", "__") + ".json"), json.dumps(results, indent=1))
            self.write()

    def write(self) -> None:
        _atomic_write(self.path, json.dumps({
            "schema": STATE_SCHEMA, "settings": self.settings.fingerprint(), "code": self.code,
            "device": self.device, "tasks": {n: asdict(r) for n, r in self.records.items()}}, indent=1))


def stopped_by_call(rec) -> bool:
    """Whether the call's time budget (``--time-budget``) stopped this task (a ``TaskRecord`` or
    its dict): ``--resume`` runs it again. A task whose own budget (``--task-budget``) was spent
    before the original was checked is finished: the same settings give it the same budget."""
    return (rec.get("stopped") if isinstance(rec, dict) else rec.stopped) == "time budget"


def budget_spent(rec) -> bool:
    """Whether the task's own budget was spent while its original was checked: nothing tried,
    not scored."""
    return (rec.get("stopped") if isinstance(rec, dict) else rec.stopped) == "task budget"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------- progress


class BenchProgress:
    """A progress bar on stderr (one line per task when stderr is not a terminal)."""

    def __init__(self, total: int, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.lock = threading.Lock()
        self.start = time.monotonic()

    def advance(self, what: str) -> None:
        with self.lock:
            self.done += 1
            width = 28
            fill = int(width * self.done / max(self.total, 1))
            bar = "#" * fill + "." * (width - fill)
            el = time.monotonic() - self.start
            line = f"[{bar}] {self.done}/{self.total} {el:5.0f}s  {what}"
            if self.tty:
                self.stream.write("\r\x1b[2K" + line[:160] + ("\n" if self.done == self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


# --------------------------------------------------------------------------- one task


def _out_of_memory(results: dict) -> bool:
    """Whether an evaluation of the task ran out of GPU memory."""
    return any(((x.get("error") or {}).get("kind") == "out_of_memory") for x in results.get("samples") or []
               if isinstance(x, dict))


def _line(rec: TaskRecord) -> str:
    """A finished task in the progress line."""
    b = rec.best()
    if rec.error:
        return rec.error
    if b is None:
        return ("stopped by the time budget, nothing verified" if stopped_by_call(rec) else
                "the task budget was spent checking the original, nothing tried" if budget_spent(rec) else "no sample")
    if b.not_run:
        return "not run here: " + (rec.skipped_why or b.not_run)
    if b.not_checkable and not b.ok:
        return "the original cannot be checked here (not scored)"
    return (("stopped by the time budget, kept: " if stopped_by_call(rec) else "") + f"{b.status}"
            + (" correct" if b.correct else "") + (f" {b.speedup:.2f}x" if b.speedup is not None else ""))


def _case_counts(r: EvalResult) -> tuple[int, int]:
    return sum(1 for c in r.cases if not c.skipped and c.trials), sum(1 for c in r.cases if c.skipped)


def _skipped_why(r: EvalResult) -> str:
    """Why the result's skipped cases were left out, in a few words each."""
    whys = []
    for c in r.cases:
        if not c.skipped:
            continue
        why = ("too large for the interpreter" if "too large" in c.skipped else
               "bf16 under the interpreter" if "bfloat16" in c.skipped else c.skipped[:60])
        if why not in whys:
            whys.append(why)
    return "; ".join(whys)


def _sample(r: EvalResult, source: str) -> SampleRecord:
    m = metrics.sample_from_result(r)
    return SampleRecord(status=r.status, correct=bool(r.correct), speedup=m.speedup, not_run=m.not_run,
                        not_checkable=m.not_checkable, pct_peak=m.pct_peak, message=r.message, source=source)


class Bench:
    def __init__(self, runner, tasks: list[Task], settings: Settings, options: EvalOptions, out: Path,
                 resume: bool = False, jobs: int = 1, cache: Optional[BaselineCache] = None,
                 on_progress: Optional[Callable[[TaskRecord], None]] = None, stream=None,
                 time_budget_s: Optional[float] = None, code: Optional[str] = None):
        self.runner, self.tasks, self.settings, self.options = runner, tasks, settings, options
        self.state = State(out, settings, resume, code)
        self.jobs = max(1, jobs)
        self.cache = cache or BaselineCache(None)
        self.stream = stream or sys.stderr
        self.on_progress = on_progress
        self._device = None
        self._dlock = threading.Lock()
        self.deadline = time.monotonic() + time_budget_s if time_budget_s else None
        self.not_started: list[str] = []
        self._unavailable_result: dict[str, EvalResult] = {}
        """Tasks left for a later --resume because the time budget was spent."""
        self.prior = dict(self.state.records)
        """What the state file had (a task the time budget stopped goes on from its record)."""
        self.unavailable: Optional[EvalResult] = None
        """The result that showed the runner cannot be used (it stayed so when asked again): no
        task starts after it, since none could get better (unreachable, token refused)."""
        self.not_run: list[str] = []
        """Tasks not started because the runner cannot be used."""

    def stopped(self) -> list[str]:
        """Tasks the time budget stopped while they ran."""
        return [n for n, r in self.state.records.items() if stopped_by_call(r) and n not in self.not_started
                and any(t.name == n for t in self.tasks)]

    def _deadline(self):
        from agent.deadline import Deadline
        return Deadline(self.deadline, "time budget") if self.deadline is not None else None

    def device(self):
        with self._dlock:
            if self._device is None:
                self._device = self.runner.device_info()
            return self._device

    def run(self) -> tuple[list[TaskRecord], int]:
        """Records in task order, and how many came from the state file."""
        todo = [t for t in self.tasks if self.state.done(t) is None]
        reused = len(self.tasks) - len(todo)
        progress = BenchProgress(len(todo), self.stream)
        if reused:
            print(f"resuming: {reused} task(s) already done in {self.state.path}", file=self.stream)

        crowded: list[Task] = []

        def one(task: Task, alone: bool = False) -> Optional[TaskRecord]:
            t0 = time.monotonic()
            if self.unavailable is not None:
                with self._dlock:
                    self.not_run.append(task.name)
                return None
            if self.deadline is not None and t0 > self.deadline:
                with self._dlock:
                    self.not_started.append(task.name)
                return None
            try:
                rec, results = self.run_task(task)
            except Exception as e:  # a harness failure is reported for this task, the run goes on
                rec, results = TaskRecord(task.name, task.format, task.symbol, task.rel, task.digest,
                                          error=f"{type(e).__name__}: {e}"), {}
            rec.duration_s = round(time.monotonic() - t0, 2)
            rec.notes = task.notes + rec.notes
            if alone:
                rec.notes.append("evaluated again with the GPU to itself: it ran out of GPU memory "
                                 "while other tasks ran")
            if self.jobs > 1 and _out_of_memory(results) and not alone:
                with self._dlock:
                    crowded.append(task)  # evaluated again when nothing else runs
                progress.advance(f"{task.name}: out of GPU memory beside other tasks; again alone at the end")
                return None
            self.state.save(rec, results)
            progress.advance(f"{task.name}: {_line(rec)}")
            if task.name in self._unavailable_result and self.unavailable is None and self._runner_gone():
                self.unavailable = self._unavailable_result.get(task.name)
            return rec

        if todo:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.jobs, len(todo))) as ex:
                list(ex.map(one, todo))
        # A task that ran out of GPU memory while other tasks held theirs is evaluated again with
        # the GPU to itself; what it gives then is its result.
        for task in crowded:
            progress.total += 1
            one(task, alone=True)
        stopped = self.stopped()
        if self.not_started or stopped:
            print(f"time budget spent: {len(self.not_started)} task(s) not started"
                  + (f", {len(stopped)} stopped while running" if stopped else "")
                  + "; run the same command again with --resume to go on", file=self.stream)
        return [self.state.records[t.name] for t in self.tasks
                if t.name in self.state.records and t.name not in self.not_started], reused

    def _runner_gone(self) -> bool:
        """Asked again after a task found the runner unusable: whether it still is (a request
        the runner refused on its own would not stop the run)."""
        try:
            self.device()
        except Exception:
            return True
        return False

    # -- strategies

    def run_task(self, task: Task) -> tuple[TaskRecord, dict]:
        rec = TaskRecord(task.name, task.format, task.symbol, task.rel, task.digest)
        results: dict = {"task": task.name, "samples": [], "baselines": {}}
        s = self.settings
        if s.strategy == "none":
            reqs = ([task.request(self.options, c) for c in task.candidates] if task.candidates
                    else [task.request(self.options)])
            outs = self.runner.evaluate_many(reqs) if len(reqs) > 1 else [self.runner.evaluate(reqs[0])]
            srcs = [str(c) for c in task.candidates] or ["the task against itself"]
            for r, src in zip(outs, srcs):
                rec.samples.append(_sample(r, src))
                results["samples"].append(to_dict(r))
            first = outs[0]
        elif s.strategy == "tune":
            first = self._tune(task, rec, results)
        elif s.strategy == "llm":
            first = self._llm(task, rec, results)
        else:
            raise ValueError(f"unknown strategy {s.strategy}")
        if first is not None:
            rec.cases_run, rec.cases_skipped = _case_counts(first)
            rec.skipped_why = _skipped_why(first)
            rec.timed = first.timing is not None
            if self.state.device is None and first.device is not None:  # what the run measured on
                self.state.device = to_dict(first.device)
            if first.error and first.error.kind == "runner_unavailable":
                rec.error = first.message
                self._unavailable_result[task.name] = first
        for kind in s.baselines if not rec.stopped else ():  # a task the time budget stopped measures no more
            b = self._baseline(task, kind, results)
            if b is not None:
                rec.baselines[kind] = b
        return rec, results

    def _optimize(self, task: Task, strategy: str, **settings):
        from agent.optimize import OptimizeSettings, optimize
        s = OptimizeSettings(arch=self.settings.arch, root=find_project_root(task.path), deadline=self._deadline(),
                             **settings)
        return optimize(task.request(self.options), strategy, self.runner, s)

    def _tune(self, task: Task, rec: TaskRecord, results: dict) -> Optional[EvalResult]:
        from agent.tune.strategy import TuneSettings
        try:
            out = self._optimize(task, "tune", tune=TuneSettings(
                max_configs=self.settings.max_configs, trials=self.settings.tune_trials, emit=self.settings.emit,
                budget_s=self.settings.task_budget))
        except ValueError as e:
            rec.notes.append(f"not tunable: {e}")
            rec.samples.append(SampleRecord("ok", True, None, None, message="the original is kept: " + str(e),
                                            source="original"))
            self._against_autotune(task, rec, None, results, f"not tunable: {e}")
            return None
        rec.stopped = "time budget" if out.stopped == "time budget" else None
        base = out.baseline
        if base is None:  # the time ran out before the original was checked: nothing to score
            rec.stopped = out.stopped
            rec.notes.append(out.message)
            self._against_autotune(task, rec, None, results, out.message)
            return None
        results["original"] = to_dict(base)
        if out.original_fails:
            rec.samples.append(_sample(base, "original (fails its own check)"))
            self._against_autotune(task, rec, None, results, "the original fails its own check")
            return base
        report = out.report
        results["tune"] = to_dict(report)
        rec.search = tune_summary(results["tune"], results["original"])
        if out.improved:
            rec.samples.append(_sample(out.result, "tuned"))
            rec.notes.append("tuned config: " + ", ".join(f"{k}={v}" for k, v in sorted((report.best or {}).items())))
            self._against_autotune(task, rec, out, results)
            return out.result
        rec.notes.append(f"{out.verified} of {out.total} config(s) verified; {report.message}")
        timed = bool(base.device and base.device.is_gpu and base.timing is not None)
        m = metrics.sample_from_result(base)
        rec.samples.append(SampleRecord("ok", True, 1.0 if timed else None, m.pct_peak,
                                        message="no verified improvement: the original is kept", source="original"))
        self._against_autotune(task, rec, out, results)
        return base

    def _against_autotune(self, task: Task, rec: TaskRecord, out, results: dict, no_search: str = "") -> None:
        """``--against-autotune``: Triton's autotune over the space the tuner searched, and the
        verdict. A task the time budget kept from it is ``stopped`` (``--resume`` runs it again)."""
        if not self.settings.against_autotune:
            return
        from agent.bench.autotune import against_autotune, verdict
        report = out.report if out is not None else None
        if out is None or report is None or not report.kernel or not report.space_size:
            why = no_search or (report.message if report is not None else "no search")
            rec.autotune = {"skipped": "no search: " + why[:160], "verdict": "not compared: no search"}
            return
        at = against_autotune(task.request(self.options), out, self.runner, self._deadline(),
                              self.settings.max_configs, self.settings.task_budget)
        if at.pop("time_budget", False):
            rec.stopped = "time budget"
        base = out.baseline
        why = ("" if base.timing is not None else
               "timing needs a GPU" if not (base.device and base.device.is_gpu) else
               "the original was not timed" + (f": {base.timing_unavailable}" if base.timing_unavailable else ""))
        best = rec.best()
        at["verdict"] = verdict(best.speedup if best is not None else None, at, why)
        rec.autotune = at
        results["autotune"] = at

    def _llm(self, task: Task, rec: TaskRecord, results: dict) -> Optional[EvalResult]:
        from agent.llm.providers import ProviderError
        from agent.llm.session import LLMSettings
        given = {k: v for k, v in self.settings.llm.items() if v is not None}
        first = None
        prior = self.prior.get(task.name)
        for i in range(self.settings.samples):
            run_dir = self.state.out / "llm" / f"{task.name.replace('/', '__')}-s{i}"
            # A run the time budget stopped goes on from its run directory.
            resume = (Path(prior.samples[i].source) if prior is not None and prior.stopped and i < len(prior.samples)
                      and prior.samples[i].source and (Path(prior.samples[i].source) / "run.json").is_file() else None)
            try:
                out = self._optimize(task, "llm", llm=LLMSettings(**given), run_dir=run_dir, resume=resume)
            except ProviderError as e:
                rec.samples.append(SampleRecord("crashed", False, None, None, message=f"the GEAK loop did not "
                                                f"start: {e.message}", source="llm"))
                continue
            if out.stopped == "time budget":
                rec.stopped = "time budget"
            if out.baseline is None:  # stopped before the original was checked
                rec.notes.append(out.message)
                break
            first = first or out.baseline
            if out.original_fails:
                rec.samples.append(_sample(out.baseline, "original (fails its own check)"))
                continue
            results["samples"].append(to_dict(out.report))
            rec.samples.append(_llm_sample(out))
        return first

    def _baseline(self, task: Task, kind: str, results: dict) -> Optional[dict]:
        dev = self.device()
        gpu = dev.backend != "interpreter"
        if kind == "compile" and not gpu:
            return {"correct": None, "speedup": None, "cached": False,
                    "message": "torch.compile baseline needs a GPU runner (on a CPU Inductor emits C++)"}
        req = baseline_request(task, kind, self.options)
        if req is None:
            return None
        if gpu:
            hit = self.cache.get(dev.name, kind, task.digest)
            if hit is not None:
                return {**hit, "cached": True}
        r = self.runner.evaluate(req)
        results["baselines"][kind] = to_dict(r)
        entry = {"correct": bool(r.correct), "status": r.status,
                 "speedup": r.timing.speedup if r.timing else None,
                 "ref_ms": r.timing.ref_ms if r.timing else None,
                 "cand_ms": r.timing.cand_ms if r.timing else None,
                 "message": r.message, "task": task.name}
        if gpu and r.correct and r.timing is not None:
            self.cache.put(dev.name, kind, task.digest, entry)
        return {**entry, "cached": False}


def _llm_sample(out) -> SampleRecord:
    """A GEAK-loop run as one sample: verified when any candidate was; its speedup the chosen
    candidate's, else the fastest verified one's."""
    speeds = [t.speedup for t in out.tried if t.correct and t.speedup is not None]
    last = out.tried[-1] if out.tried else None
    status = "ok" if out.verified else (last.result.status if last is not None and last.result else "crashed")
    return SampleRecord(status=status, correct=out.verified > 0,
                        speedup=out.speedup if out.improved else (max(speeds) if speeds else None),
                        pct_peak=metrics.pct_peak(out.result.cases) if out.improved else None,
                        message=out.message, source=out.report.run_dir)


def tune_summary(report: dict, original: dict) -> dict:
    """A tuner report (as JSON) in one line of the bench table: the first version's and the
    final kernel's Σ ms over the timed cases (the confirmation's when an edit was offered) and
    share of the roofline (``agent.roofline``; None: unknown), configs run and pruned unrun, the
    space searched, the tuner's wall time (search and confirmation), why it stopped early (task
    budget, time budget, roofline) after how many configs, and the seconds of the original's own
    check (``original_s``; its phases are in the task's results file, ``original.phases``, and
    the search's steps in ``tune.timeline``)."""
    conf, base = report.get("confirmation"), original.get("timing")
    offered = report.get("source") is not None and conf and conf.get("timing")
    first = conf["timing"]["ref_ms"] if offered else (base or {}).get("cand_ms")
    pct0 = report.get("original_pct_peak")
    spent = [v for v in (report.get("search_s"), report.get("confirm_s")) if v is not None]
    return {"first_ms": first, "final_ms": conf["timing"]["cand_ms"] if offered else first,
            "configs_run": len(report.get("trials") or []), "configs_pruned": len(report.get("screened") or []),
            "space": report.get("space_size"), "search_s": round(sum(spent), 1) if spent else None,
            "pct_peak_first": pct0, "pct_peak_final": report.get("best_pct_peak") if offered else pct0,
            "peak_basis": report.get("peak_basis"), "stopped": report.get("stopped"),
            "stopped_after": report.get("stopped_after"), "budget_s": report.get("budget_s"),
            "original_s": original.get("duration_s")}


# --------------------------------------------------------------------------- the document


def document(records: list[TaskRecord], settings: Settings, device, suite: str, notes: list[str],
             ks: tuple[int, ...] = (1,), command: str = "") -> dict:
    per_task = [r.samples for r in records if r.error is None and not (r.stopped and not r.samples)]
    ks = tuple(sorted({1, *ks}))
    summary = metrics.summarize(per_task, ks=ks)
    return {
        "schema": BENCH_SCHEMA, "suite": suite, "command": command, "strategy": settings.strategy,
        "settings": asdict(settings), "device": to_dict(device) if device is not None else None,
        "summary": asdict(summary), "harness_errors": [r.name for r in records if r.error],
        "stopped": [r.name for r in records if stopped_by_call(r)],
        "budget_spent": [r.name for r in records if budget_spent(r)],
        "tasks": [asdict(r) for r in records], "notes": notes,
        **({"against_autotune": _comparison(records)} if settings.against_autotune else {}),
    }


def _comparison(records: list[TaskRecord]) -> dict:
    from agent.bench.autotune import comparison
    return comparison([(b.speedup if (b := r.best()) is not None and b.ok else None, r.autotune)
                       for r in records if r.error is None])
