"""The GEAK loop end to end on the CPU: real SDKs against the scripted LLM server on loopback,
real evaluations on the Triton interpreter (the session runner), the run directory on disk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ADD_RELU, ROOT, Project, kernel_variant
from llm_server import ScriptedLLM, load_transcript
from agent.cli import build_parser
from agent.commands.optimize import run as run_optimize

TRANSCRIPTS = Path(__file__).parent / "transcripts"


def fence(code: str, prose: str = "Here it is.") -> str:
    return f"{prose}\n\n```python\n{textwrap.dedent(code).lstrip()}```\n"


GOOD = fence(kernel_variant(block=512))


@pytest.fixture
def proj(tmp_path, monkeypatch) -> Project:
    p = Project(tmp_path).write("k.py", ADD_RELU)
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return p


@pytest.fixture
def llm(monkeypatch):
    servers = []

    def start(replies, provider="openai"):
        s = ScriptedLLM(replies).start()
        servers.append(s)
        monkeypatch.setenv("OPENAI_BASE_URL", s.openai_base_url)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", s.anthropic_base_url)
        return s

    yield start
    for s in servers:
        s.stop()


def optimize(runner, capsys, *extra, provider="openai"):
    """geak optimize k.py::add_relu --strategy llm ... in this process, on the session runner."""
    args = build_parser().parse_args(["optimize", "k.py::add_relu", "--strategy", "llm", "--provider", provider,
                                      "--model", "scripted", "--trials", "1", "--retries", "0",
                                      "--timeout", "20", "--json", *extra])
    code = run_optimize(args, runner=runner)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def steps_of(report) -> dict[str, Path]:
    return {p.name: p for p in sorted((Path(report["run_dir"]) / "steps").iterdir())}


def test_fail_wrong_correct_faster_each_prompt_reflects_the_last_result(proj, llm, runner, capsys):
    server = llm(load_transcript(TRANSCRIPTS / "add_relu.json"))
    code, rep, err = optimize(runner, capsys, "--iterations", "4")
    prompts = server.prompts()
    assert len(prompts) == 4
    # 1. Generation: target, instruction, knowledge and a retrieved one-shot example.
    assert "def add_relu(x, y):" in prompts[0] and "Optimize `add_relu`" in prompts[0]
    assert "Triton: general rules" in prompts[0]
    assert re.search(r"corpus .*\n\n# (examples|benchmarks)/\w+\.py\n", prompts[0])
    # 2. It did not compile: the next prompt holds the compiler's message and the candidate.
    assert "did not run: compile_error" in prompts[1]
    assert "syntax error: expected ':'" in prompts[1] and "def add_relu(x, y)\n" in prompts[1]
    # 3. It was wrong: the next prompt names the failing cases and their errors.
    assert "ran but computed the wrong result" in prompts[2]
    assert "case n=300 (x: float32[300], y: float32[300]): FAILED" in prompts[2]
    assert "case n=2048" in prompts[2] and "max abs err" in prompts[2]
    # 4. Correct: the optimizer prompt holds the ranked history with the candidate and its notes.
    assert "Your last candidate was correct" in prompts[3]
    assert "Verified candidates so far, slowest first" in prompts[3]
    assert "### 1. i02-c0: correct, not timed" in prompts[3] and "tl.maximum(x + y, 0.0)" in prompts[3]
    assert "I dropped the ReLU" in prompts[3]
    # Both correct candidates are verified; nothing was timed, so nothing is offered as faster.
    assert code == 1, err
    assert [c["outcome"] for c in rep["candidates"]] == ["did_not_run", "wrong", "correct", "correct"]
    assert rep["verified"] == ["i02-c0", "i03-c0"] and rep["improved"] is False and rep["source"] is None
    assert "timing needs a GPU" in rep["message"] and "NO VERIFIED IMPROVEMENT" in err
    assert rep["usage"]["calls"] == 4 and rep["usage"]["input_tokens"] > 0 and rep["usage"]["output_tokens"] > 0
    # The run directory holds every prompt, answer, candidate and EvalResult.
    steps = steps_of(rep)
    assert list(steps) == ["i00-c0", "i01-c0", "i02-c0", "i03-c0"]
    for d in steps.values():
        assert {"prompt.md", "response.md", "candidate.py", "result.json", "step.json"} <= {f.name for f in d.iterdir()}
    assert json.loads((steps["i00-c0"] / "result.json").read_text())["status"] == "compile_error"
    assert (steps["i01-c0"] / "prompt.md").read_text() == prompts[1]
    run = Path(rep["run_dir"])
    assert json.loads((run / "run.json").read_text())["model"] == "scripted"
    assert json.loads((run / "report.json").read_text())["verified"] == ["i02-c0", "i03-c0"]
    assert "`add_relu` keeps its name and signature" in (run / "system.md").read_text()
    assert server.requests[0]["body"]["stream"] is True  # streamed for real


def test_anthropic_provider_runs_the_same_loop(proj, llm, runner, capsys):
    server = llm([{"text": fence(kernel_variant(block=128, value="x + y"))}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "2", provider="anthropic")
    assert [r["api"] for r in server.requests] == ["anthropic", "anthropic"]
    assert "FAILED" in server.prompts()[1]
    assert [c["outcome"] for c in rep["candidates"]] == ["wrong", "correct"] and code == 1
    assert rep["usage"]["calls"] == 2 and rep["usage"]["output_tokens"] > 0


CHEATS = {
    "no_triton_launch": """
        import torch

        def add_relu(x, y):
            return torch.relu(x + y)
    """,
    # Launches a kernel for show, and lets PyTorch compute the answer.
    "torch_compute": kernel_variant(block=256, post="    out = torch.relu(x + y)"),
}


@pytest.mark.parametrize("rule", sorted(CHEATS))
def test_a_cheating_answer_is_rejected_and_told_why(proj, llm, runner, capsys, rule):
    server = llm([{"text": fence(CHEATS[rule])}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "2")
    assert rep["candidates"][0]["outcome"] == "rejected"
    assert "was rejected by the evaluator" in server.prompts()[1] and rule in server.prompts()[1]
    assert rep["verified"] == ["i01-c0"] and code == 1
    result = json.loads((steps_of(rep)["i00-c0"] / "result.json").read_text())
    assert result["status"] == "rejected" and rule in {f["code"] for f in result["flags"]}


def test_empty_and_garbage_answers_are_attempts_that_say_why(proj, llm, runner, capsys):
    server = llm([{"text": ""}, {"text": "I think you should use bigger blocks. Good luck!"},
                  {"text": json.dumps({"reasoning": "fewer programs", "code": textwrap.dedent(kernel_variant(block=512))})}])
    code, rep, err = optimize(runner, capsys, "--iterations", "3")
    outcomes = [c["outcome"] for c in rep["candidates"]]
    assert outcomes == ["no_code", "no_code", "correct"], rep["candidates"]
    assert "the answer was empty" in server.prompts()[1]
    assert "holds no ```python code block" in server.prompts()[2]
    step = json.loads((steps_of(rep)["i02-c0"] / "step.json").read_text())
    assert step["extraction"] == "json" and step["notes"] == "fewer programs"


def test_an_answer_cut_at_the_token_limit_is_told_so(proj, llm, runner, capsys):
    half = fence(kernel_variant(block=512))[:300]  # the module stops mid-kernel, its fence open
    server = llm([{"text": half, "cut": True}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "2", provider="anthropic")
    assert rep["candidates"][0]["outcome"] == "no_code"
    assert "cut off at the max-tokens limit" in server.prompts()[1]
    assert json.loads((steps_of(rep)["i00-c0"] / "step.json").read_text())["truncated"] is True
    assert rep["candidates"][1]["outcome"] == "correct"


@pytest.mark.parametrize("reply,kind", [({"status": 429, "error": "rate limited, slow down"}, "rate_limit"),
                                        ({"status": 500, "error": "upstream exploded"}, "server"),
                                        ({"delay_s": 3, "text": GOOD}, "timeout")])
def test_provider_failures_stop_the_run_cleanly_and_keep_the_run_directory(proj, llm, runner, capsys, reply, kind):
    llm([reply, reply])
    code, rep, err = optimize(runner, capsys, "--iterations", "5", "--timeout", "1")
    assert code == 4 and rep["stopped"] == "provider_errors" and rep["iterations_run"] == 2
    assert [c["outcome"] for c in rep["candidates"]] == ["provider_error", "provider_error"]
    step = json.loads((steps_of(rep)["i01-c0"] / "step.json").read_text())
    assert step["error_kind"] == kind and step["outcome"] == "provider_error"
    assert rep["usage"]["failed_calls"] == 2
    assert "every model call failed" in err and "the model gave no candidate: 2 call(s) failed" in rep["message"]


def test_a_rate_limit_costs_one_attempt_then_the_run_goes_on(proj, llm, runner, capsys):
    server = llm([{"status": 429, "error": "slow down"}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "2")
    assert [c["outcome"] for c in rep["candidates"]] == ["provider_error", "correct"]
    assert server.prompts()[0] == server.prompts()[1]  # the same prompt, asked again
    assert "rate limited" in err


def test_a_refused_key_stops_at_once_with_exit_4(proj, llm, runner, capsys, monkeypatch):
    llm([{"status": 401, "error": "invalid x-api-key"}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "3")
    assert code == 4 and rep["stopped"] == "provider" and rep["iterations_run"] == 1
    assert "HTTP 401" in err and "check the API key" in err


def test_token_budget_stops_the_run(proj, llm, runner, capsys):
    usage = {"input": 600, "output": 500}
    server = llm([{"text": GOOD, "usage": usage}] * 5)
    code, rep, err = optimize(runner, capsys, "--iterations", "5", "--budget-tokens", "2000")
    assert len(server.requests) == 2  # 1100 tokens after one call, 2200 after two: no third call
    assert rep["stopped"] == "budget" and rep["usage"]["total_tokens"] == 2200
    assert "token budget spent" in err and code == 1


def test_parallel_candidates_are_generated_concurrently_and_evaluated_together(proj, llm, runner, capsys):
    wrong = fence(kernel_variant(block=128, value="x + y"))
    server = llm([{"text": wrong, "delay_s": 1}, {"text": GOOD, "delay_s": 1}, {"text": GOOD}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "2", "--parallel", "2")
    assert sorted(c["id"] for c in rep["candidates"]) == ["i00-c0", "i00-c1", "i01-c0", "i01-c1"]
    first, second = server.requests[:2]
    assert abs(second["time"] - first["time"]) < 0.8  # both asked at once, not one after the other
    # Second iteration: the lane that was wrong is told why; the other optimizes from the ranked history.
    by_id = {c["id"]: c for c in rep["candidates"]}
    assert sorted(by_id[f"i01-c{k}"]["kind"] for k in (0, 1)) == ["fix_wrong", "optimize"]
    later = server.prompts()[2:]
    assert sum("computed the wrong result" in p for p in later) == 1
    assert sum("### 1. i00-c" in p for p in later) == 1
    assert sum(c["outcome"] == "correct" for c in rep["candidates"]) == 3


def test_debugging_trap_restarts_from_the_best_known_candidate(proj, llm, runner, capsys):
    wrong = fence(kernel_variant(block=128, value="x + y"))
    server = llm([{"text": GOOD}, {"text": wrong}, {"text": wrong}, {"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "4", "--fix-attempts", "2")
    kinds = [c["kind"] for c in rep["candidates"]]
    assert kinds == ["generate", "optimize", "fix_wrong", "restart"]
    last = server.prompts()[3]
    assert "The last 2 attempts along one line of attack failed (wrong, wrong)" in last
    assert "### 1. i00-c0: correct" in last  # restarts from the verified one


def test_resume_goes_on_from_the_run_directory(proj, llm, runner, capsys):
    server = llm(load_transcript(TRANSCRIPTS / "add_relu.json"))
    code, rep, err = optimize(runner, capsys, "--iterations", "2")
    assert len(server.requests) == 2
    run_dir = rep["run_dir"]
    # Interrupted mid-step: the third step has a prompt on disk but no answer.
    (Path(run_dir) / "steps" / "i02-c0").mkdir()
    (Path(run_dir) / "steps" / "i02-c0" / "prompt.md").write_text("cut off")
    code, rep, err = optimize(runner, capsys, "--iterations", "4", "--resume", run_dir)
    assert rep["run_dir"] == run_dir and "resuming" in err
    assert len(server.requests) == 4  # only the two missing steps were asked
    assert "ran but computed the wrong result" in server.prompts()[2]  # reflects on step i01 from disk
    assert [c["outcome"] for c in rep["candidates"]] == ["did_not_run", "wrong", "correct", "correct"]
    assert rep["usage"]["calls"] == 4


def test_the_cli_through_its_own_door(tmp_path):
    """A real `geak optimize` process: its own local runner, the env's base URL, --out untouched."""
    p = Project(tmp_path).write("k.py", ADD_RELU)
    with ScriptedLLM([{"text": GOOD}]) as server:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=server.openai_base_url)
        r = subprocess.run([sys.executable, "-m", "agent.cli", "optimize", "k.py::add_relu", "--strategy", "llm",
                            "--provider", "openai", "--model", "scripted", "--iterations", "1", "--trials", "1",
                            "--retries", "0", "--device", "interpreter", "--workers", "1",
                            "--out", "best.py", "--json"], cwd=p.root, env=env,
                           capture_output=True, text=True, timeout=240)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verified"] == ["i00-c0"] and doc["improved"] is False
    assert "iterations" in r.stderr and "timing needs a GPU" in r.stderr
    assert not (p.root / "best.py").exists()  # nothing unverified is ever written
    assert (p.root / ".geak" / "runs").is_dir()


