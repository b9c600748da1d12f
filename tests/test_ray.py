"""The Ray runner (runner/serve/ray.py) against a real Ray cluster on loopback, started once for this
module (`ray start --head` with three `geak_interpreter` slots, on the CPU, token authentication
on as Ray's default). Requests spread over two actors, an actor killed mid-evaluation is
survived, results equal the local runner's, the CLI evaluates through the Ray client, and
close() cancels what has not started; bad specs and an unreachable cluster are one-line errors."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray runner's tests need Ray: pip install -r requirements/ray.txt")

from conftest import ROOT, kernel_variant  # noqa: E402
from runner.serve.ray import RayRunner  # noqa: E402
from runner.serve.remote import RunnerUnavailable  # noqa: E402
from runner.schema import EvalResult, from_dict, to_dict  # noqa: E402

SLOW = kernel_variant(extra="import time", pre="    time.sleep(1.5)")  # 3 s or more an evaluation: killed mid-way


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are drawn (ports drawn one at
    a time, each released before the next, can repeat, and Ray refuses a port named twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


_TOKEN = secrets.token_hex(16)


class Cluster:
    """`ray start --head --block` on 127.0.0.1 in a session of its own; SIGTERM stops it all."""

    def __init__(self, slots: int):
        # One test cluster on this machine at a time (with --dist loadfile this module and the
        # attack corpus's Ray runner share one process, tests/conftest.py; other modes may run
        # them side by side): two heads side by side on two cores fail to join each other's
        # drivers. The lock is held until stop().
        self.lock = open(os.path.join(tempfile.gettempdir(), "geak-test-ray.lock"), "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.dir = Path(tempfile.mkdtemp(prefix="geak-ray-", dir="/tmp"))  # Ray's socket paths must be short
        # One token for every test cluster of this process: Ray keeps the first token it read
        # for the life of the process, so a second cluster with another would refuse it.
        self.env = {**os.environ, "RAY_AUTH_TOKEN": _TOKEN, "RAY_DISABLE_USAGE_STATS": "1"}
        flags = ("--port", "--ray-client-server-port", "--node-manager-port", "--object-manager-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                 "--metrics-export-port")
        ports = dict(zip(flags, free_ports(len(flags))))
        self.gcs, self.client = ports["--port"], ports["--ray-client-server-port"]
        cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               "--num-cpus=2", f"--resources={json.dumps({'geak_interpreter': slots})}", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={self.dir}", "--object-store-memory=100000000",
               *(f"{k}={v}" for k, v in ports.items())]
        self.log = open(self.dir / "start.log", "w")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("ray start failed:\n" + (self.dir / "start.log").read_text()[-3000:])
            try:
                socket.create_connection(("127.0.0.1", self.client), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("ray start: no client port after 90 s")
                time.sleep(0.3)

    @property
    def url(self) -> str:
        return f"ray://127.0.0.1:{self.client}"

    def stop(self):
        self.proc.terminate()  # `ray start --block` stops the node's processes
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever is left of its session
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.lock.close()  # the next cluster may start


@pytest.fixture(scope="module")
def cluster():
    import ray
    ray.shutdown()  # a driver left connected by an earlier module of this process to its own cluster
    c = Cluster(slots=3)  # 2 for the shared runner, 1 for the CLI's test
    mp = pytest.MonkeyPatch()
    for k in ("RAY_AUTH_TOKEN", "RAY_DISABLE_USAGE_STATS"):
        mp.setenv(k, c.env[k])
    mp.setenv("RAY_ADDRESS", f"127.0.0.1:{c.gcs}")  # what ray:auto joins (else Ray's own discovery)
    mp.delenv("RAY_AUTH_MODE", raising=False)
    yield c
    mp.undo()
    os.environ.pop("RAY_AUTH_MODE", None)  # set by the runner for the cluster's token
    c.stop()


@pytest.fixture(scope="module")
def pair(cluster):
    """The shared runner: ray:auto (this process joins as a driver), two actors of one worker each.
    The cluster's nodes have this checkout (its .venv): no need to ship the runner package (the
    CLI's test below does, as `--runner ray://...` always does)."""
    r = RayRunner.from_spec("ray:auto", device="interpreter", workers=1, actors=2, ship_code=False)
    r.settle(120)
    assert [a["state"] for a in r.actors()] == ["ready", "ready"], r.actors()
    yield r
    r.close()


