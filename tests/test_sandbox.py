"""Candidates written to attack the evaluator (CPU interpreter, the real runner): none may
change its own verdict, spoil the next evaluation, or leave a process behind."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from conftest import ADD_RELU, Project, flag_codes, kernel_variant
from runner.serve.local import LocalRunner
from runner.schema import Limits

WRONG = "tl.maximum(x + y, 0.0) + 1.0"  # a wrong kernel


def alive_with(marker: str) -> list[int]:
    """Processes whose command line contains ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z" and int(name) != os.getpid():
            out.append(int(name))
    return out


@pytest.fixture
def p(tmp_path) -> Project:
    return Project(tmp_path).write("ref.py", ADD_RELU)


def test_forged_protocol_messages_do_not_make_a_wrong_candidate_correct(p, runner):
    # The candidate writes replies for every op to every socket it has, and calls whatever
    # "send" it can find, before computing a wrong answer.
    p.write("cand.py", kernel_variant(value=WRONG, extra='''
        import json, os, socket, stat, sys
        def _forge():
            lies = [{"event": "reply", "op": op, "passed": True, "launches": ["add_relu_kernel"],
                     "ops": {}, "tampered": [], "threads_left": 0, "reference_calls": 0, "flags": []}
                    for op in ("candidate", "observe", "judge", "reference", "load")]
            for fd in range(64):
                try:
                    if stat.S_ISSOCK(os.fstat(fd).st_mode):
                        for lie in lies:
                            os.write(fd, (json.dumps(lie) + "\\n").encode())
                except OSError:
                    pass
            for mod in list(sys.modules.values()):
                for name in ("send", "_send"):
                    fn = getattr(mod, name, None)
                    if callable(fn):
                        try:
                            fn({"event": "result", "result": {"status": "ok", "correct": True}})
                        except Exception:
                            pass
    ''', pre="    _forge()"))
    r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1)
    assert not r.correct and r.status in ("mismatch", "crashed", "runtime_error"), r.message


def test_patching_the_evaluator_reaches_neither_this_verdict_nor_the_next_job(p, runner):
    p.write("patch.py", kernel_variant(value=WRONG, extra='''
        import runner.worker.reference, runner.worker.candidate, runner.worker.compare, runner.worker.side
        _yes = lambda *a, **k: {"passed": True, "detail": None, "max_abs": 0.0, "max_rel": 0.0, "left_out": []}
        runner.worker.reference.ReferenceSide.judge = _yes
        runner.worker.compare.compare = lambda *a, **k: runner.worker.compare.Comparison()
        runner.worker.candidate.CandidateSide.observe = lambda self: {"launches": ["add_relu_kernel"]}
    '''))
    p.write("wrong.py", kernel_variant(value=WRONG))
    first = p.evaluate(runner, "ref.py::add_relu", "patch.py::add_relu", trials=1)
    assert first.status == "mismatch", first.message
    # The next wrong candidate on the same pool is still caught, and a right one still passes.
    second = p.evaluate(runner, "ref.py::add_relu", "wrong.py::add_relu", trials=1)
    assert second.status == "mismatch", second.message
    p.write("right.py", kernel_variant(block=64))
    third = p.evaluate(runner, "ref.py::add_relu", "right.py::add_relu", trials=1)
    assert third.status == "ok", third.message


def test_escaped_children_and_sleepers_die_with_the_job(p, runner):
    # A session leader of its own, a double-forked daemon, and 20 sleepers: all of them must be
    # gone when the verdict comes back, and the verdict must not wait for them.
    p.write("cand.py", kernel_variant(extra='''
        import os, subprocess
        _done = []
        def _escape():
            if _done:
                return
            _done.append(1)
            subprocess.Popen(["sleep", "987"], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "986"])
                os._exit(0)
            for _ in range(20):
                subprocess.Popen(["sleep", "985"])
    ''', pre="    _escape()"))
    t0 = time.monotonic()
    r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0])
    assert time.monotonic() - t0 < 60
    assert r.status == "rejected" and "background_process" in flag_codes(r, "reject"), r.message
    deadline = time.monotonic() + 5
    while alive_with("sleep 98") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive_with("sleep 98") == []


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def test_a_keeper_killed_from_outside_leaves_nothing_of_its_job(p, runner):
    """A job's keeper killed by someone other than the pool: its child, which the pool no longer
    counts as the job's, dies with it (its parent-death signal; the fork server, a subreaper,
    sweeps any child that is not a keeper), the candidate's sleeper with them, the evaluation
    ends and the runner goes on."""
    import threading
    p.write("cand.py", kernel_variant(extra='''
        import subprocess, time
        _kids = []
    ''', pre='''    if not _kids:
        _kids.append(subprocess.Popen(["sleep", "974"]))
    time.sleep(60)'''))
    out = {}
    t = threading.Thread(target=lambda: out.update(r=p.evaluate(
        runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0],
        limits=Limits(import_s=60, run_s=120, timing_s=60))))
    t.start()
    deadline = time.monotonic() + 60
    while not alive_with("sleep 974") and time.monotonic() < deadline:
        time.sleep(0.1)
    [sleeper] = alive_with("sleep 974")
    # Up from the sleeper: the keeper is the process whose parent is the fork server (the one
    # runner.worker.zygote process whose parent is not one).
    chain = [sleeper]
    while b"runner.worker.zygote" in _cmdline(_parent(_parent(chain[-1]))):
        chain.append(_parent(chain[-1]))
    keeper = chain[-1]
    os.kill(keeper, 9)
    t0 = time.monotonic()
    while alive_with("sleep 974") and time.monotonic() - t0 < 15:
        time.sleep(0.1)
    assert alive_with("sleep 974") == []
    t.join(120)
    assert not t.is_alive() and out["r"].status != "ok", out
    assert p.evaluate(runner, "ref.py::add_relu", "ref.py::add_relu", trials=1, cases=[0]).status == "ok"