@pytest.mark.parametrize("argv,needle", [
    (["--provider", "openai"], "needs --model"),
    (["--model", "m"], "needs --provider"),
    (["--provider", "openai", "--model", "m", "--parallel", "0"], "--parallel must be at least 1"),
    (["--provider", "openai", "--model", "m", "--target-speedup", "0.5"], "must be above 1"),
    (["--provider", "openai", "--model", "m"], "OPENAI_API_KEY is not set"),
    (["--provider", "anthropic", "--model", "m"], "ANTHROPIC_API_KEY is not set"),
    (["--provider", "openai", "--model", "m", "--resume", "nowhere"], "not a run directory"),
], ids=["no-model", "no-provider", "parallel-0", "target-below-1", "no-openai-key", "no-anthropic-key", "bad-resume"])
def test_bad_usage_exits_2_with_a_message(proj, capsys, argv, needle):
    args = build_parser().parse_args(["optimize", "k.py::add_relu", "--strategy", "llm", *argv])
    assert run_optimize(args, runner=object()) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_a_missing_target_exits_2(proj, capsys, llm):
    llm([])
    args = build_parser().parse_args(["optimize", "nope.py::f", "--strategy", "llm", "--provider", "openai",
                                      "--model", "m"])
    assert run_optimize(args, runner=object()) == 2
    assert "nope.py: no such file" in capsys.readouterr().err


