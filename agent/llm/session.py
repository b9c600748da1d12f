"""One run of the GEAK loop on a target, wired once for every front end (the CLI, the benchmark
harness, the language server).

Given the original's request and its own check (the baseline), a session:

1. opens the run directory (a new ``<time>-<symbol>`` under ``run_dir``, or the one resumed) and
   records what was asked: run.json, request.json, baseline.json, system.md;
2. builds the task: the target, the knowledge pack for the runner's GPU (or ``arch``), and the
   corpus for one-shot retrieval (the project's ``examples/`` and ``benchmarks/``, and ``corpus``);
3. runs the loop (``loop.run_loop``), with the tokens a resumed run already spent counted;
4. reports every attempt, the verified ones and the chosen one (``Report``, report.json).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from runner.schema import DeviceInfo, EvalRequest, EvalResult

from agent.outcome import NONE_FASTER, Outcome, Tried
from . import knowledge
from agent.llm.evaluator import speedup
from agent.llm.generator import Task
from agent.llm.loop import LoopConfig, LoopResult, run_loop
from agent.llm.ranking import choose, rank, verified
from agent.llm.providers import Provider, ProviderConfig, make_provider
from agent.llm.records import Candidate, Report, Step
from agent.llm.retrieval import Corpus, corpus_files
from agent.llm.rundir import RunDir
from agent.llm.usage import Usage


@dataclass
class LLMSettings:
    """The GEAK loop's settings; run.json records them, and ``--resume`` reads them back."""

    provider: Optional[str] = None
    model: Optional[str] = None
    iterations: int = 5
    parallel: int = 1
    temperature: Optional[float] = None
    max_tokens: int = 8192
    timeout: float = 300.0
    base_url: Optional[str] = None
    budget_tokens: Optional[int] = None
    target_speedup: Optional[float] = None
    fix_attempts: int = 3
    retries: int = 2
    corpus: Optional[str] = None
    instruction: Optional[str] = None

    def provider_config(self) -> ProviderConfig:
        return ProviderConfig(provider=self.provider, model=self.model, temperature=self.temperature,
                              max_tokens=self.max_tokens, timeout_s=self.timeout, base_url=self.base_url,
                              max_retries=self.retries)


def open_provider(s: LLMSettings) -> Provider:
    """The settings' provider, through its official SDK (``ProviderError``: no key, unknown
    provider, SDK not installed)."""
    return make_provider(s.provider_config())


def device_text(d: Optional[DeviceInfo], arch: Optional[str]) -> str:
    """The device, as the prompt states it: its label, and what the model should know of it."""
    if d is None:
        return "unknown"
    text = d.label
    if not d.is_gpu:
        text += " (correctness only here; speed is measured on a GPU)"
    elif d.peak_bandwidth_gbs:
        text += f", peak bandwidth {d.peak_bandwidth_gbs:.0f} GB/s"
    if arch:
        text += f"; write for {arch}"
    return text


STOPS = {"target": "stopped at the target speedup {target_speedup}x",
         "budget": "stopped: token budget spent ({total} of {budget} tokens)",
         "provider": "stopped: the provider refused the request ({fatal})",
         "unreachable": "stopped: the provider could not be reached ({fatal})",
         "provider_errors": "stopped: every model call failed in the last iterations (see the run "
                            "directory's step.json files)",
         "time budget": "stopped: the time budget was spent (go on with --resume)"}