def comparable(result) -> dict:
    """What must not depend on where the evaluation ran."""
    d = to_dict(result)
    for k in ("id", "duration_s", "phases", "log"):
        d.pop(k)
    d["flags"] = [f for f in d["flags"] if f["code"] != "evaluated_again"]
    return d


def quick(project, candidate=None, target="ref.py::add_relu"):
    return project.request(target, candidate, trials=1, cases=[0])


def geak(*args, cwd, timeout=300):
    """The CLI as a user runs it: the cluster's token in RAY_AUTH_TOKEN, nothing else of Ray's."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**env, "PYTHONPATH": str(ROOT)})


def test_bad_ray_runners_are_one_line_errors(project, monkeypatch):
    from agent.commands import exit_code
    from geak_lsp import settings as S
    from runner.config import ConfigError
    from runner.serve.runners import open_runner
    url = f"ray://127.0.0.1:{free_port()}"  # nothing listens here
    r = RayRunner.from_spec(url, connect_s=0.5)
    t0 = time.monotonic()
    res = r.evaluate_many([quick(project), quick(project)])
    assert time.monotonic() - t0 < 5
    assert [x.error.kind for x in res] == ["runner_unavailable"] * 2 and exit_code(res[0]) == 3
    assert res[0].message.startswith(f"cannot reach the Ray cluster at {url}: ") and "\n" not in res[0].message
    assert "ray start --head" in res[0].error.hint
    with pytest.raises(RunnerUnavailable, match="cannot reach"):
        r.device_info()
    r.close()
    for spec in ("ray:", "ray:gpu-box", "ray://gpu-box", "ray://gpu-box:x"):
        with pytest.raises(ConfigError, match=f"runner '{spec}': use .*ray://HOST:PORT.* or ray:auto"):
            open_runner(spec, "auto", 1)
    monkeypatch.setitem(sys.modules, "ray", None)  # as where Ray is not installed
    with pytest.raises(ConfigError, match=r"needs Ray.*pip install 'geak\[ray\]'"):
        open_runner("ray://gpu-box:10001", "auto", 1)
    for url in ("ray://gpu-box:10001", "ray:auto"):
        s, problems = S.parse({"runner.url": url})
        assert s.runner_url == url and problems == []
    s, problems = S.parse({"runner.url": "ray:gpu-box"})
    assert s.runner_url is None and "ray://HOST:PORT or ray:auto" in problems[0]


def test_requests_spread_over_both_actors_and_equal_the_local_runner(pair, runner, project):
    project.write("good.py", kernel_variant(block=64))
    project.write("wrong.py", kernel_variant(store_mask="mask & (offs < 100)"))
    requests = [quick(project), quick(project, "good.py::add_relu"), quick(project, "wrong.py::add_relu"),
                quick(project, "good.py::add_relu")]
    before = [a["served"] for a in pair.actors()]
    copies = [dataclasses.replace(r) for r in requests]
    got = pair.evaluate_many(copies)
    want = runner.evaluate_many(requests)
    assert [r.status for r in got] == ["ok", "ok", "mismatch", "ok"]
    assert [r.id for r in got] == [r.id for r in copies]
    for g, w in zip(got, want):
        assert comparable(g) == comparable(w)
    served = [a["served"] - b for a, b in zip(pair.actors(), before)]
    assert sum(served) == 4 and min(served) >= 1, served  # both actors took work
    assert pair.device_info().backend == "interpreter" and pair.slots == 2
    other = RayRunner.from_spec("ray://127.0.0.1:1").evaluate(quick(project))  # one process, one cluster
    assert other.error.kind == "runner_unavailable" and "already uses the Ray cluster ray:auto" in other.message


def test_cli_eval_through_the_ray_client(cluster, pair, runner, project):
    """`geak eval --runner ray://...` from another process while the shared runner holds two of the
    three slots: its actors that find no slot wait, the one that does evaluates."""
    project.write("good.py", kernel_variant(block=64))
    p = geak("eval", "ref.py::add_relu", "--candidate", "good.py::add_relu", "--cases", "0", "--trials", "1",
             "--runner", cluster.url, "--json", cwd=project.root)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    want = runner.evaluate(quick(project, "good.py::add_relu"))
    got = json.loads(p.stdout)
    assert got["status"] == "ok" and got["correct"]
    assert comparable(from_dict(EvalResult, got)) == comparable(want)


def test_an_actor_killed_mid_evaluation_is_survived(pair, runner, project):
    project.write("slow.py", SLOW)
    requests = [quick(project, "slow.py::add_relu") for _ in range(2)]
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("res", pair.evaluate_many(requests)))
    t.start()
    deadline = time.monotonic() + 60
    while sum(a["running"] for a in pair.actors()) < 2:  # both evaluations under way
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # each evaluation takes 3 s or more: at least two calls of 1.5 s
    victim = pair.actors()[0]
    os.kill(victim["pid"], signal.SIGKILL)  # the actor's process, as an OOM kill or a crash would
    t.join(120)
    res = out["res"]
    want = runner.evaluate(quick(project, "slow.py::add_relu"))
    assert [r.status for r in res] == ["ok", "ok"] and all(r.correct for r in res), [r.message for r in res]
    again = [r for r in res if any(f.code == "evaluated_again" for f in r.flags)]
    assert len(again) == 1 and "actor 0" in again[0].flags[-1].message  # one result each, one retried
    assert all(comparable(r) == comparable(want) for r in res)
    assert pair.retried == 1 and pair.actors()[0]["lost"] == 1


def wait_until_running(pair, settle: float) -> None:
    """Until an actor runs an evaluation (at most 60 s), then ``settle`` seconds more."""
    deadline = time.monotonic() + 60
    while not any(a["running"] for a in pair.actors()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(settle)


def test_a_request_lost_max_attempts_times_is_given_up(pair, project):
    project.write("slow.py", SLOW)
    pair.max_attempts = 1
    try:
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault("res", pair.evaluate(quick(project, "slow.py::add_relu"))))
        t.start()
        wait_until_running(pair, settle=0.5)
        os.kill(next(a["pid"] for a in pair.actors() if a["running"]), signal.SIGKILL)
        t.join(60)
    finally:
        pair.max_attempts = 3
    res = out["res"]
    assert res.status == "crashed" and res.error.kind == "worker_died" and not res.correct
    assert "lost 1 times" in res.message and "not started again" in res.message


def test_close_cancels_what_has_not_started(pair, project):
    """Closes the shared runner: the last of the tests that use it."""
    project.write("slow.py", SLOW)
    # Four requests, at most two workers: two wait in this client. close() answers all four at once.
    before = pair.submitted
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(res=pair.evaluate_many(
        [quick(project, "slow.py::add_relu") for _ in range(4)])))
    t.start()
    wait_until_running(pair, settle=0.3)
    t0 = time.monotonic()
    pair.close()
    t.join(30)
    assert time.monotonic() - t0 < 15
    assert [x.error.kind for x in out["res"]] == ["runner_unavailable"] * 4
    assert all("cancelled" in x.message for x in out["res"])
    assert 1 <= pair.submitted - before <= 2  # what had not started never went to the cluster
    assert pair.evaluate(quick(project)).error.kind == "runner_unavailable"  # closed stays closed
    assert not ray.is_initialized()  # the runner's connection ended with it