def test_the_gpu_transcript_behaves_as_scripted_on_the_interpreter(llm, runner, capsys, monkeypatch, tmp_path):
    """scripts/gpu_llm_check.sh replays this transcript on a GPU, where speed decides; here the
    interpreter checks that its candidates fail, go wrong and verify as they claim to."""
    monkeypatch.chdir(ROOT)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    server = llm(load_transcript(TRANSCRIPTS / "softmax_gpu.json"))
    args = build_parser().parse_args(["optimize", "examples/softmax.py::softmax", "--strategy", "llm",
                                      "--provider", "openai", "--model", "scripted", "--iterations", "4",
                                      "--trials", "1", "--retries", "0", "--run-dir", str(tmp_path), "--json"])
    code = run_optimize(args, runner=runner)
    rep = json.loads(capsys.readouterr().out)
    assert [c["outcome"] for c in rep["candidates"]] == ["did_not_run", "wrong", "correct", "correct"]
    wrong = rep["candidates"][1]["message"]
    assert "n_rows=40" in wrong or "40" in wrong  # only the row that is not a power of two fails
    assert "case n_rows=40, n_cols=300" in server.prompts()[2] and code == 1
    # The one-shot example, by code similarity: another softmax kernel, never the target itself.
    example = re.search(r"\n# ((examples|benchmarks)/\w+\.py)\n", server.prompts()[0]).group(1)
    assert "softmax" in example and example != "examples/softmax.py"


