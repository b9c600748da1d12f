"""The fork server: torch and triton imported once, a fresh worker forked per job.

    python -m runner.worker.zygote CTRL_FD DEVICE ISOLATE

The pool starts one of these and talks to it over a Unix datagram socket (``CTRL_FD``):

  <- {"op": "spawn", "job": N, "scratch": DIR}   + two file descriptors (SCM_RIGHTS): the job's
                                                   protocol socket and its stderr pipe
  -> {"event": "ready", "gpu": bool, "pid": P}
  -> {"event": "spawned", "job": N, "pid": KEEPER_PID}
  -> {"event": "exited", "job": N, "code": C | null, "signal": S | null}
  -> {"event": "fatal", "message": TEXT}

Per job it forks a *keeper*, which enters new PID and network namespaces where it can
(``runner.sandbox``), becomes a subreaper and forks the *worker* (``runner.worker.main.serve``).
The keeper waits for the worker, kills whatever is left below it, and exits with the worker's
status, which the fork server reports. Nothing here runs user code: the worker is the first
process of the job's tree to import it, and it never outlives the keeper (parent-death signal).

The fork server never initialises the GPU driver (a forked child could not use it then); each
worker creates its own CUDA context before it says hello. When the pool goes away (its end of
the socket closes), the fork server kills every job's tree and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time


def _send(ctrl: socket.socket, msg: dict) -> None:
    try:
        ctrl.send(json.dumps(msg).encode())
    except OSError:
        pass


def _status(status: int) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    code = os.WEXITSTATUS(status)
    if code >= 128 + 1 and code <= 128 + 64:  # the keeper reports a worker killed by a signal
        return None, code - 128
    return code, None


def _keeper(ctrl: socket.socket, fds: list[int], scratch: str, isolate: bool, pidns: bool,
            server_pid: int, confined: bool) -> None:
    """The job's first process (never returns)."""
    from .. import sandbox
    try:
        ctrl.close()
        proto, err = fds
        os.dup2(err, 1)
        os.dup2(err, 2)
        os.dup2(proto, 3)
        sandbox.close_fds({0, 1, 2, 3})
        sandbox.die_with_parent(server_pid)
        ns = sandbox.enter_namespaces(pid=isolate and pidns, net=isolate) if isolate else {}
        sandbox.set_subreaper()
        keeper = os.getpid()
        if ns.get("pid") == "own namespace":
            # The first process of a PID namespace is its init, which the kernel shields from
            # signals it has no handler for: the worker must not be that process.
            child = os.fork()
            if child == 0:  # init: a /proc of its own, then the worker; reaps; exits with its status
                sandbox.die_with_parent(0)
                if not sandbox.mount_own_proc():
                    os._exit(75)
                _confine(scratch, ns, confined)
                _run_worker(os.fork(), scratch, ns)
        else:
            child = os.fork()
            if child == 0:
                _confine(scratch, ns, confined)
                _serve(scratch, ns, keeper)
        os.close(3)
        status = _wait_for(child)
        # The worker is gone: nothing it started may outlive it.
        sandbox.kill_tree(keeper, include_root=False)
        while True:
            try:
                os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        if os.WIFSIGNALED(status):
            os._exit(128 + os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status))  # init already encoded a signal as 128 + N
    except BaseException:
        os._exit(70)


def _confine(scratch: str, ns: dict, confined: bool) -> None:
    """The job's view of the files (``runner.sandbox.confine``), where the self-test at start
    showed that it holds; a job that cannot get it where it should ends before any user code."""
    if not confined or ns.get("mount") != "own namespace":
        return
    from .. import sandbox
    try:
        ns.update(sandbox.confine(scratch, os.environ.get("GEAK_TRITON_SHARED_CACHE"), _hidden(),
                                  _tmp_mb(), ns.get("user") == "own namespace"))
        if os.environ.get("GEAK_TRITON_SHARED_CACHE"):
            ns["compile_cache"] = "shared, read-only"
    except OSError as e:
        print(f"geak: the job's sandbox could not be set up: {e}", file=sys.stderr, flush=True)
        os._exit(76)


def _hidden() -> tuple[str, ...]:
    """What no job may see: the pool's root (every job's scratch), and what the runner adds
    (a daemon's state directory and token file)."""
    extra = [p for p in os.environ.get("GEAK_SANDBOX_HIDE", "").split(os.pathsep) if p]
    return (os.environ.get("GEAK_POOL_ROOT", ""), *extra)


