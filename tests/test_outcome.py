"""``agent.outcome.summary``: the one line ``geak optimize`` ends with and the editor shows for
the same outcome (in its own words), for every way an optimization can end."""

from __future__ import annotations

from agent.outcome import NONE_FASTER, Outcome, Tried, summary
from geak_lsp.settings import Settings
from geak_lsp.strategies import _worded
from runner.schema import DeviceInfo, EvalResult

H200 = DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90")
CPU = DeviceInfo(name="CPU", backend="interpreter")


def base(device=H200, correct=True) -> EvalResult:
    return EvalResult(status="ok" if correct else "mismatch", correct=correct,
                      message="" if correct else "output 0: 3 of 8 elements differ", device=device)


def tried(*verdicts, chosen=None) -> list[Tried]:
    return [Tried(label=f"iteration 1, candidate {i + 1}", verdict=v, correct=v == "verified", chosen=i == chosen)
            for i, v in enumerate(verdicts)]


def test_each_ending_in_one_line():
    fast = Outcome("llm", base(), source="x", speedup=1.84, timed=True, tried=tried("verified", "mismatch", chosen=0))
    assert summary(fast) == "iteration 1, candidate 1 is verified and 1.84x faster than the original"
    slow = Outcome("llm", base(), timed=True, tried=tried("verified", "verified", "mismatch"))
    assert summary(slow) == f"2 of 3 candidates correct, {NONE_FASTER}"
    cpu = Outcome("tune", base(CPU), tried=[Tried("BLOCK=64", "verified", True), Tried("BLOCK=8", "pruned")])
    assert summary(cpu) == ("1 of 1 launch configs verified correct on the Triton CPU interpreter, none timed: "
                            "no verified improvement (timing needs a GPU)")
    untimed = Outcome("llm", base(CPU), source="x", untimed=True, tried=tried("verified", chosen=0))
    assert summary(untimed).endswith("not timed (timing needs a GPU); offered because --untimed is on")
    wrong = Outcome("llm", base(), timed=True, tried=tried("mismatch", "crashed"), stopped="time budget")
    assert summary(wrong) == "none of the 2 candidates was correct (the search stopped on its time budget)"
    fails = Outcome("tune", base(correct=False))
    assert summary(fails) == "the original fails its own inputs: output 0: 3 of 8 elements differ; fix it first"
    assert summary(Outcome("tune", None, message="the task budget was spent before ...")) == \
        "the task budget was spent before ..."


def test_the_editor_says_the_same_in_its_words():
    untimed = Outcome("llm", base(CPU), source="x", untimed=True, tried=tried("verified", chosen=0))
    assert _worded(untimed, Settings()) == summary(untimed).replace("--untimed", "geak.applyUntimed")
    cpu = Outcome("tune", base(CPU), tried=[Tried("BLOCK=64", "verified", True)])
    assert _worded(cpu, Settings()) == summary(cpu)
    told = _worded(cpu, Settings(apply_untimed=True))
    assert told.startswith(summary(cpu)) and "the tuner chooses a config by its timing" in told
