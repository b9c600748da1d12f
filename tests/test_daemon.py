"""`geak-runner serve` as a real subprocess on loopback, driven over HTTP and by RemoteRunner."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import httpx
import pytest

from conftest import ROOT, _RELAYS, kernel_variant, relay
from runner.serve.remote import RemoteRunner
from runner.schema import to_dict

TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One `geak-runner serve` process; ``start`` again after ``kill9``/``stop`` restarts it on the
    same port and state. ``token=None``: no token file is given, so the daemon makes its own
    (``STATE/token``), which ``start`` reads."""

    def __init__(self, state: Path, token: Optional[str] = TOKEN, *args: str, port: Optional[int] = None):
        self.state, self.token, self.args = state, token, list(args)
        self.own_token = token is None
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> "Daemon":
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("GEAK_RUNNER_TOKEN", None)
        if not self.own_token:
            tf = self.state.parent / f"{self.state.name}.token"
            tf.write_text(self.token + "\n")
            tf.chmod(0o600)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.serve.cli", "serve", "--port", str(self.port), "--state", str(self.state),
             "--device", "interpreter", *([] if self.own_token else ["--token-file", str(tf)]), *self.args],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=str(ROOT))
        ready = threading.Event()

        def read(proc=self.proc):
            for line in proc.stderr:
                self.log.append(line.rstrip())
                if "listening on" in line:
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if wait:
            t0 = time.monotonic()
            while not ready.wait(0.1):
                assert self.proc.poll() is None, "daemon exited:\n" + "\n".join(self.log)
                assert time.monotonic() - t0 < 30, "daemon did not start:\n" + "\n".join(self.log)
            if self.own_token:
                self.token = (self.state / "token").read_text().strip()
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 60) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode if self.proc else 0

    def http(self, token: Optional[str] = "default") -> httpx.Client:
        token = self.token if token == "default" else token
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {token}"} if token else {})

    def client(self, **kw) -> RemoteRunner:
        return RemoteRunner(self.url, self.token, **kw)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("daemon") / "state", TOKEN, "--max-body-mb", "1").start()
    yield d
    d.stop()


def quick(project, target="ref.py::add_relu", candidate=None, **kw):
    return project.request(target, candidate, **{"trials": 1, "cases": [0], **kw})


def body(req, jid=None) -> dict:
    d = to_dict(req)
    if jid:
        d["id"] = jid
    return d


