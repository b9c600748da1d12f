"""A pool of worker subprocesses, and the lock that keeps timing exclusive on a device.

Standard library only. Each worker evaluates one request at a time. The pool enforces a time
limit per phase (import, run, timing) and a host-memory ceiling; a worker that crashes, hangs,
exceeds memory or reports that its state can no longer be trusted is killed with its whole
process group and replaced, and the result says what happened.

Device sharing: correctness runs of several workers may overlap (shared lock); timing takes the
device alone (exclusive lock, writer-preferring), so no other worker's kernels disturb it.
Imports and Triton compilation of other workers go on meanwhile, except where compilation
happens at a kernel's first launch inside a correctness run.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .schema import DeviceInfo, ErrorInfo, EvalRequest, EvalResult, SchemaError, from_dict, to_dict

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_SIGNALS = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGBUS: "a bus error (SIGBUS)",
            signal.SIGABRT: "an abort (SIGABRT)", signal.SIGFPE: "a floating-point exception (SIGFPE)",
            signal.SIGILL: "an illegal instruction (SIGILL)", signal.SIGKILL: "SIGKILL (often the "
            "kernel's out-of-memory killer)"}


class RWLock:
    """Many readers or one writer; a waiting writer blocks new readers."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire_read(self):
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def release_read(self):
        with self._cond:
            self._readers -= 1
            self._cond.notify_all()

    def acquire_write(self):
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True

    def release_write(self):
        with self._cond:
            self._writer = False
            self._cond.notify_all()


def _preexec():  # runs in the child between fork and exec
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass
    try:  # a network namespace of its own: no network at all (needs root or user namespaces)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWNET = 0x40000000
        libc.unshare(CLONE_NEWNET)
    except Exception:
        pass


def _netns() -> str:
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


_PARENT_NETNS = _netns()


