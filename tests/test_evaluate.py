"""The evaluator through the real local runner: worker subprocesses, CPU interpreter."""

from __future__ import annotations

import textwrap

from conftest import ADD_RELU, flag_codes, kernel_variant


# ----------------------------------------------------------------------------- verdicts


def test_target_against_itself(project, runner):
    r = project.evaluate(runner, "ref.py::add_relu")
    assert r.status == "ok" and r.correct, r.message
    assert r.device.backend == "interpreter"
    assert r.inputs_convention == "cases"
    assert [c.label for c in r.cases] == ["n=300", "n=2048"]
    # The original's check: one draw per case (the others are drawn when a candidate needs them).
    assert all(c.passed and c.trials == 1 for c in r.cases)
    assert "2 case(s) × 1 trial(s)" in r.message
    assert r.timing is None and "interpreter" in r.timing_unavailable
    assert r.launches["candidate"] == ["add_relu_kernel"]
    # A candidate is still judged on every trial asked for.
    project.write("cand.py", kernel_variant(block=64))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.correct and all(c.trials == 3 for c in r.cases), r.message
    # Where the time went: the stages one after another, and the ops within them.
    from runner.schema import STAGES
    assert {"import", "run", "candidate_runs", "reference_runs", "judge"} <= set(r.phases), r.phases
    assert sum(r.phases.get(k, 0.0) for k in STAGES) <= r.duration_s
    assert r.phases["candidate_runs"] <= r.phases["run"] and r.phases["judge"] <= r.phases["run"]
    # And each op's steps as its worker timed them, within the op.
    steps = {k: v for k, v in r.phases.items() if "." in k}
    assert {"candidate.inputs", "candidate.call", "candidate.save", "judge.load", "judge.compare"} <= set(steps), \
        r.phases
    top = ("candidate.inputs", "candidate.call", "candidate.save")
    assert sum(steps[k] for k in top) <= r.phases["candidate_runs"]
    assert sum(v for k, v in steps.items() if k.startswith("judge.")) <= r.phases["judge"]
    assert r.phases["candidate.call"] > 0
    # Within the call: the code's own part (its launches, compiling included, within it), then
    # the record and the guard bands. Phases are rounded to the millisecond.
    assert 0 < steps["candidate.launch"] <= steps["candidate.fn"] + 0.001
    assert steps["candidate.fn"] + steps.get("candidate.record", 0) + steps.get("candidate.copies", 0) \
        <= steps["candidate.call"] + 0.003


def test_a_gpu_workers_warm_up_runs_the_evaluators_own_paths():
    """Each GPU worker runs the evaluator's own work around a call once before any job
    (``warmup._harness_dtype`` for each dtype, then ``warmup._harness_record``), where an error is swallowed: here, on the CPU, it must run
    through and leave nothing handed over or received."""
    import torch
    from runner.worker import channel, warmup
    for name in warmup._WARM_DTYPES:
        warmup._harness_dtype(torch, name, "cpu")
    warmup._harness_record(torch, "cpu")
    assert channel._outbox == {} and channel._inbox == {}
    # The pool asks for it one part per op, until a part says none follows; every dtype the
    # harness paths cover is a part of its own, and the record comes last.
    parts = warmup.GPU_PARTS
    assert set(warmup._WARM_DTYPES) <= set(parts) and parts[-1] == "record" and len(set(parts)) == len(parts)
    assert [warmup.gpu_part(i, "cpu") for i in range(len(parts))] == [True] * (len(parts) - 1) + [False]
    assert channel._outbox == {} and channel._inbox == {}


def test_an_ops_steps_are_kept_only_as_plausible_names_and_seconds():
    """A worker's ``steps_s`` are claims (the candidate's process can write anything on its
    channel): only short lowercase names with finite, non-negative seconds reach ``phases``,
    under the op's own name, at most ``MAX_STEPS`` of one reply."""
    from runner.judge.process import MAX_STEPS, WorkerProcess
    job = WorkerProcess.__new__(WorkerProcess)
    job.new_evaluation()
    job.note_steps("candidate", {"call": 0.25, "save": 1, "Bad": 1.0, "x" * 30: 1.0, "neg": -1.0,
                                 "nan": float("nan"), "inf": float("inf"), "flag": True, "text": "1.0",
                                 "big": 1e9, 7: 1.0})
    job.note_steps("candidate", {"call": 0.5})
    job.note_steps("time_alone", {"warmup": 0.1})
    job.note_steps("Import", {"x": 1.0})  # not an op name
    job.note_steps("candidate", ["call", 1.0])  # not a mapping
    job.note_steps("judge", {f"s{i}": 0.001 for i in range(3 * MAX_STEPS)})
    assert job.step_s.pop("candidate.call") == 0.75
    assert job.step_s.pop("candidate.save") == 1.0
    assert job.step_s.pop("time_alone.warmup") == 0.1
    assert len(job.step_s) == MAX_STEPS and all(k.startswith("judge.s") for k in job.step_s), job.step_s
    job.new_evaluation()
    assert job.step_s == {}


