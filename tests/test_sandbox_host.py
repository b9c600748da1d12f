"""The sandbox's self-test tells the truth: on this machine (user and mount namespaces), and on
a host that has none, simulated with a real one: a user namespace of this test's own where no
further user namespace may be made and no capability is left (what an unprivileged runner sees
where the kernel refuses unprivileged user namespaces)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT
from runner import sandbox

BIN = Path(sys.executable).parent


def no_namespaces(*cmd: str) -> list[str]:
    """``cmd`` on a host without namespaces: inside ``unshare --user --map-root-user`` the
    limit of new user namespaces is set to 0 (it binds that namespace alone), and ``setpriv``
    drops every capability before ``cmd`` starts."""
    inner = "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-all --inh-caps=-all " \
            + " ".join(f"'{c}'" for c in cmd)
    return ["unshare", "--user", "--map-root-user", "sh", "-c", inner]


def simulation_works() -> bool:
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    r = subprocess.run(no_namespaces("true"), capture_output=True, timeout=30)
    return r.returncode == 0


needs_simulation = pytest.mark.skipif(not simulation_works(),
                                      reason="needs unshare and setpriv (util-linux) and user namespaces")


@pytest.fixture
def outside_tmp():
    """A folder outside /tmp (a job's /tmp is its own, so what lies under the host's proves
    nothing about hiding)."""
    d = Path(tempfile.mkdtemp(prefix="geak-test-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_self_test_confines_a_job_on_this_host(outside_tmp):
    # As a daemon lays it out: the pool's root (the probe's scratch) inside the hidden state.
    hidden = outside_tmp / "state"
    root = hidden / "scratch" / "pool"
    root.mkdir(parents=True)
    (hidden / "token").write_text("secret")
    token_file = outside_tmp / "token-file"
    token_file.write_text("another secret")
    confined, facts = sandbox.self_test(str(root), hide=(str(hidden), str(token_file)))
    assert confined, facts
    assert facts["filesystem"].startswith("host read-only")
    assert facts["runner_state"] == "hidden from the job"
    assert facts["user_namespaces"] == "cannot be created inside the job"
    assert facts["devices"].startswith("null, zero, full")
    assert (hidden / "token").read_text() == "secret"
    assert list(root.iterdir()) == []  # the probe's scratch is gone


def test_a_job_sees_what_the_self_test_says(outside_tmp):
    """The view itself, from inside a confined process: the hidden state is empty, the host is
    read-only, the scratch writable, /dev holds no disk."""
    hidden = outside_tmp / "state"
    scratch = hidden / "scratch" / "job"
    scratch.mkdir(parents=True)
    (hidden / "token").write_text("secret")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = {}
        try:
            ns = sandbox.enter_namespaces()
            child = os.fork()
            if child == 0:
                sandbox.mount_own_proc()
                sandbox.confine(str(scratch), None, (str(hidden),), 64, ns["user"] == "own namespace")
                sandbox.drop_privileges()
                res = {"state": sorted(os.listdir(hidden)), "token": os.path.exists(hidden / "token"),
                       "dev": sorted(os.listdir("/dev"))}
                for name, path in (("scratch", scratch / "f"), ("project", ROOT / "geak-probe-f"),
                                   ("var_tmp", outside_tmp / "f")):
                    try:
                        Path(path).write_text("x")
                        res[name] = "written"
                    except OSError as e:
                        res[name] = e.strerror
                os.write(w, json.dumps(res).encode())
                os._exit(0)
            os.waitpid(child, 0)
        except BaseException as e:  # noqa: BLE001
            os.write(w, json.dumps({"error": repr(e)}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    seen = json.loads(data)
    assert seen["state"] == ["scratch"] and not seen["token"], seen
    assert seen["scratch"] == "written" and (scratch / "f").read_text() == "x"
    assert seen["project"] == "Read-only file system" and seen["var_tmp"] == "Read-only file system"
    assert not (ROOT / "geak-probe-f").exists()
    assert "vda" not in seen["dev"] and "loop0" not in seen["dev"] and "null" in seen["dev"], seen["dev"]


def test_what_the_probe_tried_is_judged_as_seen(tmp_path):
    """judge_probe believes only what the probe managed or failed to do."""
    ok = {"confined": True, "write_scratch": True, "write_outside": [], "visible": [],
          "tmp_file": str(tmp_path / "not-there"), "user_namespace_inside": False}
    assert sandbox.judge_probe(ok)[0]
    leaked = dict(ok, write_outside=["/usr/lib/python3/site-packages"])
    confined, facts = sandbox.judge_probe(leaked)
    assert not confined and "/usr/lib/python3/site-packages" in facts["filesystem"]
    seen = dict(ok, visible=["/var/lib/geak"])
    confined, facts = sandbox.judge_probe(seen)
    assert not confined and facts["runner_state"] == "VISIBLE to the job: /var/lib/geak"
    shared_tmp = tmp_path / "probe-file"
    shared_tmp.write_text("x")  # the probe's /tmp file is on the host's /tmp: no private /tmp
    confined, _ = sandbox.judge_probe(dict(ok, tmp_file=str(shared_tmp)))
    assert not confined and not shared_tmp.exists()
    _, facts = sandbox.judge_probe(dict(ok, user_namespace_inside=True))
    assert facts["user_namespaces"] == "CAN be created inside the job"


@needs_simulation
def test_info_says_so_on_a_host_without_namespaces():
    r = subprocess.run(no_namespaces(str(BIN / "geak-runner"), "info", "--json"), capture_output=True,
                       text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)["sandbox"]
    assert facts["filesystem"].startswith("NOT confined"), facts
    assert "no mount namespace" in facts["filesystem"]
    assert facts["runner_state"].startswith("VISIBLE")
    here = subprocess.run([str(BIN / "geak-runner"), "info", "--json"], capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert json.loads(here.stdout)["sandbox"]["filesystem"].startswith("host read-only")


@needs_simulation
def test_serve_refuses_a_host_without_namespaces_unless_told(tmp_path):
    state = tmp_path / "state"
    cmd = [str(BIN / "geak-runner"), "serve", "--port", "0", "--state", str(state)]
    r = subprocess.run(no_namespaces(*cmd), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "refusing to serve: this host cannot confine evaluated code" in r.stderr
    assert "--unsafe-no-sandbox" in r.stderr and "Traceback" not in r.stderr
    p = subprocess.Popen(no_namespaces(*cmd, "--unsafe-no-sandbox"), stderr=subprocess.PIPE, text=True,
                         cwd=ROOT, start_new_session=True)
    try:
        end, seen = time.monotonic() + 120, ""
        while time.monotonic() < end and "listening on" not in seen:
            line = p.stderr.readline()
            if not line:
                break
            seen += line
        assert "listening on" in seen and "sandbox: NONE (--unsafe-no-sandbox)" in seen, seen
        assert "WITHOUT a sandbox" in seen
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


@needs_simulation
def test_the_cli_warns_once_where_code_is_not_sandboxed():
    r = subprocess.run(no_namespaces(str(BIN / "geak"), "eval", "examples/softmax.py::softmax", "--json"),
                       capture_output=True, text=True, timeout=290, cwd=ROOT)
    result = json.loads(r.stdout)
    assert result["sandbox"]["filesystem"].startswith("NOT confined")
    assert r.stderr.count("warning: this runner does not sandbox evaluated code") == 1, r.stderr


def test_a_process_s_own_list_of_children_names_what_the_process_table_does():
    """sandbox.children (the fork server's sweep, five times a second) against the whole table:
    children forked by the main thread and by another one, and an orphan taken in as a
    subreaper; the exited ones left as zombies are the only difference."""
    script = textwrap.dedent('''
        import os, sys, threading, time
        from runner import sandbox
        sandbox.set_subreaper()
        kids = []
        def fork_sleeper():
            pid = os.fork()
            if pid == 0:
                time.sleep(30); os._exit(0)
            kids.append(pid)
        fork_sleeper()
        t = threading.Thread(target=lambda: (fork_sleeper(), time.sleep(3)))
        t.start()
        r, w = os.pipe()
        mid = os.fork()
        if mid == 0:  # leaves its own child to us, then exits
            if os.fork() == 0:
                time.sleep(30); os._exit(0)
            os._exit(0)
        os.waitpid(mid, 0)
        time.sleep(0.5)
        done = os.fork()
        if done == 0:
            os._exit(0)
        time.sleep(0.5)  # a zombie now
        me = os.getpid()
        listed = sandbox.children(me)
        table = {p for p, pp in sandbox.process_table().items() if pp == me}
        print(sorted(listed), sorted(table), done, file=sys.stderr)
        assert listed is not None
        assert set(listed) - {done} == table and done in listed and len(table) == 3, (listed, table)
        assert sandbox.children(2 ** 22 + 7) is None
        for p in table:
            os.kill(p, 9)
    ''')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr


def test_a_link_planted_under_a_pool_root_name_is_not_followed(tmp_path):
    from runner.judge.pool import POOL_PREFIX, sweep_stale_roots
    mine = tmp_path / "project"
    mine.mkdir(mode=0o755)
    (mine / "keep.py").write_text("x = 1\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / f"{POOL_PREFIX}999999999-x").symlink_to(mine)  # no such process: looks stale
    sweep_stale_roots(str(tmp))
    assert (mine / "keep.py").read_text() == "x = 1\n" and (mine.stat().st_mode & 0o777) == 0o755
