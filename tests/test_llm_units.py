"""The pieces of the GEAK loop underneath: extraction, retrieval, knowledge, prompts, the
optimizer's ranking and choice (timing injected), the lanes' debugging trap, usage."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import ROOT
from runner.schema import CaseResult, DeviceInfo, ErrorInfo, EvalResult, Flag, Timing
from agent.llm import knowledge, prompts
from agent.llm.extract import NoCode, extract
from agent.llm.generator import Task
from agent.llm.lane import Lane
from agent.llm.ranking import choose, history_text, rank
from agent.llm.records import Step
from agent.llm.retrieval import Corpus, corpus_files, tokens
from agent.llm.usage import BudgetExceeded, Usage

MOD = textwrap.dedent('''
    import triton

    @triton.jit
    def k(x):
        pass

    def f(x):
        k[(1,)](x)
        return x
''').lstrip()


# ----------------------------------------------------------------------------- extraction


def test_extract_one_fenced_block_and_keeps_the_reasoning():
    e = extract(f"Use a wider block.\n\n```python\n{MOD}```\nThat should help.", "f")
    assert e.source == MOD and e.how == "fenced"
    assert "Use a wider block." in e.notes and "That should help." in e.notes and "def f" not in e.notes


def test_extract_picks_the_block_that_defines_the_symbol_and_the_last_version():
    first = MOD.replace("return x", "return 1")
    assert first != MOD
    text = (f"Usage:\n```python\ny = f(x)\n```\nFirst try:\n```py\n{first}```\n"
            f"Corrected:\n```python\n{MOD}```\n```bash\npip install triton\n```")
    assert extract(text, "f").source == MOD


def test_extract_joins_blocks_that_only_together_define_the_module():
    kernel, wrapper = MOD.split("def f")
    e = extract(f"Kernel:\n```python\n{kernel}```\nWrapper:\n```python\ndef f{wrapper}```", "f")
    assert e.how == "joined" and "@triton.jit" in e.source and "def f(x):" in e.source
    compile(e.source, "x.py", "exec")


def test_extract_survives_a_cut_off_answer_json_and_bare_code():
    assert extract(f"Here:\n```python\n{MOD}", "f").how == "unterminated"
    js = extract(json.dumps({"explanation": "vectorised", "code": MOD}), "f")
    assert js.how == "json" and js.source == MOD and js.notes == "vectorised"
    fenced_json = "```json\n" + json.dumps({"code": f"```python\n{MOD}```"}) + "\n```"
    assert extract(fenced_json, "f").source == MOD
    assert extract(MOD, "f").how == "bare"
    assert extract(f"~~~python\n{MOD}~~~", "f").source == MOD


def test_extract_leaves_out_the_drafts_of_a_reasoning_model():
    draft = MOD.replace("return x", "return 0")
    e = extract(f"<think>Maybe:\n```python\n{draft}```\nno, better not.</think>\nFinal:\n```python\n{MOD}```", "f")
    assert e.source == MOD and "Maybe" not in e.notes
    with pytest.raises(NoCode, match="only reasoning"):
        extract(f"<think>```python\n{MOD}```", "f")


def test_extract_hands_on_a_broken_block_so_the_evaluator_names_the_line():
    broken = MOD.replace("def f(x):", "def f(x)")
    assert extract(f"```python\n{broken}```", "f").source == broken


@pytest.mark.parametrize("text,why", [
    ("", "empty"), ("   \n", "empty"),
    ("Just make the block bigger.", "no ```python code block"),
    ("```python\ndef g(x):\n    return x\n```", "no code block defines `f`"),
    ('{"answer": 42}', "no ```python code block"),
])
def test_extract_says_why_there_is_no_code(text, why):
    with pytest.raises(NoCode, match=why.replace("`", ".")):
        extract(text, "f")


# ----------------------------------------------------------------------------- retrieval, knowledge


def test_bm25_finds_the_kernel_most_like_the_query_and_never_the_target_itself(tmp_path):
    files = corpus_files()
    assert any(f.name == "softmax.py" for f in files)  # benchmarks/ may be absent: no error
    corpus = Corpus(sorted((ROOT / "examples").glob("*.py")))
    target = (ROOT / "examples" / "softmax.py").read_text()
    best = corpus.best(target, exclude_texts=[target])
    assert best is not None and best.path.endswith("softmax_fast.py")
    mm = corpus.best("tl.dot accumulator BLOCK_M BLOCK_N BLOCK_K matmul tiles")
    assert mm.path.endswith("matmul.py")
    assert "tl.dot" in tokens("acc += tl.dot(a, b)") and "block" in tokens("BLOCK_SIZE")


def test_retrieval_takes_a_user_directory(tmp_path):
    (tmp_path / "mine.py").write_text("import triton\n@triton.jit\ndef zebra_quux_kernel(x):\n    pass\n")
    (tmp_path / "notes.py").write_text("zebra_quux = 1  # no kernel: not in the corpus\n")
    (tmp_path / "prose.py").write_text('import triton\n"""zebra quux zebra quux"""\n@triton.jit\n'
                                       'def k(x):\n    assert x, "zebra quux"  # zebra quux\n')
    corpus = Corpus(corpus_files([tmp_path]))
    assert corpus.best("zebra quux").path.endswith("mine.py")  # code, not comments or strings
    assert [d for d in corpus.index.docs if d.path.endswith("prose.py")][0].toks.get("zebra") is None
    assert all(not d.path.endswith("notes.py") for d in corpus.index.docs)
    assert len(Corpus(corpus_files([tmp_path / "missing"]))) == len(Corpus(corpus_files()))


def test_knowledge_packs_follow_the_device_or_the_arch():
    h200 = DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90")
    mi300 = DeviceInfo(name="AMD Instinct MI300X", backend="rocm", arch="gfx942")
    cpu = DeviceInfo(name="CPU (Triton interpreter)", backend="interpreter")
    text, names = knowledge.pick(h200)
    assert names == ["triton.md", "nvidia_hopper.md"] and "wgmma" in text
    text, names = knowledge.pick(mi300)
    assert names == ["triton.md", "amd_cdna3.md"]
    assert "64 threads wide" in text and "64 KiB" in text and "MFMA" in text and "num_stages" in text
    assert knowledge.pick(cpu)[1] == ["triton.md"]
    assert knowledge.pick(cpu, "gfx942")[1] == ["triton.md", "amd_cdna3.md"]
    assert knowledge.pick(DeviceInfo(name="A100", backend="cuda", arch="sm_80"))[1] == ["triton.md"]


def test_prompt_templates_fill_every_slot_and_refuse_unknown_ones():
    text = prompts.render("task", path="k.py", symbol="f", source="def f(x): return {x}")
    assert "def f(x): return {x}" in text and "{{" not in text
    with pytest.raises(KeyError, match="missing"):
        prompts.render("task", path="k.py", symbol="f")
    for name in ("system", "generate", "optimize", "reflect_did_not_run", "reflect_wrong", "reflect_rejected",
                 "reflect_correct", "restart", "no_code"):
        assert prompts.slots(name)  # every template has slots, and loads


# ----------------------------------------------------------------------------- optimizer and lanes


def timed(speedup: float, spread: float = 1.0, ref_ms: float = 1.0) -> EvalResult:
    return EvalResult(status="ok", correct=True, message="correct", cases=[CaseResult(0, "n=1", "x: f32[1]", 1, True)],
                      timing=Timing(ref_ms=ref_ms, cand_ms=ref_ms / speedup, speedup=speedup, speedup_geomean=speedup,
                                    spread_pct=spread, method="events", cases_timed=1))


def step(i: int, result: EvalResult, outcome: str = "correct", kind: str = "generate", lane: int = 0) -> Step:
    return Step(id=f"i{i:02d}-c{lane}", iteration=i, lane=lane, kind=kind, source=f"def f(x):\n    return x  # v{i}\n",
                result=result, outcome=outcome, notes=f"notes of v{i}")


def test_ranked_history_goes_from_slowest_to_fastest_and_keeps_the_best_five():
    steps = [step(i, timed(s)) for i, s in enumerate([1.2, 0.8, 2.5, 1.9, 1.0, 3.1, 0.5])]
    steps.append(step(7, EvalResult(status="mismatch", correct=False, message="wrong"), "wrong"))
    ranked = rank(steps)
    assert [s.id for s in ranked] == ["i04-c0", "i00-c0", "i03-c0", "i02-c0", "i05-c0"]
    text = history_text(ranked)
    assert text.index("1.000x") < text.index("1.200x") < text.index("1.900x") < text.index("2.500x") < text.index("3.100x")
    assert "notes of v5" in text and "# v5" in text and "0.500x" not in text
    # Untimed candidates keep the order they were found in, before any timed one.
    untimed = [step(i, EvalResult(status="ok", correct=True, message="ok", timing_unavailable="cpu")) for i in range(3)]
    assert [s.id for s in rank(untimed + [steps[2]])] == ["i00-c0", "i01-c0", "i02-c0", "i02-c0"]
    assert "not timed" in history_text(rank(untimed))


def test_choose_takes_the_fastest_verified_beyond_its_spread_and_never_an_untimed_one():
    wrong_fast = step(0, EvalResult(status="mismatch", correct=False, message="wrong",
                                    timing=timed(9.0).timing), "wrong")
    assert choose([wrong_fast, step(1, timed(1.3)), step(2, timed(1.6))]).id == "i02-c0"
    assert choose([step(0, timed(1.005))]) is None  # inside 1%
    assert choose([step(0, timed(1.04, spread=6.0))]) is None  # inside its own spread
    assert choose([step(0, EvalResult(status="ok", correct=True, message="ok"))]) is None
    assert choose([]) is None


def test_the_lane_reflects_on_each_outcome_and_falls_into_the_trap_after_n_failures():
    task = Task(path="k.py", symbol="f", source="def f(x):\n    return x\n", device="H200", knowledge="K")
    lane, steps = Lane(0, trap_after=2), []
    assert lane.next_prompt(task, steps)[0] == "generate"
    crash = EvalResult(status="compile_error", correct=False, message="k.py:3: syntax error: expected ':'",
                       error=ErrorInfo(kind="syntax_error", message="k.py:3: syntax error: expected ':'"))
    s0 = step(0, crash, "did_not_run")
    lane.observe(s0)
    steps.append(s0)
    kind, p = lane.next_prompt(task, steps)
    assert kind == "fix_did_not_run" and "syntax error: expected ':'" in p
    bad = EvalResult(status="rejected", correct=False, message="rejected",
                     flags=[Flag("torch_compute", "reject", "the candidate called aten.relu")])
    s1 = step(1, bad, "rejected", kind)
    lane.observe(s1)
    steps.append(s1)
    kind, p = lane.next_prompt(task, steps)
    assert kind == "restart" and "(did not run, rejected)" in p and "(none yet)" in p
    s2 = step(2, timed(1.4), "correct", kind)
    lane.observe(s2)
    steps.append(s2)
    kind, p = lane.next_prompt(task, steps)
    assert kind == "optimize" and "Speedup over the original: 1.400x" in p and "### 1. i02-c0: 1.400x" in p
    # A fresh lane (another parallel candidate) starts from the others' verified history.
    assert Lane(1).next_prompt(task, steps)[0] == "optimize"
    # Observing the same steps again rebuilds the same state (resume).
    again = Lane(0, trap_after=2)
    for s in steps:
        again.observe(s)
    assert again.next_prompt(task, steps) == (kind, p)


def test_usage_counts_tokens_and_the_budget_stops_further_calls():
    u = Usage(budget=100)
    u.add(40, 30)
    u.check()
    u.add(20, 10)
    assert u.total == 100 and u.spent
    with pytest.raises(BudgetExceeded, match="100 of 100"):
        u.check()
    assert Usage().spent is False