class TimedRunner:
    """The real runner for correctness, with timing injected from a `# speed: X` line in the
    candidate (the CPU interpreter measures none): so the choice of the fastest, the target
    speedup stop and --out can be checked here; on a GPU scripts/gpu_llm_check.sh measures."""

    def __init__(self, runner):
        self.runner = runner
        self.device, self.parallelism = runner.device, runner.parallelism

    def _timed(self, req, r):
        import re
        from runner.schema import Timing
        src = (req.candidate_files or {}).get(req.target.path, "")
        m = re.search(r"# speed: ([0-9.]+)", src)
        speed = float(m.group(1)) if m else 1.0
        if r.correct:
            r.timing = Timing(ref_ms=1.0, cand_ms=1.0 / speed, speedup=speed, speedup_geomean=speed,
                              spread_pct=1.0, method="injected", cases_timed=1)
            r.timing_unavailable = None
        return r

    def evaluate(self, req):
        return self._timed(req, self.runner.evaluate(req))

    def evaluate_many(self, reqs):
        return [self._timed(q, r) for q, r in zip(reqs, self.runner.evaluate_many(reqs))]


def candidate(block: int, speed: float, **kw) -> str:
    return fence(kernel_variant(block=block, **kw) + f"\n# speed: {speed}\n")