def _tmp_mb() -> int:
    try:
        return int(float(os.environ.get("GEAK_SANDBOX_TMP_MB", "")))
    except ValueError:
        from ..sandbox import TMP_MB
        return TMP_MB


def _serve(scratch: str, ns: dict, parent: int) -> None:
    from . import main as w
    code = 1
    try:
        code = w.serve(3, scratch, ns, parent)
    finally:
        os._exit(code)


def _wait_for(child: int) -> int:
    """Reap children (orphans land here too) until ``child`` exits; its wait status."""
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            return st


def _run_worker(worker: int, scratch: str, ns: dict) -> None:
    """PID 1 of the job's namespace: the worker is its child; when the worker exits, so does
    this process, and the kernel kills whatever is left in the namespace."""
    if worker == 0:
        _serve(scratch, ns, 1)
    os.close(3)
    from .. import sandbox
    sandbox.drop_privileges()  # nothing in the namespace holds a capability
    st = _wait_for(worker)
    os._exit(128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))


def main() -> int:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    requested = sys.argv[2] if len(sys.argv) > 2 else "auto"
    isolate = (sys.argv[3] if len(sys.argv) > 3 else "1") == "1"
    try:
        from . import main as worker
        gpu = worker.prepare(requested)
    except BaseException as e:
        _send(ctrl, {"event": "fatal", "message": f"{type(e).__name__}: {e}"})
        return 1
    from .. import sandbox
    sandbox.set_subreaper()  # orphans of a keeper that was killed land here, and are swept
    pidns = isolate and sandbox.pid_namespace_works()
    # Everything imported so far (torch, triton, the runner) lives as long as any worker: out
    # of the collector's sight, so a worker's full collections scan only what it made (with
    # torch loaded a full collection otherwise takes a tenth of a second), and forked workers
    # do not copy those pages by touching their collector headers.
    import gc
    gc.collect()
    gc.freeze()
    root = os.environ.get("GEAK_POOL_ROOT") or os.getcwd()
    confined, facts = sandbox.self_test(root, isolate, pidns, _hidden(), _tmp_mb(),
                                        os.environ.get("GEAK_TRITON_SHARED_CACHE"))
    me = os.getpid()
    jobs: dict[int, int] = {}  # keeper pid -> job
    _send(ctrl, {"event": "ready", "gpu": gpu, "pid": me, "sandbox": facts, "confined": confined})
    last_sweep = last_table = 0.0
    try:
        while True:
            ready, _, _ = select.select([ctrl], [], [], 0.1)
            if ready:
                try:
                    data, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 4)
                except OSError:
                    data, fds = b"", []
                if not data:
                    break  # the pool is gone
                try:
                    cmd = json.loads(data)
                except ValueError:
                    cmd = {}
                if cmd.get("op") == "exit":
                    break
                if cmd.get("op") == "spawn" and len(fds) == 2:
                    pid = os.fork()
                    if pid == 0:
                        _keeper(ctrl, fds, str(cmd["scratch"]), isolate, pidns, me, confined)
                    jobs[pid] = int(cmd["job"])
                    _send(ctrl, {"event": "spawned", "job": cmd["job"], "pid": pid})
                for fd in fds:
                    os.close(fd)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid in jobs:
                    code, sig = _status(status)
                    _send(ctrl, {"event": "exited", "job": jobs.pop(pid), "code": code, "signal": sig})
            now = time.monotonic()
            if now - last_sweep > 0.2:
                last_sweep = now
                # A process here that is not a keeper is an orphan of a job whose keeper was
                # killed: it may not live on. This process's own list of children is read five
                # times a second (reading the whole process table as often cost an idle fork
                # server 2-5% of a core on a busy machine); the whole table, which misses none,
                # every 2 s.
                kids = sandbox.children(me) if now - last_table < 2.0 else None
                if kids is None:
                    last_table = now
                    kids = [pid for pid, ppid in sandbox.process_table().items() if ppid == me]
                for pid in kids:
                    if pid not in jobs and sandbox.alive(pid):
                        sandbox.kill_tree(pid, wait=False)  # reaped by the waitpid above, later
    finally:
        for pid in list(jobs):
            sandbox.kill_tree(pid)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when this ends
    sys.exit(main())