class Session:
    """A run of the loop: what it needs, then (once ``loop`` returns) what it found.
    ``run``: the run directory to resume; else a new one is made under ``run_dir`` (default
    ``ROOT/.geak/runs``)."""

    def __init__(self, base: EvalRequest, baseline: EvalResult, settings: LLMSettings, provider: Provider,
                 root: Path, arch: Optional[str] = None, run: Optional[RunDir] = None,
                 run_dir: Optional[Path] = None, original: Optional[list] = None):
        self.base, self.baseline, self.settings, self.provider = base, baseline, settings, provider
        self.original = original or []
        """The original's compile reports with listings, for the reflector's compiled difference."""
        self.root, self.arch, self.run, self.run_dir = root, arch, run, run_dir
        self.result: Optional[LoopResult] = None
        self.usage: Optional[Usage] = None
        self.names: list[str] = []

    def open(self) -> tuple[Task, LoopConfig]:
        """The run directory, the task and the loop's configuration; says what will run."""
        s, base = self.settings, self.base
        if self.run is None:
            self.run = RunDir.create(self.run_dir or self.root / ".geak" / "runs", base.target.symbol)
            self.run.write_request(base)
        self.run.write_config({"target": str(base.target), "root": str(self.root), **dataclasses.asdict(s),
                               "trials": base.options.trials, "device": base.options.device, "arch": self.arch})
        self.run.write_baseline(self.baseline)
        text, self.names = knowledge.pick(self.baseline.device, self.arch)
        files = corpus_files([self.root / "examples", self.root / "benchmarks"] + ([Path(s.corpus)] if s.corpus else []))
        task = Task(path=base.target.path, symbol=base.target.symbol, source=base.files[base.target.path],
                    device=device_text(self.baseline.device, self.arch), knowledge=text, knowledge_names=self.names,
                    instruction=s.instruction or "", corpus=Corpus(files))
        self.run.write_system(task.system())
        self.usage = Usage(budget=s.budget_tokens)
        for st in self.run.steps():  # tokens already spent by a resumed run count against its budget
            self.usage.input_tokens += st.input_tokens
            self.usage.output_tokens += st.output_tokens
            self.usage.calls += 1 if st.response is not None else 0
        return task, LoopConfig(iterations=s.iterations, parallel=s.parallel, trap_after=s.fix_attempts,
                                target_speedup=s.target_speedup)

    def describe(self, resumed: bool, task: Task, cfg: LoopConfig) -> str:
        s, d = self.settings, self.baseline.device
        return (f"{'resuming' if resumed else 'optimizing'} {self.base.target} with {s.provider} {s.model}: "
                f"{cfg.iterations} iteration(s) x {cfg.parallel} candidate(s) on "
                f"{d.name if d else 'the runner'}; knowledge {', '.join(self.names)}; "
                f"corpus {len(task.corpus)} kernel(s)\nrun directory {self.run.path}")

    def loop(self, runner, task: Task, cfg: LoopConfig, on_step: Callable[[Step], None],
             on_iteration: Callable[[int, list[Step]], None]) -> Report:
        self.result = run_loop(task, self.provider, runner, self.base, cfg, self.run, self.usage,
                               on_step, on_iteration, original=self.original)
        report = self.report(cfg)
        self.run.write_report(report)
        return report

    def report(self, cfg: LoopConfig) -> Report:
        s, result, usage = self.settings, self.result, self.usage
        steps = sorted(result.steps, key=lambda st: (st.iteration, st.lane))
        d = self.baseline.device
        rep = Report(target=str(self.base.target), provider=s.provider, model=s.model, run_dir=str(self.run.path),
                     device=d.label if d else "", knowledge=self.names, iterations_run=result.iterations_run,
                     parallel=cfg.parallel, stopped=result.stopped, baseline=self.baseline, usage=usage.as_dict(),
                     provider_error=result.fatal if result.stopped in ("provider", "unreachable") else None)
        rep.candidates = [_candidate(st) for st in steps]
        ok = verified(steps)
        rep.timed = any(speedup(st.result) is not None for st in ok)
        rep.verified = [st.id for st in reversed(rank(steps, keep=0))] if rep.timed else [st.id for st in ok]
        stop = STOPS.get(result.stopped)
        if stop:
            rep.notes.append(stop.format(target_speedup=s.target_speedup, total=usage.total, budget=usage.budget,
                                         fatal=result.fatal))
        best = choose(steps)
        if best is not None:
            rep.improved, rep.best, rep.best_speedup = True, best.id, speedup(best.result)
            rep.source, rep.result = best.source, best.result
            warn = [f for f in best.result.flags if f.severity == "warning"]
            if warn:
                rep.notes.append("look at this before using it: " + "; ".join(f"{f.code}: {f.message}" for f in warn))
        rep.message = _verdict(rep, steps, ok, best, self.run.path)
        return rep

    def outcome(self, rep: Report, apply_untimed: bool = False) -> Outcome:
        """The report as every front end reads it. With ``apply_untimed``, where nothing could
        be timed, the first verified candidate is offered, labelled untimed."""
        steps = sorted(self.result.steps, key=lambda st: (st.iteration, st.lane))
        ok = verified(steps)
        best = choose(steps)
        chosen = best if best is not None else (ok[0] if ok and not rep.timed and apply_untimed else None)
        out = Outcome(strategy="llm", baseline=self.baseline, report=rep, timed=rep.timed, message=rep.message,
                      notes=[f"run directory {self.run.path}"] + list(rep.notes), stopped=self.result.stopped,
                      tried=[_tried(st, st is chosen) for st in steps])
        if chosen is not None:
            out.source, out.result, out.untimed = chosen.source, chosen.result, best is None
            out.speedup = speedup(chosen.result) if best is not None else None
        return out


