"""`geak-runner serve` as an attacker and a careless client meet it, over loopback HTTP: the
token it makes, requests a web page could send, malformed fields, its state on disk, sizes
and limits."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import httpx
import pytest

from conftest import ROOT, kernel_variant, relay
from test_daemon import TOKEN, Daemon, body, quick


def serve(*args: str, env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("GEAK_RUNNER_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "runner.serve.cli", "serve", "--port", "0", "--device", "interpreter",
                           *args], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A daemon started with no token (it makes its own) under umask 022, with small limits."""
    old = os.umask(0o022)
    try:
        d = Daemon(tmp_path_factory.mktemp("sec") / "state", None, "--allow-host", "gpu-box.example",
                   "--max-file-kb", "64", "--max-request-mb", "1", "--run-s", "4", "--workers", "1").start()
    finally:
        os.umask(old)
    yield d
    d.stop()


# ----------------------------------------------------------------------------- the token


def test_a_token_is_always_needed_and_made_on_first_start(guarded, project):
    token_file = guarded.state / "token"
    assert f"token made in {token_file}" in guarded.log[0]
    assert len(guarded.token) >= 32 and mode(token_file) == 0o600
    with guarded.http(token=None) as h:  # loopback, and still no way in without the token
        assert h.get("/v1/health").json()["auth"] is True
        r = h.post("/v1/jobs", json=body(quick(project)))
        assert r.status_code == 401 and "needs a token" in r.json()["error"]["message"]
    with guarded.http() as h:
        assert h.get("/v1/queue").status_code == 200


def test_the_made_token_is_kept_across_restarts(tmp_path):
    d = Daemon(tmp_path / "state", None).start()
    first = d.token
    d.stop()
    d.start()
    try:
        assert d.token == first and f"token read in {tmp_path / 'state' / 'token'}" in d.log[-1]
    finally:
        d.stop()


# ----------------------------------------------------------------------------- web pages