class Worker:
    def __init__(self, python: str, env: dict, isolate_network: bool):
        self.scratch = tempfile.mkdtemp(prefix="geak-worker-")
        self.proc = subprocess.Popen(
            [python, "-u", "-m", "runner.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=self.scratch, env=env, start_new_session=True,
            preexec_fn=_preexec if isolate_network else None)
        self.messages: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.log: collections.deque[str] = collections.deque(maxlen=400)
        self.log_count = 0
        self.served = 0
        self.device: Optional[DeviceInfo] = None
        self.netns = ""
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self):
        for raw in self.proc.stdout:
            try:
                self.messages.put(json.loads(raw))
            except json.JSONDecodeError:
                self.log.append(raw.decode("utf-8", "replace").rstrip())
        self.messages.put(None)

    def _read_err(self):
        for raw in self.proc.stderr:
            self.log.append(raw.decode("utf-8", "replace").rstrip()[:2000])
            self.log_count += 1

    def send(self, msg: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def log_since(self, mark: int, limit: int = 60) -> str:
        n = min(self.log_count - mark, len(self.log), limit)
        return "\n".join(list(self.log)[-n:]) if n > 0 else ""

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                s.close()
            except Exception:
                pass
        import shutil
        shutil.rmtree(self.scratch, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc.poll() is None


class PoolError(RuntimeError):
    pass


class WorkerPool:
    def __init__(self, size: int = 2, device: str = "auto", python: Optional[str] = None,
                 env: Optional[dict] = None, start_timeout: float = 180.0,
                 max_requests_per_worker: int = 200, isolate_network: bool = True):
        self.size = max(1, size)
        self.device = device
        self.python = python or sys.executable
        self.extra_env = env or {}
        self.start_timeout = start_timeout
        self.max_requests = max_requests_per_worker
        self.isolate_network = isolate_network
        self._idle: list[Worker] = []
        self._count = 0
        self._cond = threading.Condition()
        self._device_lock = RWLock()
        self._info: Optional[DeviceInfo] = None
        self._closed = False
        self.replaced = 0  # workers killed and replaced (crash, hang, memory, retire)

    # ---------------------------------------------------------------- workers

    def _env(self) -> dict:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["GEAK_DEVICE"] = self.device
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("TRITON_INTERPRET", None)  # the worker decides, from the device it finds
        return env

    def _spawn(self) -> Worker:
        return self._ready(Worker(self.python, self._env(), self.isolate_network))

    def _ready(self, w: Worker) -> Worker:
        """Wait for a started worker's hello (its device), or kill it and say why not."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                msg = w.messages.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                w.kill()
                raise PoolError(f"a worker did not start within {self.start_timeout:.0f} s")
            if msg is None or msg.get("event") == "fatal":
                tail = w.log_since(0, 20)
                w.kill()
                why = msg.get("message") if msg else "it exited"
                extra = f" Is torch installed for {self.python}?" if "No module named" in why or not msg else ""
                raise PoolError(f"a worker could not start: {why}.{extra}\n{tail}".rstrip())
            if msg.get("event") == "hello":
                w.device = from_dict(DeviceInfo, msg["device"])
                try:
                    w.netns = os.readlink(f"/proc/{w.proc.pid}/ns/net")
                except OSError:
                    w.netns = ""
                with self._cond:
                    self._info = self._info or w.device
                return w

    def _acquire(self) -> Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise PoolError("the runner is shut down")
                while self._idle:
                    w = self._idle.pop()
                    if w.alive():
                        return w
                    self._count -= 1
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return self._spawn()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, w: Worker, retire: bool):
        w.served += 1
        if retire or w.served >= self.max_requests or not w.alive():
            w.kill()
            if retire:
                self.replaced += 1
            with self._cond:
                self._count -= 1
                self._cond.notify()
            return
        with self._cond:
            self._idle.append(w)
            self._cond.notify()

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """Start workers now (normally they start on first use) and report the device."""
        # Workers start in parallel, all from this thread: a worker started by the daemon's
        # launcher dies with the thread that started it (the parent-death signal).
        want = min(n or 1, self.size)
        with self._cond:
            while self._idle and not self._idle[-1].alive():
                self._idle.pop()
                self._count -= 1
            new = max(0, min(want - len(self._idle), self.size - self._count))
            self._count += new
        started = []
        try:
            for _ in range(new):
                started.append(Worker(self.python, self._env(), self.isolate_network))
        finally:
            with self._cond:
                self._count -= new - len(started)
        error = None
        for w in started:
            try:
                self._release(self._ready(w), False)
            except PoolError as e:
                error = error or e
                with self._cond:
                    self._count -= 1
                    self._cond.notify()
        if error is not None and self._info is None:
            raise error
        if self._info is None:  # every slot is busy starting: wait for one as a request would
            self._release(self._acquire(), False)
        return self._info

    def device_info(self) -> DeviceInfo:
        return self._info or self.warm(1)

    def close(self):
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for w in idle:
            w.send({"op": "exit"})
            w.kill()

    # ---------------------------------------------------------------- evaluation

    def evaluate(self, req: EvalRequest) -> EvalResult:
        t0 = time.monotonic()
        try:
            w = self._acquire()
        except PoolError as e:
            return EvalResult(status="crashed", correct=False, id=req.id, message=str(e).splitlines()[0],
                              error=ErrorInfo(kind="runner_unavailable", side="harness", message=str(e),
                                              hint="check the runner's Python environment and device"))
        mark = w.log_count
        held: Optional[str] = None
        gpu = w.device is not None and w.device.backend != "interpreter"
        limits = req.options.limits
        phase, deadline, where = "start", time.monotonic() + 60.0, ""
        run_deadline = deadline
        since, spent = time.monotonic(), {}  # seconds per phase, and waiting for the device lock

        def release_lock():
            nonlocal held
            if held == "run":
                self._device_lock.release_read()
            elif held == "timing":
                self._device_lock.release_write()
            held = None

        def fail(status: str, kind: str, message: str, hint: Optional[str] = None) -> EvalResult:
            release_lock()
            log = w.log_since(mark)
            w.kill()
            self.replaced += 1
            with self._cond:
                self._count -= 1
                self._cond.notify()
            return EvalResult(status=status, correct=False, id=req.id, message=message, device=w.device,
                              error=ErrorInfo(kind=kind, side="candidate" if "candidate" in where else
                                              ("reference" if "reference" in where else "harness"),
                                              message=message, hint=hint, traceback=log or None),
                              log=log, duration_s=round(time.monotonic() - t0, 3))

        if not w.send({"op": "eval", "request": to_dict(req)}):
            return fail("crashed", "worker_died", "the worker went away before the request reached it")
        try:
            while True:
                try:
                    msg = w.messages.get(timeout=0.2)
                except queue.Empty:
                    msg = False
                now = time.monotonic()
                if msg is False:
                    if now > deadline:
                        limit = {"import": limits.import_s, "run": limits.run_s, "compile": limits.run_s,
                                 "timing": limits.timing_s}.get(phase, 60.0)
                        return fail("timeout", "timeout",
                                    f"timed out after {limit:g} s in the {phase} phase{where}; the worker "
                                    "was killed and replaced",
                                    hint="an endless loop or a kernel that never finishes? raise "
                                         "limits in [tool.geak] if the work is just long")
                    rss = w.rss_mb()
                    if rss > limits.memory_mb:
                        return fail("crashed", "host_oom",
                                    f"used {rss:.0f} MB of host memory (limit {limits.memory_mb} MB) in "
                                    f"the {phase} phase{where}; the worker was killed and replaced")
                    continue
                if msg is None:  # the worker died
                    try:
                        code = w.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        code = None
                    if code is not None and code < 0:
                        sig = -code
                        what = _SIGNALS.get(sig, f"signal {sig}")
                        kind = "segfault" if sig in (signal.SIGSEGV, signal.SIGBUS) else \
                            ("host_oom" if sig == signal.SIGKILL else "worker_died")
                    else:
                        what, kind = f"exit code {code}", "worker_died"
                    return fail("crashed", kind, f"the worker died with {what} in the {phase} "
                                f"phase{where}; it was replaced",
                                hint="out-of-bounds loads or stores crash the interpreter; check masks"
                                if kind == "segfault" else None)
                ev = msg.get("event")
                if ev == "phase":
                    release_lock()
                    now = time.monotonic()
                    spent[phase] = spent.get(phase, 0.0) + now - since
                    previous, phase = phase, msg["phase"]
                    if phase == "compile" or previous == "compile":
                        # A Triton compile inside the run phase, off the device lock: it counts
                        # toward the run phase's limit, and the case being run stays named.
                        deadline = run_deadline
                    else:
                        where = ""
                        limit = {"import": limits.import_s, "run": limits.run_s,
                                 "timing": limits.timing_s}[phase]
                        deadline = now + limit
                        if phase == "run":
                            run_deadline = deadline
                    if gpu and phase == "run":
                        self._device_lock.acquire_read()
                        held = "run"
                    elif gpu and phase == "timing":
                        self._device_lock.acquire_write()
                        held = "timing"
                    since = time.monotonic()
                    if since - now > 0.001:
                        spent["device_wait"] = spent.get("device_wait", 0.0) + since - now
                    if phase in ("run", "timing") and not w.send({"grant": True}):
                        return fail("crashed", "worker_died", "the worker went away")
                elif ev == "at":
                    where = f" (running the {msg.get('side')} on case '{msg.get('case')}')"
                elif ev == "result":
                    release_lock()
                    try:
                        result = from_dict(EvalResult, msg["result"])
                    except SchemaError as e:
                        self._release(w, True)
                        return EvalResult(status="crashed", correct=False, id=req.id,
                                          message=f"the worker sent a malformed result: {e}")
                    result.log = w.log_since(mark)
                    spent[phase] = spent.get(phase, 0.0) + time.monotonic() - since
                    result.phases = {k: round(v, 3) for k, v in spent.items() if k != "start" and v > 0}
                    if w.netns and w.netns != _PARENT_NETNS:
                        result.sandbox["network"] = "isolated (own network namespace)"
                    else:
                        result.sandbox["network"] = "not isolated (needs root or user namespaces)"
                    self._release(w, bool(msg.get("retire")))
                    return result
        except BaseException:
            release_lock()
            w.kill()
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