def candidate_label(st: Step) -> str:
    """A candidate as people read it (its run directory calls it i00-c0)."""
    return f"iteration {st.iteration + 1}, candidate {st.lane + 1}"


_VERDICTS = {"no_code": "no code", "provider_error": "model error"}


def _tried(st: Step, chosen: bool) -> Tried:
    r = st.result
    verdict = ("verified" if st.outcome == "correct" else r.status if r is not None
               else _VERDICTS.get(st.outcome or "", st.outcome or "unfinished"))
    return Tried(label=candidate_label(st), verdict=verdict, correct=st.outcome == "correct", speedup=speedup(r),
                 message=st.error or (r.message if r is not None else st.extraction) or "", chosen=chosen, result=r)


def _candidate(st: Step) -> Candidate:
    r = st.result
    return Candidate(id=st.id, iteration=st.iteration, lane=st.lane, kind=st.kind, outcome=st.outcome or "unfinished",
                     status=r.status if r else None, correct=bool(r and r.correct), speedup=speedup(r),
                     spread_pct=r.timing.spread_pct if r and r.timing else None,
                     message=st.error or (r.message if r else st.extraction))


def _verdict(rep: Report, steps: list[Step], ok: list[Step], best: Optional[Step], run_path: Path) -> str:
    n = len(steps)
    if best is not None:
        t = best.result.timing
        return (f"{best.id} is {t.speedup:.3f}x faster than the original (Σ {t.ref_ms:.4f} ms -> "
                f"{t.cand_ms:.4f} ms, spread ±{t.spread_pct:.1f}%), verified on every case; "
                f"{len(ok)} of {n} candidates correct")
    if rep.timed:
        return f"{len(ok)} of {n} candidates correct, {NONE_FASTER}"
    if ok:
        return (f"{len(ok)} of {n} candidates verified correct "
                f"({', '.join(rep.verified)}) on {rep.device or 'the runner'}, but nothing was timed "
                f"({ok[0].result.timing_unavailable or 'no timing'}); timing needs a GPU, so none is "
                f"offered as faster. Their code is in {run_path}/steps/<id>/candidate.py")
    if not any(st.source is not None for st in steps):
        failed = sum(st.outcome == "provider_error" for st in steps)
        return (f"the model gave no candidate: {failed} call(s) failed, "
                f"{n - failed} answer(s) held no usable code" if n else "no attempt was made")
    return f"none of the {n} attempts gave a correct candidate"