def test_requests_a_web_page_could_send_are_refused(guarded, project):
    job = body(quick(project))
    with guarded.http() as h:
        # A cross-origin "simple" POST (text/plain, no preflight) from a page: refused, not run.
        r = h.post("/v1/jobs", content=json.dumps(job), headers={"Content-Type": "text/plain",
                                                                  "Origin": "https://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin"
        r = h.get("/v1/queue", headers={"Origin": "null"})
        assert r.status_code == 403
        # Without an Origin, a body that is not declared JSON is refused too.
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = h.post("/v1/jobs", content=json.dumps(job), headers={"Content-Type": ctype})
            assert r.status_code == 415 and "application/json" in r.json()["error"]["message"], ctype
        r = h.post("/v1/jobs", content=json.dumps(job).encode(), headers={"Content-Type": ""})
        assert r.status_code == 415
        # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own Host name.
        for path in ("/v1/health", "/v1/queue"):
            r = h.get(path, headers={"Host": f"evil.example:{guarded.port}"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host"
            assert "--allow-host" in r.json()["error"]["message"]
        for host in (f"localhost:{guarded.port}", f"[::1]:{guarded.port}", "gpu-box.example"):
            assert h.get("/v1/queue", headers={"Host": host}).status_code == 200, host
        r = h.post("/v1/jobs", json=job, headers={"Content-Type": "application/json; charset=utf-8"})
        assert r.status_code == 202  # what the geak client sends
        assert h.get(f"/v1/jobs/{r.json()['jobs'][0]['id']}/result", params={"wait": 60}).json()["status"] == "ok"
        assert h.get("/v1/queue").json()["jobs"]["done"] == 1  # only that one ran


# ----------------------------------------------------------------------------- malformed input


def test_malformed_headers_ids_schemas_and_paths_are_4xx_that_name_the_field(guarded, project):
    good = body(quick(project))
    with httpx.Client(base_url=guarded.url, timeout=30) as h:
        for raw in (b"Bearer \xff\xfe\xfd", "Bearer tökén".encode("utf-8"), b"Bearer \x80" + TOKEN.encode()):
            r = h.get("/v1/queue", headers=[(b"Authorization", raw)])
            assert r.status_code == 401, (raw, r.text)
    bad = {
        "id with a newline": ({**good, "id": "abc\n"}, 400, "EvalRequest.id"),
        "schema of another name": ({**good, "schema": "geak.whatever/1"}, 400, "geak.whatever/1"),
        "NUL in a path": ({**good, "files": {**good["files"], "a\x00b.py": "x = 1\n"}}, 422, "NUL byte"),
        "lone surrogate in a path": ({**good, "files": {**good["files"], "a\ud800.py": "x = 1\n"}}, 422,
                                     "lone surrogate"),
        "over-long name": ({**good, "files": {**good["files"], "x" * 300 + ".py": "x = 1\n"}}, 422,
                           "longer than 255 bytes"),
        "parent folder": ({**good, "files": {**good["files"], "../up.py": "x = 1\n"}}, 422, "'..'"),
        "absolute path": ({**good, "target": {"path": "/etc/passwd.py", "symbol": "f"}}, 422,
                          "EvalRequest.target.path"),
        "lone surrogate in a text": ({**good, "files": {**good["files"], "t.py": "s = '\ud800'\n"}}, 422,
                                     "EvalRequest.files['t.py']"),
        "NUL in a source": ({**good, "files": {**good["files"], "t.py": "x = 1\x00\n"}}, 422, "NUL byte"),
        "symbol that is no name": ({**good, "target": {**good["target"], "symbol": "a b"}}, 422,
                                   "EvalRequest.target.symbol"),
        "target that is not Python": ({**good, "target": {"path": "notes.txt", "symbol": "X"}}, 422, "not a Python file"),
    }
    with guarded.http() as h:
        before = h.get("/v1/queue").json()["jobs"]
        for name, (doc, status, words) in bad.items():
            r = h.post("/v1/jobs", content=json.dumps(doc), headers={"Content-Type": "application/json"})
            assert r.status_code == status and words in r.json()["error"]["message"], (name, r.text)
        r = h.get("/v1/jobs/abc%0A")
        assert r.status_code == 400
        assert h.get("/v1/queue").json()["jobs"] == before  # nothing was queued, no worker was spent
    assert not any("Traceback" in ln or "internal error" in ln for ln in guarded.log), guarded.log


# ----------------------------------------------------------------------------- sizes and limits


def test_sources_over_the_limits_are_refused_before_the_daemon_holds_them(guarded, project):
    good = body(quick(project))
    with guarded.http() as h:
        big = {**good, "files": {**good["files"], "big.py": "x = 1\n" * 20000}}  # 117 KiB > --max-file-kb 64
        r = h.post("/v1/jobs", json=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "source_too_large"
        msg = r.json()["error"]["message"]
        assert "EvalRequest.files['big.py']" in msg and "64 KiB" in msg and "--max-file-kb" in msg
        many = {**good, "files": {**good["files"], **{f"m{i}.py": "#" * 60000 + "\n" for i in range(20)}}}
        r = h.post("/v1/jobs", json=many)  # 20 x 59 KiB > --max-request-mb 1
        assert r.status_code == 413 and "1 MiB" in r.json()["error"]["message"]
        assert "--max-request-mb" in r.json()["error"]["message"]


def test_a_27_mib_source_costs_the_daemon_nothing(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN).start()  # the default limits
    try:
        good = body(quick(project))
        huge = {**good, "files": {**good["files"], "ref.py": good["files"]["ref.py"] + "x = 1\n" * ((27 << 20) // 6)}}
        payload = json.dumps(huge).encode()
        assert len(payload) > 27 << 20
        with d.http() as h:
            r = h.post("/v1/jobs", content=payload, headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and "--max-file-kb" in r.json()["error"]["message"], r.text
            t0 = time.monotonic()
            assert h.get("/v1/health", timeout=5).status_code == 200 and time.monotonic() - t0 < 2
            assert h.get("/v1/queue").json()["jobs"]["queued"] == 0
        with open(f"/proc/{d.proc.pid}/status") as f:
            rss_mb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM")) / 1024
        assert rss_mb < 500, f"the daemon peaked at {rss_mb:.0f} MB"
    finally:
        d.stop()


def test_limits_are_ceilings_null_is_the_ceiling_and_lowering_is_allowed(guarded, project):
    project.write("forever.py", kernel_variant(pre="    import time\n    time.sleep(1000)"))
    project.write("slow.py", kernel_variant(pre="    import time\n    time.sleep(2.5)"))
    def job(cand, jid, **limits):
        doc = body(quick(project, candidate=cand), jid)
        doc["options"]["limits"] = {**doc["options"]["limits"], **limits}
        return doc
    with guarded.http() as h:
        for jid, doc, status, words in [
                ("neg", job("slow.py::add_relu", "neg", run_s=-1), 422, "options.limits.run_s: expected a positive"),
                ("zero", job("slow.py::add_relu", "zero", import_s=0), 422, "options.limits.import_s"),
                ("str", job("slow.py::add_relu", "str", memory_mb="lots"), 422, "options.limits.memory_mb"),
                ("nan", job("slow.py::add_relu", "nan", timing_s=float("nan")), 422, "options.limits.timing_s")]:
            r = h.post("/v1/jobs", content=json.dumps(doc), headers={"Content-Type": "application/json"})
            assert r.status_code == status and words in r.json()["error"]["message"], (jid, r.text)
        t0 = time.monotonic()
        jobs = [job("forever.py::add_relu", "null-run", run_s=None),          # null: the ceiling (4 s), not "none"
                job("forever.py::add_relu", "huge-run", run_s=1e9, memory_mb=1 << 40),
                job("slow.py::add_relu", "lower-run", run_s=1)]              # lower than the ceiling: kept
        del jobs[0]["options"]["limits"]["import_s"]                         # absent: the ceiling
        assert h.post("/v1/jobs", json={"requests": jobs}).status_code == 202
        res = {j: h.get(f"/v1/jobs/{j}/result", params={"wait": 60}).json() for j in ("null-run", "huge-run", "lower-run")}
        assert time.monotonic() - t0 < 40
    assert res["null-run"]["status"] == "timeout" and "after 4 s in the run phase" in res["null-run"]["message"]
    assert not [f for f in res["null-run"]["flags"] if f["code"] == "limit_lowered"]
    assert res["huge-run"]["status"] == "timeout" and "after 4 s" in res["huge-run"]["message"]
    lowered = sorted(f["message"] for f in res["huge-run"]["flags"] if f["code"] == "limit_lowered")
    assert len(lowered) == 2 and "limits.memory_mb" in lowered[0] and "ceiling of 16384 MB" in lowered[0]
    assert "limits.run_s: 1e+09 s asked, lowered to this runner's ceiling of 4 s" in lowered[1]
    assert res["lower-run"]["status"] == "timeout" and "after 1 s" in res["lower-run"]["message"]


def test_null_is_the_ceiling_for_every_limit_and_nan_or_infinity_is_refused(tmp_path, project):
    """Over HTTP and through the spool (both read JSON with Python's json, which takes NaN and
    Infinity): a null limit of any type (memory_mb is an integer) is the ceiling; NaN, Infinity,
    -Infinity (and 1e999, read as infinity) are a 422, or a rejected result, naming the field."""
    spool = tmp_path / "spool"
    d = Daemon(tmp_path / "state", TOKEN, "--spool", str(spool), "--spool-poll", "0.2", "--workers", "1").start()

    def text(jid, **limits):  # JSON with the limits spelled as given (NaN is no JSON number)
        doc = body(quick(project), jid)
        doc["options"]["limits"] = {**doc["options"]["limits"], **{k: f"@{k}@" for k in limits}}
        out = json.dumps(doc)
        for k, v in limits.items():
            out = out.replace(f'"@{k}@"', v)
        return out

    try:
        with d.http() as h:
            nulls = {k: "null" for k in ("import_s", "run_s", "timing_s", "memory_mb", "wait_s", "total_s")}
            r = h.post("/v1/jobs", content=text("all-null", **nulls), headers={"Content-Type": "application/json"})
            assert r.status_code == 202, r.text
            res = h.get("/v1/jobs/all-null/result", params={"wait": 60}).json()
            assert res["status"] == "ok" and not [f for f in res["flags"] if f["code"] == "limit_lowered"], res
            for field in ("memory_mb", "run_s"):
                for literal, shown in (("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
                                       ("1e999", "Infinity")):
                    r = h.post("/v1/jobs", content=text("bad", **{field: literal}),
                               headers={"Content-Type": "application/json"})
                    msg = r.json()["error"]["message"]
                    assert r.status_code == 422 and f"options.limits.{field}: expected a positive number" in msg \
                        and msg.endswith(f"got {shown}"), (field, literal, r.status_code, msg)
        for jid, limits in (("spool-nan", {"timing_s": "NaN"}), ("spool-inf", {"memory_mb": "Infinity"}),
                            ("spool-null", {"memory_mb": "null"})):
            (spool / f".{jid}.tmp").write_text(text(jid, **limits))
            os.replace(spool / f".{jid}.tmp", spool / f"{jid}.request.json")
        docs = {}
        t0 = time.monotonic()
        while len(docs) < 3:
            assert time.monotonic() - t0 < 60, docs
            for jid in ("spool-nan", "spool-inf", "spool-null"):
                p = spool / f"{jid}.result.json"
                if jid not in docs and p.exists():
                    docs[jid] = json.loads(p.read_text())
            time.sleep(0.1)
        assert docs["spool-nan"]["status"] == "rejected" and "options.limits.timing_s" in docs["spool-nan"]["message"]
        assert docs["spool-inf"]["status"] == "rejected" and "options.limits.memory_mb" in docs["spool-inf"]["message"]
        assert docs["spool-null"]["status"] == "ok", docs["spool-null"]
    finally:
        d.stop()


def test_the_client_halves_a_batch_whose_body_is_over_the_daemons_limit(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN, "--max-body-mb", "1").start()
    try:
        pad = "# " + "x" * 400_000 + "\n"  # 400 KB per request: four of them are over 1 MiB
        project.write("padded.py", (project.root / "ref.py").read_text() + pad)
        reqs = [quick(project, target="padded.py::add_relu") for _ in range(4)]
        assert [r.status for r in d.client().evaluate_many(reqs)] == ["ok"] * 4
        project.write("toobig.py", (project.root / "ref.py").read_text() + pad * 3)
        (res,) = d.client().evaluate_many([quick(project, target="toobig.py::add_relu")])
        assert res.error.kind == "runner_unavailable" and "--max-body-mb" in res.message
    finally:
        d.stop()


# ----------------------------------------------------------------------------- state on disk


def test_state_is_private_and_an_empty_or_foreign_database_is_refused(tmp_path):
    old = os.umask(0o022)
    try:
        state = tmp_path / "state"
        d = Daemon(state, TOKEN).start()
        d.stop()
        assert mode(state) == 0o700 and mode(state / "jobs.sqlite3") == 0o600
        os.chmod(state, 0o755)  # as an older version left it
        os.chmod(state / "jobs.sqlite3", 0o644)
        d.start()
        d.stop()
        assert mode(state) == 0o700 and mode(state / "jobs.sqlite3") == 0o600
    finally:
        os.umask(old)
    for content, words in [(b"", "is empty (0 bytes)"), (b"not a database at all", "is not a SQLite database")]:
        s = tmp_path / f"s{len(content)}"
        s.mkdir()
        (s / "jobs.sqlite3").write_bytes(content)
        p = serve("--state", str(s))
        assert p.returncode == 2 and "refusing to start" in p.stderr and words in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and (s / "jobs.sqlite3").read_bytes() == content  # left alone
    import sqlite3
    other = tmp_path / "other"
    other.mkdir()
    with sqlite3.connect(other / "jobs.sqlite3") as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    p = serve("--state", str(other))
    assert p.returncode == 2 and "without geak-runner's jobs table" in p.stderr
    p = serve("--state", "/tmp")
    assert p.returncode == 2 and "shared directory" in p.stderr


def test_a_state_file_that_is_a_symbolic_link_stops_the_start(tmp_path):
    """jobs.sqlite3 (or the token, the database's WAL) linked to a file outside the state
    directory: the daemon would use, chmod and write that file. It refuses to start instead."""
    made = tmp_path / "made"
    d = Daemon(made, None).start()  # a real job database and token, to link to
    d.stop()
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("jobs.sqlite3", "token"):
        os.replace(made / name, outside / name)
    os.chmod(outside / "token", 0o644)
    for name in ("jobs.sqlite3", "token", "jobs.sqlite3-wal"):
        state = tmp_path / f"state-{name}"
        state.mkdir(mode=0o700)
        (state / name).symlink_to(outside / name)
        p = serve("--state", str(state))
        assert p.returncode == 2 and "refusing to start" in p.stderr, p.stderr
        assert f"{state / name} is a symbolic link (to {outside / name})" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    assert mode(outside / "token") == 0o644 and not (outside / "jobs.sqlite3-wal").exists()  # left alone


def test_scratch_dirs_of_a_killed_daemon_are_swept_at_the_next_start(tmp_path, project):
    d = Daemon(tmp_path / "state", TOKEN, "--workers", "1").start()
    mark = tmp_path / "cwd.txt"
    project.write("slow.py", kernel_variant(extra=f"import os, time\nopen({str(relay(mark))!r}, 'a').write(os.getcwd())",
                                            pre="    time.sleep(30)"))
    try:
        with d.http() as h:
            h.post("/v1/jobs", json=body(quick(project, candidate="slow.py::add_relu"), "killed-1"))
            t0 = time.monotonic()
            while not mark.exists() or not mark.read_text():
                assert time.monotonic() - t0 < 60
                time.sleep(0.05)
        scratch = mark.read_text()
        assert scratch.startswith(str(d.state / "scratch") + "/")  # private, not /tmp
        assert any(p.name == "slow.py" for p in __import__("pathlib").Path(scratch).rglob("*.py"))
        d.kill9()
        assert os.path.isdir(scratch)  # the job's sources are still on disk
        d.start()
        assert not os.path.exists(scratch)
        assert "removed 1 scratch dir(s) left by an earlier run" in d.log[-1], d.log[-1]
        with d.http() as h:  # and the interrupted job runs again
            assert h.get("/v1/jobs/killed-1").json()["attempts"] == 2
    finally:
        d.stop(timeout=5)