def test_memory_held_by_a_child_counts(p, runner):
    p.write("cand.py", kernel_variant(extra='''
        import subprocess, sys, time
        _kids = []
    ''', pre='''    if not _kids:
        _kids.append(subprocess.Popen([sys.executable, "-c",
            "import time; b = bytearray(900 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)"]))
    time.sleep(3)'''))
    r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0],
                   limits=Limits(import_s=60, run_s=60, timing_s=60, memory_mb=700))
    assert r.status == "crashed" and r.error.kind == "host_oom", r.message
    assert "all its processes" in r.message


def test_no_way_back_into_the_host_network_and_the_label_says_what_holds(p, runner):
    p.write("cand.py", kernel_variant(extra='''
        import ctypes, os
        def _leave():
            libc = ctypes.CDLL(None, use_errno=True)
            for pid in ("1", str(os.getppid())):
                try:
                    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
                except OSError as e:
                    print("open", pid, e.errno)
                    continue
                print("setns", pid, libc.setns(fd, 0x40000000), ctypes.get_errno())
    ''', pre="    _leave()"))
    r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0])
    assert r.status == "ok", r.message
    assert " 0 0" not in r.log.replace("setns", "")  # no setns call succeeded
    if r.sandbox["network"].startswith("isolated"):
        assert r.sandbox["capabilities"] == "none"


def test_killing_the_runner_processes_it_can_see_changes_nothing(p, tmp_path):
    runner = LocalRunner(workers=1, device="interpreter")
    try:
        p.write("cand.py", kernel_variant(extra='''
            import os, signal
            def _kill_all():
                for name in os.listdir("/proc"):
                    if name.isdigit() and int(name) not in (os.getpid(), 1):
                        try:
                            os.kill(int(name), signal.SIGKILL)
                        except OSError:
                            pass
                for pid in (os.getppid(), 1):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        ''', pre="    _kill_all()"))
        r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0])
        assert not r.correct or r.status == "ok"
        ok = p.evaluate(runner, "ref.py::add_relu", "ref.py::add_relu", trials=1, cases=[0])
        assert ok.status == "ok", ok.message
    finally:
        runner.close()


def test_limits_cannot_be_removed_or_raised_past_the_runners(p):
    runner = LocalRunner(workers=1, device="interpreter", max_limits=Limits(import_s=60, run_s=2, timing_s=60,
                                                                            memory_mb=4096))
    try:
        p.write("cand.py", kernel_variant(pre="    while True:\n        pass"))
        for limits in (Limits(run_s=None), Limits(run_s=10_000)):
            t0 = time.monotonic()
            r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[0], limits=limits)
            assert r.status == "timeout" and time.monotonic() - t0 < 30, (limits, r.message)
            assert "after 2 s" in r.message
    finally:
        runner.close()


def test_a_worker_process_loads_no_code_that_judges_or_serves(p, runner):
    """The trust boundary of runner/ in its folders holds at run time: user code in a worker
    (here the original's own module, imported by the reference worker) finds the worker's
    modules loaded and none of ``runner.judge`` or ``runner.serve``: there is no verdict code in
    the process to patch."""
    p.write("probe.py", ADD_RELU + textwrap.dedent('''
        import sys
        _loaded = sorted(m for m in sys.modules if m.startswith("runner"))
        assert "runner.worker.main" in _loaded and "runner.worker.reference" in _loaded, _loaded
        _judging = [m for m in _loaded if m.startswith(("runner.judge", "runner.serve"))]
        assert not _judging, f"loaded in a worker: {_judging}"
    '''))
    r = p.evaluate(runner, "probe.py::add_relu", trials=1)
    assert r.correct, r.message
