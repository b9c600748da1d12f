"""The ``compile`` strategy: no LLM; PyTorch's compiler writes the Triton.

1. After the original's own check, one more evaluation of the original with
   ``options.inductor``: its worker asks Inductor for Triton at the first case's inputs and
   returns the module it writes (``runner.worker.inductor``).
2. ``standalone.write`` makes the original file with the target computed by those kernels.
3. That file is a candidate like any other: verified against the original on every case.
4. On a GPU, the tuner searches its launches (the standalone file as its own target), and the
   config it chooses is confirmed against the original; the result is offered only when it is
   verified faster than the original. Under the CPU interpreter nothing can be timed: the
   verified file is offered as such, labelled "verified correct, not timed".
"""

from __future__ import annotations

from typing import Callable, Optional

from runner.schema import EvalRequest, EvalResult

from agent.deadline import Deadline
from agent.outcome import Outcome, Tried
from agent.progress import Progress
from agent.watch import Watched
from agent.compile.standalone import CannotWrite, write


def run(runner: Watched, request: EvalRequest, baseline: EvalResult, arch: str, settings,
        say: Callable[[Progress], None], deadline: Optional[Deadline] = None) -> Outcome:
    target = request.target
    out = Outcome(strategy="compile", baseline=baseline)
    d = baseline.device
    gpu = bool(d and d.is_gpu and baseline.timing)
    out.timed = gpu
    say(runner.progress("search", f"asking PyTorch's compiler (Inductor) for Triton for {target} ...",
                        device=d, arch=arch, total=1))
    gen = runner.evaluate(request.with_candidate(None, trials=1, timing=False, inductor=True))
    generated = gen.generated or {}
    if not gen.correct or not ("code" in generated or "variants" in generated):
        why = generated.get("error") or gen.message
        out.message = f"PyTorch's compiler gave no Triton for {target.symbol}: {why}"
        return out
    try:
        written = write(request.files[target.path], target.symbol, generated)
    except CannotWrite as e:
        out.message = f"no standalone Triton file for {target.symbol}: {e}"
        return out
    kernels = ", ".join(k.name for k in written.kernels)
    say(runner.progress("batch", f"checking the standalone Triton file ({len(written.kernels)} kernel(s): "
                                 f"{kernels}) against the original", done=0, total=1))
    cand = runner.evaluate(request.with_candidate(written.text))
    label = f"Inductor's kernels, standalone ({kernels})"
    tried = Tried(label=label, verdict="verified" if cand.verified else cand.status, correct=cand.verified,
                  speedup=cand.speedup, message=cand.message, result=cand)
    out.tried.append(tried)
    if written.library:
        out.notes.append(f"left to PyTorch's libraries: {', '.join(written.library)}")
    if not cand.verified:
        out.message = f"the standalone Triton file for {target.symbol} is not verified: {cand.message}"
        return out
    if not gpu:
        tried.chosen = True
        out.source, out.result, out.untimed = written.text, cand, True
        out.message = (f"a standalone Triton file for {target.symbol} ({len(written.kernels)} kernel(s) written by "
                       f"PyTorch's compiler) is verified correct on every case that ran; not timed "
                       f"({cand.timing_unavailable or 'no GPU'}), so its block sizes are Inductor's defaults")
        return out
    return _tuned(runner, request, baseline, arch, settings, say, deadline, written.text, cand, out)


def _tuned(runner: Watched, request: EvalRequest, baseline: EvalResult, arch: str, settings, say, deadline,
           text: str, cand: EvalResult, out: Outcome) -> Outcome:
    """On a GPU: the tuner over the standalone file's launches, then the choice confirmed
    against the original."""
    from agent.tune.strategy import run as tune_run
    standalone = request.with_candidate(None)
    standalone.files[request.target.path] = text
    tuned = tune_run(runner, standalone, cand, arch, settings.tune, say, deadline)
    out.tried += [Tried(label=f"tuned: {t.label}", verdict=t.verdict, correct=t.correct, speedup=t.speedup,
                        message=t.message, case_speedups=t.case_speedups) for t in tuned.tried]
    best_text = tuned.source or text
    final = runner.evaluate(request.with_candidate(best_text)) if tuned.source else cand
    out.report = tuned.report
    gain = final.verified_speedup()
    if gain is None:
        out.message = (f"the standalone Triton file is verified but not faster than the original "
                       f"({_speed(final)})" + (" after tuning" if tuned.source else ""))
        return out
    out.source, out.result, out.speedup = best_text, final, gain
    out.message = (f"a standalone Triton file, {'tuned, ' if tuned.source else ''}verified {gain:.2f}x faster "
                   "than the original")
    return out


def _speed(r: EvalResult) -> str:
    return f"{r.speedup:.2f}x" if r.speedup is not None else "not timed"