def test_with_timing_the_fastest_verified_candidate_is_chosen_and_written(proj, llm, runner, capsys):
    server = llm([{"text": candidate(128, 1.3)}, {"text": candidate(256, 5.0, value="x + y")},  # fast but wrong
                  {"text": candidate(512, 1.8)}, {"text": candidate(1024, 1.5)}])
    code, rep, err = optimize(TimedRunner(runner), capsys, "--iterations", "4", "--out", "best.py")
    assert code == 0 and rep["improved"] and rep["best"] == "i02-c0" and rep["best_speedup"] == 1.8
    assert rep["verified"] == ["i02-c0", "i03-c0", "i00-c0"]  # fastest first
    assert (proj.root / "best.py").read_text() == rep["source"] and "BLOCK=512" in rep["source"]
    assert rep["result"]["correct"] and "IMPROVED" in err
    # The optimizer prompt ranks the history by measured speed, slowest first.
    last = server.prompts()[3]
    assert last.index("### 1. i00-c0: 1.300x") < last.index("### 2. i02-c0: 1.800x")
    assert "Speedup over the original: 1.800x" in last


def test_target_speedup_stops_early(proj, llm, runner, capsys):
    server = llm([{"text": candidate(512, 1.2)}, {"text": candidate(1024, 2.5)}, {"text": GOOD}])
    code, rep, err = optimize(TimedRunner(runner), capsys, "--iterations", "3", "--target-speedup", "2")
    assert len(server.requests) == 2 and rep["stopped"] == "target" and rep["best"] == "i01-c0"
    assert code == 0 and "target speedup" in err


