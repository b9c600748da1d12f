"""The client side: RemoteRunner and `geak eval --runner URL` against a real daemon, a stopped
one, and one that comes up late."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, kernel_variant
from runner.serve.remote import RemoteRunner, RunnerUnavailable
from runner.serve.runners import open_runner
from test_daemon import TOKEN, Daemon, free_port, quick


def geak(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_client_against_a_stopped_daemon(project):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    t0 = time.monotonic()
    r = RemoteRunner(url, TOKEN, connect_s=1.0)  # never connected: gives up after connect_s
    res = r.evaluate_many([quick(project), quick(project)])
    assert time.monotonic() - t0 < 10
    assert [x.status for x in res] == ["crashed", "crashed"]
    assert all(x.error.kind == "runner_unavailable" and "cannot reach the runner at " + url in x.message
               for x in res)
    assert "geak-runner serve" in res[0].error.hint
    with pytest.raises(RunnerUnavailable, match="cannot reach"):
        r.device_info()
    p = geak("eval", "ref.py::add_relu", "--runner", url, cwd=project.root, env={"GEAK_RUNNER_TOKEN": TOKEN})
    assert p.returncode == 3 and "cannot run: cannot reach the runner" in p.stderr and "Traceback" not in p.stderr
    assert "CRASHED" not in p.stderr + p.stdout and "what to do" in p.stderr


def test_bad_runner_specs_are_usage_errors(project):
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        open_runner("gpu-box:8765")
    p = geak("eval", "ref.py::add_relu", "--runner", "ftp://x", cwd=project.root)
    assert p.returncode == 2 and "use 'local', http://HOST:PORT" in p.stderr and "Traceback" not in p.stderr


def test_cli_eval_through_the_daemon_and_version_check(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN).start()
    try:
        project.write("cand.py", kernel_variant(block=64))
        p = geak("eval", "ref.py::add_relu", "--candidate", "cand.py::add_relu", "--cases", "0", "--trials", "1",
                 "--json", cwd=project.root, env={"GEAK_RUNNER_URL": d.url, "GEAK_RUNNER_TOKEN": TOKEN})
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["status"] == "ok" and doc["correct"] and doc["device"]["backend"] == "interpreter"
        project.write("wrong.py", kernel_variant(store_mask="mask & (offs < 100)"))
        p = geak("eval", "ref.py::add_relu", "--candidate", "wrong.py::add_relu", "--cases", "0", "--trials", "1",
                 "--runner", d.url, cwd=project.root, env={"GEAK_RUNNER_TOKEN": TOKEN})
        assert p.returncode == 1 and "MISMATCH" in p.stdout
        p = geak("eval", "ref.py::add_relu", "--runner", d.url, cwd=project.root, env={"GEAK_RUNNER_TOKEN": "x" * 20})
        assert p.returncode == 3 and "refused" in p.stderr and "GEAK_RUNNER_TOKEN" in p.stderr
        assert "CRASHED" not in p.stderr + p.stdout
        # The same configuration error under `geak optimize`: one message, not the eval's header.
        p = geak("optimize", "ref.py::add_relu", "--runner", d.url, cwd=project.root,
                 env={"GEAK_RUNNER_TOKEN": "x" * 20})
        assert p.returncode == 3 and "geak: cannot run: the runner at " in p.stderr and "refused" in p.stderr
        assert "geak eval" not in p.stderr + p.stdout and "(against itself)" not in p.stderr + p.stdout
        p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "info", "--runner", d.url], capture_output=True,
                           text=True, timeout=60, cwd=ROOT, env={**os.environ, "GEAK_RUNNER_TOKEN": TOKEN})
        assert p.returncode == 0 and p.stdout.startswith("CPU (Triton interpreter); torch"), p.stdout + p.stderr
        p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "info", "--runner", d.url], capture_output=True,
                           text=True, timeout=60, cwd=ROOT, env={**os.environ, "GEAK_RUNNER_TOKEN": ""})
        assert p.returncode == 2 and "needs a token" in p.stderr and "what to do" in p.stderr
        # A client of another schema major is told so instead of getting wrong answers.
        r = RemoteRunner(d.url, TOKEN)
        req = quick(project)
        req.schema = "geak.eval/2"
        res = r.evaluate(req)
        assert res.error.kind == "runner_unavailable" and "version mismatch" in res.message
    finally:
        d.stop()


def test_client_retries_until_the_daemon_comes_up(tmp_path, project):
    port = free_port()
    out = {}
    t = threading.Thread(target=lambda: out.update(res=RemoteRunner(
        f"http://127.0.0.1:{port}", TOKEN, connect_s=60).evaluate(quick(project))))
    t.start()
    time.sleep(1.5)  # the client is retrying the connection meanwhile
    d = Daemon(tmp_path / "state", TOKEN, port=port).start()
    try:
        t.join(120)
        assert out["res"].status == "ok" and out["res"].correct
    finally:
        d.stop()


def test_close_from_another_thread_cancels_the_waiting_call(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN, "--workers", "1").start()
    try:
        project.write("slow.py", kernel_variant(extra="import time", pre="    time.sleep(2)"))
        r = RemoteRunner(d.url, TOKEN, poll_s=0.5)
        out = {}
        t = threading.Thread(target=lambda: out.update(res=r.evaluate_many(
            [quick(project, candidate="slow.py::add_relu") for _ in range(3)])))
        t.start()
        with d.http() as h:
            t0 = time.monotonic()
            while h.get("/v1/queue").json()["running"] < 1:
                assert time.monotonic() - t0 < 60
                time.sleep(0.05)
            r.close()  # as an editor's cancel button would
            t.join(10)
            assert not t.is_alive()
            assert all(x.error.kind == "runner_unavailable" and "cancelled" in x.message for x in out["res"])
            jobs = h.get("/v1/queue").json()["jobs"]
            assert jobs["cancelled"] == 2 and jobs["queued"] == 0  # the one running finishes, the rest never start
    finally:
        d.stop()


def test_a_daemon_whose_workers_cannot_start_says_why(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN, "--device", "cuda", "--workers", "1").start()  # no GPU here
    try:
        r = RemoteRunner(d.url, TOKEN)
        t0 = time.monotonic()
        with pytest.raises(RunnerUnavailable, match="workers could not start") as e:
            r.device_info()
        assert time.monotonic() - t0 < 60 and "torch sees no GPU" in str(e.value)  # not "busy", no waiting
        res = r.evaluate(quick(project))
        assert res.status == "crashed" and res.error.kind == "runner_unavailable"
        assert "torch sees no GPU" in res.message
    finally:
        d.stop()


def test_geak_optimize_through_the_daemon_screens_then_verifies(tmp_path):
    # The tuner's compile screen (aot_configs) and its candidates travel the same wire format.
    from conftest import Project
    (tmp_path / "proj").mkdir()
    p = Project(tmp_path / "proj").write("sm.py", (ROOT / "examples" / "softmax.py").read_text())
    d = Daemon(tmp_path / "state", TOKEN).start()
    try:
        out = geak("optimize", "sm.py::softmax", "--runner", d.url, "--json", "--max-configs", "8", cwd=p.root,
                   env={"GEAK_RUNNER_TOKEN": TOKEN})
        assert out.returncode == 1, out.stderr  # verified, not timed: nothing offered on a CPU
        rep = json.loads(out.stdout)
        assert rep["screened"] and all(t["status"] == "pruned" and "spills" in t["pruned"] for t in rep["screened"])
        assert rep["trials"] and any(t["correct"] for t in rep["trials"])
        # What is rejected is a halved row block: softmax's block must cover its row.
        assert all("// 2" in str(t["config"].get("BLOCK_SIZE")) for t in rep["trials"] if not t["correct"])
        assert "pruned before running" in out.stderr and "timing needs a GPU" in out.stderr  # --json: report on stderr
    finally:
        d.stop()