def test_correct_candidate_with_other_launch_config(project, runner):
    project.write("cand.py", kernel_variant(block=64))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "ok" and r.correct, r.message
    assert all(c.passed for c in r.cases)
    assert r.launches["candidate"] == ["add_relu_kernel"]
    assert not flag_codes(r, "reject")


def test_wrong_candidate_reports_each_case(project, runner):
    # Drops the tail of every row past element 1024: right on the small case, wrong on the big.
    project.write("cand.py", kernel_variant(store_mask="mask & (offs < 1024)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch" and not r.correct
    small, big = r.cases
    assert small.passed and small.max_abs_err == 0
    assert not big.passed and big.trials == 1
    # Elements past 1024 were never written: they hold the evaluator's poison or garbage.
    assert big.detail.startswith("output[1024]: ")
    assert "1024 of 2048 elements" in big.detail or "elements outside" in big.detail
    assert "n=2048" in r.message


def test_slightly_wrong_values_fail_the_float32_tolerance(project, runner):
    project.write("cand.py", kernel_variant(value="tl.maximum(x + y, 0.0) * 1.001"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch"
    assert "rtol" in r.cases[0].detail
    # A user-set tolerance that admits the error passes it.
    from runner.schema import Tolerance
    r2 = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu",
                          tolerance={"float32": Tolerance(atol=1e-2, rtol=1e-2)})
    assert r2.status == "ok", r2.message


def test_wrong_dtype_and_shape_and_count(project, runner):
    project.write("dt.py", kernel_variant(post="    out = out.half()"))
    r = project.evaluate(runner, "ref.py::add_relu", "dt.py::add_relu")
    assert r.status == "mismatch" and "dtype float16, expected float32" in r.cases[0].detail
    project.write("sh.py", kernel_variant(ret="out[:-1]"))
    r = project.evaluate(runner, "ref.py::add_relu", "sh.py::add_relu")
    assert r.status == "mismatch" and "shape" in r.cases[0].detail
    # The reference returns a tuple of two; a candidate returning one must not pass by zip-truncation.
    project.write("two.py", ADD_RELU.replace("    return out\n", "    return out, out.sum()\n"))
    project.write("one.py", kernel_variant(ret="(out,)"))
    r = project.evaluate(runner, "two.py::add_relu", "one.py::add_relu")
    assert r.status == "mismatch" and "1 items, expected 2" in r.cases[0].detail


def test_fresh_inputs_every_trial_catch_a_cached_answer(project, runner):
    # Computes once, then returns the first answer for every later call.
    project.write("cand.py", kernel_variant(
        extra="_memo = []",
        pre="    if _memo:\n        return _memo[0]",
        post="    _memo.append(out)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch"
    assert r.cases[0].trials == 2  # first trial right, the second sees new inputs


def test_a_wrong_trial_ends_its_case_though_the_next_one_already_ran(project, runner):
    # The candidate's third trial runs while the second is judged. Right on its first call, wrong
    # on the second, and the third raises: the verdict is the second trial's wrong result (what
    # the third trial did is dropped with it), and the next case is still judged.
    project.write("cand.py", kernel_variant(
        extra="_n = [0]",
        pre="    _n[0] += 1\n    if _n[0] % 3 == 0:\n        raise RuntimeError('third call')\n"
            "    if _n[0] % 3 == 2:\n        y = x  # the wrong sum",))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=3)
    assert r.status == "mismatch", r.message
    assert r.cases[0].trials == 2 and not r.cases[0].passed
    assert "third call" not in r.message and "RuntimeError" not in r.message
    assert len(r.cases) > 1 and r.cases[1].trials >= 1, [(c.label, c.trials) for c in r.cases]


# ----------------------------------------------------------------------------- anti-cheat


def test_candidate_that_calls_torch_is_rejected(project, runner):
    project.write("cand.py", """
        import torch
        def add_relu(x, y):
            return torch.relu(x + y)
    """)
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and not r.correct
    assert {"no_triton_launch", "torch_compute"} <= flag_codes(r, "reject")
    assert "aten.relu" in r.torch_ops["candidate"]


def test_candidate_that_launches_a_kernel_but_lets_torch_do_the_work(project, runner):
    project.write("cand.py", kernel_variant(post="    out = torch.relu(x + y)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected"
    assert flag_codes(r, "reject") == {"torch_compute"}
    # ...which a user may allow explicitly.
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu",
                         allow_torch_ops=["aten.add", "aten.relu"])
    assert r.status == "ok", r.message


def test_try_except_fallback_to_torch_is_caught_when_taken(project, runner):
    project.write("cand.py", """
        import torch
        def add_relu(x, y):
            try:
                raise RuntimeError("kernel not ready")
            except RuntimeError:
                return torch.relu(x + y)
    """)
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected"
    assert "fallback_path" in flag_codes(r)


def test_candidate_that_calls_the_reference_is_rejected(project, runner):
    project.write("cand.py", """
        from ref import add_relu as _reference
        def add_relu(x, y):
            return _reference(x, y)
    """)
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected"
    assert "calls_reference" in flag_codes(r, "reject")
    # It launched the reference's kernel, so "launched a Triton kernel" alone would have passed it.
    assert r.launches["candidate"] == ["add_relu_kernel"]


def test_candidate_in_the_same_file_calling_the_reference(project, runner):
    project.write("both.py", ADD_RELU + textwrap.dedent("""
        def add_relu_fast(x, y):
            return add_relu(x, y)
    """))
    r = project.evaluate(runner, "both.py::add_relu", "both.py::add_relu_fast")
    assert r.status == "rejected" and "calls_reference" in flag_codes(r, "reject")


def test_module_candidate_inheriting_the_reference(tmp_path, runner):
    from conftest import Project
    p = Project(tmp_path)
    p.write("model.py", """
        import torch
        class Model(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.scale = torch.nn.Parameter(torch.randn(n))
            def forward(self, x):
                return torch.relu(x * self.scale)
        def get_init_inputs():
            return [64]
        def get_inputs():
            return [torch.randn(8, 64)]
    """)
    p.write("new.py", """
        from model import Model
        class ModelNew(Model):
            pass
    """)
    r = p.evaluate(runner, "model.py::Model", "new.py::ModelNew")
    assert r.status == "rejected"
    assert "calls_reference" in flag_codes(r, "reject")
    assert "inherits_reference" in flag_codes(r)


def test_timer_tampering_is_rejected(project, runner):
    project.write("cand.py", kernel_variant(extra="""
        import time
        time.perf_counter = lambda: 0.0
    """))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected"
    assert "tampering" in flag_codes(r, "reject")
    assert any("time.perf_counter" in f.message for f in r.flags)
    # The tampered worker was retired: the next evaluation runs in a clean process.
    r2 = project.evaluate(runner, "ref.py::add_relu")
    assert r2.status == "ok", r2.message


def test_cuda_event_tampering_is_rejected(project, runner):
    project.write("cand.py", kernel_variant(extra="""
        torch.cuda.Event.elapsed_time = lambda self, other: 1e-6
    """))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and "tampering" in flag_codes(r, "reject")


def test_torch_dynamo_is_not_loaded_for_the_code_and_loading_it_is_not_tampering(project, runner):
    # The workers do not import torch._dynamo (1.2 s of each fork server's start): the
    # evaluator's own dispatch modes do not need it.
    project.write("cand.py", kernel_variant(extra="import sys", pre="""
    print("GEAK_DYNAMO_LOADED", "torch._dynamo" in sys.modules)"""))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "ok" and r.correct and "GEAK_DYNAMO_LOADED False" in (r.log or ""), (r.message, r.log)
    # Code that loads it (torch.compile does) rebinds torch.manual_seed to torch's own wrapper
    # of it: not a replacement.
    project.write("cand.py", kernel_variant(extra="import torch._dynamo"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "ok" and r.correct, r.message
    # The same wrapper around another function is one.
    project.write("cand.py", kernel_variant(extra="torch.manual_seed = torch._disable_dynamo(lambda seed: None)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and "tampering" in flag_codes(r, "reject")
    assert any("torch.manual_seed" in f.message for f in r.flags), [f.message for f in r.flags]


def test_hiding_ops_from_the_evaluator_is_rejected(project, runner):
    project.write("cand.py", kernel_variant(pre="    guard = torch._C._DisableTorchDispatch()"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and "hides_torch_ops" in flag_codes(r, "reject")


def test_background_thread_is_rejected(project, runner):
    project.write("cand.py", kernel_variant(extra="import threading, time", post="""
    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()"""))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and "background_thread" in flag_codes(r, "reject")


def test_threads_the_reference_starts_are_not_held_against_the_candidate(project, runner):
    # torch.compile's compile workers are threads the reference leaves running: the candidate,
    # which starts none, is verified.
    project.write("ref2.py", ADD_RELU.replace("import torch\n", "import threading, time\nimport torch\n", 1)
                  .replace("    return out", "    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()\n"
                                             "    return out", 1))
    project.write("cand.py", kernel_variant(block=64))
    r = project.evaluate(runner, "ref2.py::add_relu", "cand.py::add_relu", trials=1)
    assert r.status == "ok" and r.correct, r.message
    assert "background_thread" not in flag_codes(r)


def test_a_thread_handed_over_during_the_reference_call_is_still_the_candidates(project, runner):
    # The candidate's thread waits for the reference's next call, starts another thread then
    # and exits: what appears while a candidate's thread is alive is the candidate's.
    # Only its first call starts the relay, so that no thread of the candidate's is left at the end.
    project.write("cand.py", kernel_variant(extra="""
        import threading, time
        _started = []
        def _relay():
            time.sleep(0.3)
            threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
    """, post="    _started or (_started.append(1), threading.Thread(target=_relay, daemon=True).start())"))
    project.write("ref2.py", ADD_RELU.replace("    return out", "    import time; time.sleep(0.6)\n    return out", 1))
    r = project.evaluate(runner, "ref2.py::add_relu", "cand.py::add_relu", trials=2, cases=[0])
    assert r.status == "rejected" and "background_thread" in flag_codes(r, "reject"), r.message


def test_candidate_that_mutates_its_inputs(project, runner):
    # Writes the result into x as well: the reference leaves x alone.
    project.write("cand.py", kernel_variant(post="    x.copy_(out)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch"
    assert "modifies its input" in r.cases[0].detail


def test_in_place_reference_must_be_matched(tmp_path, runner):
    from conftest import Project
    p = Project(tmp_path)
    inplace = kernel_variant(name="add_relu_", pre="    out = x", ret="x")
    p.write("ref.py", inplace + "\ndef get_inputs():\n    return [torch.randn(500, device='cuda'), torch.randn(500, device='cuda')]\n")
    r = p.evaluate(runner, "ref.py::add_relu_")
    assert r.status == "ok", r.message
    # A candidate that returns the right values but leaves x untouched is wrong.
    p.write("cand.py", kernel_variant(name="add_relu_"))
    r = p.evaluate(runner, "ref.py::add_relu_", "cand.py::add_relu_")
    assert r.status == "mismatch"
    assert "updates this input in place" in r.cases[0].detail


def test_unwritten_output_is_caught(project, runner):
    # Launches a kernel that stores nothing: whatever torch.empty returned is the "answer".
    project.write("cand.py", kernel_variant(store_mask="offs < 0"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch"


# ----------------------------------------------------------------------------- crashes and hangs


def test_segfault_is_reported_and_the_runner_recovers(project, runner):
    project.write("cand.py", kernel_variant(extra="import ctypes", pre="    ctypes.string_at(0)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "crashed"
    assert r.error.kind == "segfault" and "SIGSEGV" in r.message
    assert "candidate" in r.message and r.error.side == "candidate"
    ok = project.evaluate(runner, "ref.py::add_relu", "ref.py::add_relu")
    assert ok.status == "ok", ok.message


def test_hang_times_out_and_the_runner_recovers(project, runner):
    from runner.schema import Limits
    project.write("cand.py", kernel_variant(pre="    while True:\n        pass"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu",
                         limits=Limits(import_s=60, run_s=4, timing_s=60))
    assert r.status == "timeout"
    assert "run phase" in r.message and "candidate" in r.message
    ok = project.evaluate(runner, "ref.py::add_relu")
    assert ok.status == "ok", ok.message


def test_hang_at_import_times_out(project, runner):
    from runner.schema import Limits
    project.write("cand.py", kernel_variant(extra="import time\nwhile True:\n    time.sleep(0.1)"))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu",
                         limits=Limits(import_s=3, run_s=60, timing_s=60))
    assert r.status == "timeout" and "import phase" in r.message


def test_host_memory_blowup_is_killed(project, runner):
    from runner.schema import Limits
    project.write("cand.py", kernel_variant(extra="_hog = []", pre="""
    import time
    for _ in range(400):
        _hog.append(bytearray(16 * 1024 * 1024))
        time.sleep(0.01)"""))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu",
                         limits=Limits(import_s=60, run_s=60, timing_s=60, memory_mb=1500))
    assert r.status == "crashed" and r.error.kind == "host_oom", r.message
    ok = project.evaluate(runner, "ref.py::add_relu")
    assert ok.status == "ok", ok.message


def test_user_prints_do_not_break_the_protocol(project, runner):
    project.write("cand.py", kernel_variant(extra='print("{\\"event\\": \\"result\\"}")',
                                            pre='    print("hello from the candidate")'))
    r = project.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "ok", r.message
    assert "hello from the candidate" in r.log