def wait_state(http: httpx.Client, jid: str, state: str, timeout: float = 60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        doc = http.get(f"/v1/jobs/{jid}").json()
        if doc.get("state") == state:
            return doc
        time.sleep(0.1)
    raise AssertionError(f"job {jid} never reached {state}: {doc}")


# ----------------------------------------------------------------------------- auth and input


def test_token_required_and_checked(daemon, project):
    with daemon.http(token=None) as h:
        assert h.get("/v1/health").json()["auth"] is True  # health says a token is needed, and no more
        r = h.post("/v1/jobs", json=body(quick(project)))
        assert r.status_code == 401 and "needs a token" in r.json()["error"]["message"]
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert h.get("/v1/device").status_code == 401
    with daemon.http(token="not-the-token-at-all") as h:
        r = h.get("/v1/queue")
        assert r.status_code == 401 and "not accepted" in r.json()["error"]["message"]
    with daemon.http(token=None) as h:
        r = h.get("/v1/queue", headers={"Authorization": f"Basic {TOKEN}"})  # right secret, wrong scheme
        assert r.status_code == 401
    res = RemoteRunner(daemon.url, "not-the-token-at-all").evaluate(quick(project))
    assert res.status == "crashed" and res.error.kind == "runner_unavailable"
    assert "refused" in res.message and "GEAK_RUNNER_TOKEN" in res.error.hint
    res = RemoteRunner(daemon.url, "").evaluate(quick(project))
    assert res.error.kind == "runner_unavailable" and "needs a token" in res.message


def test_a_short_token_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GEAK_RUNNER_TOKEN"}
    (tmp_path / "short").write_text("abc\n")
    p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "serve", "--token-file", str(tmp_path / "short"),
                        "--state", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert p.returncode == 2 and "too short" in p.stderr


def test_malformed_and_oversized_bodies(daemon, project):
    with daemon.http() as h:
        r = h.post("/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
        r = h.post("/v1/jobs", content=b"", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
        good = body(quick(project))
        r = h.post("/v1/jobs", json={**good, "schema": "geak.eval/2"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "schema_mismatch"
        assert "geak.eval/1" in r.json()["error"]["message"]
        r = h.post("/v1/jobs", json={k: v for k, v in good.items() if k != "target"})
        assert r.status_code == 422 and "missing required field 'target'" in r.json()["error"]["message"]
        r = h.post("/v1/jobs", json={**good, "options": {**good["options"], "trials": "three"}})
        assert r.status_code == 422 and "options.trials" in r.json()["error"]["message"]
        r = h.post("/v1/jobs", json={"requests": [good, {**good, "id": "../../etc"}]})
        assert r.status_code == 400 and "requests[1].id" in r.json()["error"]["message"]
        r = h.post("/v1/jobs", json={"requests": []})
        assert r.status_code == 400
        big = {**good, "files": {**good["files"], "pad.py": "#" * (2 << 20)}}  # daemon: --max-body-mb 1
        r = h.post("/v1/jobs", json=big)
        assert r.status_code == 413 and "1 MiB" in r.json()["error"]["message"]
        r = h.get("/v1/jobs/nope/result")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = h.get("/v1/nowhere")
        assert r.status_code == 404 and "error" in r.json()
        r = h.post("/v1/jobs", content=b"[" * 100000 + b"]" * 100000, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"]
        r = h.post("/v1/results", json={"ids": "x"})
        assert r.status_code == 400
        assert h.get("/v1/queue").json()["jobs"]["queued"] == 0  # nothing bad was queued


def test_idempotent_submission_by_client_id(daemon, project):
    req = body(quick(project), "same-id-1")
    with daemon.http() as h:
        first = h.post("/v1/jobs", json=req)
        again = h.post("/v1/jobs", json=req)
        assert first.status_code == 202 and first.json()["jobs"][0]["created"] is True
        assert again.status_code == 200 and again.json()["jobs"][0]["created"] is False
        other = body(quick(project, cases=[1]), "same-id-1")
        r = h.post("/v1/jobs", json=other)
        assert r.status_code == 409 and "different request" in r.json()["error"]["message"]
        res = h.get("/v1/jobs/same-id-1/result", params={"wait": 60})
        assert res.status_code == 200 and res.json()["status"] == "ok" and res.json()["id"] == "same-id-1"
        assert h.get("/v1/jobs/same-id-1").json()["attempts"] == 1  # ran once
        assert h.post("/v1/jobs", json=req).json()["jobs"][0]["state"] == "done"  # still no second run


# ----------------------------------------------------------------------------- concurrency, crashes


SEGV = "    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)"


def test_concurrent_clients_and_a_worker_crash_mid_batch(daemon, project):
    project.write("good.py", kernel_variant(block=64))
    project.write("segv.py", kernel_variant(pre=SEGV))
    out: dict[int, list] = {}

    def client(k: int):
        with daemon.client() as r:
            batch = [quick(project, candidate="good.py::add_relu")]
            if k == 0:
                batch += [quick(project, candidate="segv.py::add_relu"), quick(project, candidate="good.py::add_relu")]
            out[k] = r.evaluate_many(batch)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert sorted(out) == [0, 1, 2]
    assert [r.status for r in out[0]] == ["ok", "crashed", "ok"]
    crash = out[0][1]
    assert crash.error.kind == "segfault" and "SIGSEGV" in crash.message and crash.error.side == "candidate"
    assert all(r[0].status == "ok" and r[0].correct for r in out.values())
    with daemon.client() as r:
        assert r.device_info().backend == "interpreter"


# ----------------------------------------------------------------------------- persistence


def marked(mark: Path, sleep: float = 0.0, block: int = 128) -> str:
    """A correct candidate that appends a line to ``mark`` at import (through ``relay``), keeps
    the relay's FIFO open while it lives (so a test can find its process from outside its PID
    namespace: ``named``) and sleeps in the call."""
    fifo = relay(mark)
    return kernel_variant(block=block, extra=f"import os, time\n_MARK = open({str(fifo)!r}, 'a', buffering=1)\n"
                                             "_MARK.write('run\\n')",
                          pre=f"    time.sleep({sleep})")


def named(mark: Path) -> list[int]:
    """Live processes that hold ``mark``'s relay FIFO open for writing (``marked``)."""
    fifo = str(_RELAYS[mark])
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                links = [os.readlink(f"/proc/{p}/fd/{fd}") for fd in os.listdir(f"/proc/{p}/fd")]
            except OSError:
                continue
            if fifo in links and alive(int(p)):
                out.append(int(p))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is dead
    except FileNotFoundError:
        return False


def runs(mark: Path) -> int:
    return len(mark.read_text().split()) if mark.exists() else 0


def test_kill9_with_queued_jobs_then_restart_every_job_completes_once(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN, "--workers", "1", "--max-queue", "3").start()
    try:
        marks = {k: tmp_path / f"{k}.runs" for k in "ZABC"}
        for k, m in marks.items():
            project.write(f"{k}.py", marked(m, sleep={"Z": 0, "A": 3}.get(k, 0.5)))
        reqs = {k: body(quick(project, candidate=f"{k}.py::add_relu"), f"job-{k}") for k in "ZABC"}
        with d.http() as h:
            assert h.post("/v1/jobs", json=reqs["Z"]).status_code == 202
            assert h.get("/v1/jobs/job-Z/result", params={"wait": 60}).json()["status"] == "ok"
            # A runs (sleeping), B and C wait behind it; the queue limit (3) turns a batch of 3 away.
            assert h.post("/v1/jobs", json={"requests": [reqs["A"], reqs["B"], reqs["C"]]}).status_code == 202
            busy = h.post("/v1/jobs", json={"requests": [body(quick(project), f"extra-{i}") for i in range(3)]})
            assert busy.status_code == 429 and int(busy.headers["Retry-After"]) >= 1
            assert busy.json()["error"]["code"] == "busy"
            too_big = h.post("/v1/jobs", json={"requests": [body(quick(project), f"big-{i}") for i in range(4)]})
            assert too_big.status_code == 413 and "--max-queue" in too_big.json()["error"]["message"]
            assert h.post("/v1/jobs/job-C/cancel").json()["state"] == "cancelled"
            wait_state(h, "job-A", "running")
            waiter: dict = {}
            client = threading.Thread(target=lambda: waiter.update(
                res=d.client(reconnect_s=60).evaluate_many([quick(project, candidate="B.py::add_relu")])))
            client.start()  # a client that submits and waits for its result when the daemon dies
            t0 = time.monotonic()
            while runs(marks["A"]) == 0 or h.get("/v1/queue").json()["jobs"]["queued"] < 2:
                assert time.monotonic() - t0 < 30  # A imported (mid-evaluation); B and the client's queued
                time.sleep(0.05)
        a_worker = named(marks["A"])
        assert a_worker
        d.kill9()
        time.sleep(1.0)
        assert not any(alive(p) for p in a_worker)  # A's worker died with the daemon, mid-evaluation
        d.start()
        started = [ln for ln in d.log if "listening on" in ln][-1]
        # A went back to the queue: 3 queued (A, B, the client's), 1 done (Z)
        assert "3 queued (1 interrupted by a stop, run again), 1 results stored" in started, started
        with d.http() as h:
            for k in "AB":
                res = h.get(f"/v1/jobs/job-{k}/result", params={"wait": 60})
                assert res.status_code == 200 and res.json()["status"] == "ok", res.text
            assert h.get("/v1/jobs/job-A").json()["attempts"] == 2  # interrupted, then run again
            assert h.get("/v1/jobs/job-B").json()["attempts"] == 1
            assert h.get("/v1/jobs/job-Z/result").json()["status"] == "ok"  # finished before the kill: kept
            assert h.get("/v1/jobs/job-C/result").status_code == 410
            client.join(120)
            assert waiter["res"][0].status == "ok"
            q = h.get("/v1/queue").json()["jobs"]
        assert runs(marks["Z"]) == 1 and runs(marks["B"]) == 2 and runs(marks["C"]) == 0  # B: job + client
        assert runs(marks["A"]) == 2
        assert q == {"queued": 0, "running": 0, "done": 4, "cancelled": 1}  # Z A B + the client's; C
        # A client whose batch is larger than the daemon's queue (3) splits it and waits out "busy".
        assert [r.status for r in d.client().evaluate_many([quick(project) for _ in range(5)])] == ["ok"] * 5
    finally:
        d.stop()


def test_sigterm_drains_running_jobs(tmp_path, project):
    d = Daemon(tmp_path / "state", None, "--workers", "1").start()  # the daemon's own token
    mark = tmp_path / "d.runs"
    project.write("slow.py", marked(mark, sleep=2))
    with d.http() as h:
        h.post("/v1/jobs", json=body(quick(project, candidate="slow.py::add_relu"), "drain-1"))
        wait_state(h, "drain-1", "running")
        while runs(mark) == 0:
            time.sleep(0.05)
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        r = h.post("/v1/jobs", json=body(quick(project), "late-1"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "draining" and "Retry-After" in r.headers
        res = h.get("/v1/jobs/drain-1/result", params={"wait": 60})  # still served while draining
        assert res.status_code == 200 and res.json()["status"] == "ok"
    assert d.proc.wait(60) == 0
    d.start()
    p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "serve", "--port", "0", "--state", str(d.state)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and f"(pid {d.proc.pid}) is using the state directory" in p.stderr
    with d.http() as h:
        assert h.get("/v1/jobs/drain-1").json()["state"] == "done"
        assert h.get("/v1/jobs/late-1").status_code == 404
        # A second signal stops at once; the interrupted job runs again at the next start.
        project.write("slow2.py", marked(tmp_path / "d2.runs", sleep=3))
        h.post("/v1/jobs", json=body(quick(project, candidate="slow2.py::add_relu"), "drain-2"))
        wait_state(h, "drain-2", "running")
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(5) == 1
    d.start()
    with d.http() as h:
        assert h.get("/v1/jobs/drain-2/result", params={"wait": 60}).json()["status"] == "ok"
        assert h.get("/v1/jobs/drain-2").json()["attempts"] == 2
    assert d.stop() == 0


# ----------------------------------------------------------------------------- lanes, TLS


def test_one_lane_per_gpu_each_pinned_with_cuda_visible_devices(tmp_path, project):
    # --gpus 0,1 on a machine without GPUs: two lanes whose workers fall back to the interpreter,
    # but each sees its own CUDA_VISIBLE_DEVICES, and the queue is shared by both.
    d = Daemon(tmp_path / "state", None, "--device", "auto", "--gpus", "0,1", "--workers", "1").start()
    try:
        assert "2 lane(s) (GPU 0, GPU 1) x 1 workers" in d.log[0]
        mark = tmp_path / "env.txt"
        project.write("envcand.py", kernel_variant(
            extra=f"import os, time\nopen({str(relay(mark))!r}, 'a').write(os.environ.get('CUDA_VISIBLE_DEVICES', '-') + '\\n')",
            pre="    time.sleep(1.5)"))
        reqs = [body(quick(project, candidate="envcand.py::add_relu", device="auto"), f"lane-{i}") for i in range(2)]
        with d.http() as h:
            assert h.post("/v1/jobs", json={"requests": reqs}).status_code == 202
            for i in range(2):
                assert h.get(f"/v1/jobs/lane-{i}/result", params={"wait": 60}).json()["status"] == "ok"
            lanes = {h.get(f"/v1/jobs/lane-{i}").json()["lane"] for i in range(2)}
            devices = h.get("/v1/device").json()
        assert lanes == {0, 1}  # both lanes took one job each, at the same time
        assert sorted(mark.read_text().split()) == ["0", "1"]
        assert devices["lanes"] == 2 and len(devices["devices"]) == 2
    finally:
        d.stop()


def test_tls(tmp_path, project):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {p.stderr[-200:]}")
    d = Daemon(tmp_path / "state", TOKEN, "--tls-cert", str(cert), "--tls-key", str(key)).start()
    try:
        assert "https://127.0.0.1:" in d.log[0]
        url = f"https://127.0.0.1:{d.port}"
        res = RemoteRunner(url, TOKEN, verify=str(cert)).evaluate(quick(project))
        assert res.status == "ok", res.message
        res = RemoteRunner(url, TOKEN).evaluate(quick(project))  # an unknown CA is refused, clearly
        assert res.error.kind == "runner_unavailable" and "CERTIFICATE_VERIFY_FAILED" in res.message
    finally:
        d.stop()
    p = subprocess.run([sys.executable, "-m", "runner.serve.cli", "serve", "--tls-cert", str(cert), "--state",
                        str(tmp_path / "s2")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--tls-cert and --tls-key go together" in p.stderr


def test_finished_jobs_are_forgotten_after_the_retention_time(tmp_path):
    from runner.serve.daemon.store import Store
    store = Store(tmp_path / "state")
    store.submit([("old-1", "{}")])
    store.submit([("sp-1", "{}")], origin="spool")
    store.submit([("new-1", "{}")])
    for jid in ("old-1", "sp-1"):
        assert store.claim(0)[0] == jid
        assert store.finish(jid, "{}")
    time.sleep(0.05)
    assert store.purge(0.01) == 1  # old-1; sp-1's result file is not written yet; new-1 is queued
    assert store.get("old-1") is None and store.get("sp-1").state == "done"
    store.mark_delivered("sp-1")
    assert store.purge(0.01) == 1 and store.get("sp-1") is None
    assert store.purge(3600) == 0 and store.counts()["queued"] == 1
    store.close()