def test_no_candidate_beyond_the_spread_is_no_improvement(proj, llm, runner, capsys):
    llm([{"text": candidate(512, 1.005)}, {"text": candidate(1024, 0.7)}])
    code, rep, err = optimize(TimedRunner(runner), capsys, "--iterations", "2", "--out", "best.py")
    assert code == 1 and not rep["improved"] and "none faster than the original" in rep["message"]
    assert not (proj.root / "best.py").exists()


def test_arch_picks_the_knowledge_pack_when_the_runner_has_no_gpu(proj, llm, runner, capsys):
    server = llm([{"text": GOOD}])
    code, rep, err = optimize(runner, capsys, "--iterations", "1", "--arch", "gfx942")
    assert rep["knowledge"] == ["triton.md", "amd_cdna3.md"]
    assert "64 threads wide" in server.prompts()[0] and "write for gfx942" in server.prompts()[0]


def test_a_provider_nobody_listens_for_stops_the_run_at_once_with_its_own_exit_code(tmp_path):
    """The OpenAI SDK against a closed loopback port: no call can get through, so the run stops
    after the first iteration with one message and exit 4 (not the 1 of "nothing better found")."""
    import socket
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = Project(tmp_path).write("k.py", ADD_RELU)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1")
    r = subprocess.run([sys.executable, "-m", "agent.cli", "optimize", "k.py::add_relu", "--strategy", "llm",
                        "--provider", "openai", "--model", "m", "--iterations", "5", "--trials", "1",
                        "--retries", "0", "--device", "interpreter", "--workers", "1"], cwd=p.root, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "geak: cannot run: " in r.stderr and "cannot reach the server" in r.stderr and "what to do" in r.stderr
    assert "NO VERIFIED IMPROVEMENT" not in r.stdout + r.stderr and "iteration 2/" not in r.stderr
    runs = list((p.root / ".geak" / "runs").iterdir())
    assert len(runs) == 1 and [d.name for d in (runs[0] / "steps").iterdir()] == ["i00-c0"]


def test_a_spilling_candidate_is_shown_what_the_compiler_made_of_it(tmp_path, llm, runner, capsys, monkeypatch):
    """The reflector's feedback for a correct candidate that spills (or is slower): its compiled
    difference from the original, for the target GPU, read from both listings."""
    pair = ROOT / "tests" / "compiled_pair"
    Project(tmp_path).write("sm.py", (pair / "rowsoftmax_warps.py").read_text())
    monkeypatch.chdir(tmp_path)
    server = llm([{"text": fence((pair / "rowsoftmax.py").read_text(), "One warp per row.")},
                  {"text": fence((pair / "rowsoftmax_warps.py").read_text(), "Back to eight warps.")}])
    args = build_parser().parse_args(["optimize", "sm.py::softmax", "--strategy", "llm", "--provider", "openai",
                                      "--model", "scripted", "--trials", "1", "--retries", "0", "--timeout", "60",
                                      "--iterations", "2", "--arch", "sm_90", "--json"])
    run_optimize(args, runner=runner)
    rep = json.loads(capsys.readouterr().out)
    prompts = server.prompts()
    assert [c["outcome"] for c in rep["candidates"]] == ["correct", "correct"]
    assert "What the compiler made of it, against the original" in prompts[1]
    block = prompts[1][prompts[1].index("compiled difference on sm_90 (sass)"):]
    spills = next(r for r in block.splitlines() if r.strip().startswith("spills (bytes)")).split()
    assert spills[2] == "0" and int(spills[4]) > 0 and spills[5] == "changed", spills
    assert "warps=8" in block and "warps=1" in block
    steps = steps_of(rep)
    assert "spill stores" in json.loads((steps["i00-c0"] / "step.json").read_text())["compiled"]
    # The second candidate does not spill and nothing is timed: no compiled block for it.
    assert json.loads((steps["i01-c0"] / "step.json").read_text())["compiled"] is None
    # The run directory keeps the figures, not the listings.
    res = json.loads((steps["i00-c0"] / "result.json").read_text())
    assert res["resources"] and all(k["listing"] is None and k["spill_bytes"] > 0 for k in res["resources"])
