"""Spool mode end to end: request files in a shared directory, result files beside them."""

from __future__ import annotations

import json
import os
import time

from conftest import kernel_variant
from runner.serve.remote import SpoolRunner
from runner.serve.runners import open_runner
from runner.schema import to_json
from test_daemon import Daemon, quick
from test_remote import geak


def wait_for(path, timeout=60.0):
    t0 = time.monotonic()
    while not path.exists():
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_spool_end_to_end(tmp_path, project):
    spool = tmp_path / "spool"
    d = Daemon(tmp_path / "state", None, "--spool", str(spool), "--spool-poll", "0.2").start()
    try:
        project.write("cand.py", kernel_variant(block=64))
        project.write("segv.py", kernel_variant(pre="    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)"))
        r = open_runner(f"file://{spool}")
        assert isinstance(r, SpoolRunner)
        res = r.evaluate_many([quick(project, candidate="cand.py::add_relu"),
                               quick(project, candidate="segv.py::add_relu")])
        assert [x.status for x in res] == ["ok", "crashed"] and res[1].error.kind == "segfault"
        assert r.device_info().backend == "interpreter"
        assert sorted(p.name for p in spool.iterdir()) == ["runner.json"]  # the client cleaned up

        # By hand: an atomically renamed request file gets an atomically written result file.
        tmp = spool / ".byhand.tmp"
        tmp.write_text(to_json(quick(project)))
        os.replace(tmp, spool / "byhand.request.json")
        doc = wait_for(spool / "byhand.result.json")
        assert doc["status"] == "ok" and doc["id"] == "byhand" and doc["schema"] == "geak.eval/1"
        assert (spool / "byhand.accepted.json").exists() and not (spool / "byhand.request.json").exists()

        # An unreadable request gets a result that says why (once it is clearly not being written).
        bad = spool / ".bad.tmp"
        bad.write_text('{"target": ')
        os.utime(bad, (time.time() - 60, time.time() - 60))
        os.replace(bad, spool / "bad.request.json")
        doc = wait_for(spool / "bad.result.json")
        assert doc["status"] == "rejected" and doc["error"]["kind"] == "bad_request" and "not JSON" in doc["message"]
        (spool / "wrong.request.json").write_text(json.dumps({"schema": "geak.eval/1", "files": {}}))
        doc = wait_for(spool / "wrong.result.json")
        assert doc["status"] == "rejected" and "missing required field 'target'" in doc["message"]

        # The daemon's limits hold for spool requests too: source size, and limits as ceilings.
        big = json.loads(to_json(quick(project)))
        big["files"]["pad.py"] = "#" * (600 << 10) + "\n"
        (spool / ".big.tmp").write_text(json.dumps(big))
        os.replace(spool / ".big.tmp", spool / "big.request.json")
        doc = wait_for(spool / "big.result.json")
        assert doc["status"] == "rejected" and "--max-file-kb" in doc["message"] and "512 KiB" in doc["message"]
        greedy = json.loads(to_json(quick(project)))
        greedy["options"]["limits"]["run_s"] = 1e6
        (spool / ".greedy.tmp").write_text(json.dumps(greedy))
        os.replace(spool / ".greedy.tmp", spool / "greedy.request.json")
        doc = wait_for(spool / "greedy.result.json")
        assert doc["status"] == "ok" and [f["code"] for f in doc["flags"]].count("limit_lowered") == 1

        # Requests dropped while the daemon is down run when it is back; nothing runs twice.
        d.stop()
        assert json.loads((spool / "runner.json").read_text())["alive_until"] == 0
        tmp = spool / ".later.tmp"
        tmp.write_text(to_json(quick(project)))
        os.replace(tmp, spool / "later.request.json")
        (spool / "byhand.result.json").unlink()  # a result the client lost: written again from the store
        os.replace(spool / "byhand.accepted.json", spool / "byhand.request.json")
        d.start()
        assert wait_for(spool / "later.result.json")["status"] == "ok"
        assert wait_for(spool / "byhand.result.json")["status"] == "ok"
        with d.http() as h:
            assert h.get("/v1/jobs/byhand").json()["attempts"] == 1

        # The CLI through the spool.
        p = geak("eval", "ref.py::add_relu", "--candidate", "cand.py::add_relu", "--cases", "0", "--trials", "1",
                 "--runner", f"file://{spool}", cwd=project.root)
        assert p.returncode == 0, p.stderr
    finally:
        d.stop()


def test_spool_without_a_runner_says_so(tmp_path, project):
    (tmp_path / "empty").mkdir()
    res = SpoolRunner(tmp_path / "empty").evaluate(quick(project))
    assert res.error.kind == "runner_unavailable" and "no runner serves" in res.message
    assert list((tmp_path / "empty").iterdir()) == []
    # A runner that stopped (or died: its heartbeat goes stale) is noticed once nothing is picked up.
    (tmp_path / "empty" / "runner.json").write_text(json.dumps({"schema": "geak.eval/1", "alive_until": 0}))
    res = SpoolRunner(tmp_path / "empty", pickup_s=0.5).evaluate(quick(project))
    assert res.error.kind == "runner_unavailable" and "no runner picked up" in res.message
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["runner.json"]  # request withdrawn
