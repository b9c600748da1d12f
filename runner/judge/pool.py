"""The pool of worker processes for evaluations (the processes themselves: ``runner.judge.process``;
the lock that keeps timing exclusive on a device: ``runner.judge.locks``).

Standard library only. Every evaluation runs in two workers forked by the fork server
(``runner.worker.zygote``): a *reference* worker that never imports candidate code and judges, and a
*candidate* worker that runs the candidate and is used for that one evaluation only. Spare
workers (torch and triton imported, CUDA context up, no user code yet) wait ready, so a fresh
process costs no start-up latency. A reference worker whose evaluation went cleanly may serve
the next evaluation of the same reference (same files, target and options).

The pool enforces a time limit per stage (import, run, timing; waits for the device lock do
not count) and a host-memory ceiling over each job's whole process tree; a job that crashes,
hangs or exceeds memory is killed with everything it started (``runner.sandbox``), and the
result says what happened. The conversation with the two workers and the verdict are in
``runner.judge.session`` and ``runner.judge.verdict``.

Device sharing: correctness work of several workers may overlap (shared lock); timing takes the
device alone (exclusive lock, writer-preferring). A Triton compile inside an op is announced
and runs off the lock.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import queue
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .. import sandbox
from .locks import RWLock
from .process import Budget, WorkerProcess, PoolError, Stopped, promote_compiles
from ..schema import DeviceInfo, ErrorInfo, EvalRequest, EvalResult, Limits, from_dict, to_dict
from .session import Evaluation

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
"""The folder that holds this ``runner`` package: first on the fork server's path, so that its
workers run the same runner as the pool, whatever else the environment would import."""
REFERENCE_USES = 100  # evaluations one reference worker may serve
DESCRIBED_KEPT = 64  # reference digests whose input cases' descriptions the pool keeps
REST_WAIT_S = 15.0  # the longest an evaluation waits for its reference worker to finish resting
POOL_PREFIX = "geak-pool-"
# Environment variables that never reach a worker (with every *_API_KEY, *_TOKEN, *_SECRET).
SECRET_ENV = {"GEAK_RUNNER_TOKEN", "RAY_AUTH_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
              "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "GITHUB_TOKEN"}
REFERENCE_STATE = ("seed", "cases", "device", "unit", "interpreter_max_elements")
"""The options a reference worker's loaded state depends on: its input cases and their draws."""


# --------------------------------------------------------------------------- the fork server


class ForkServer:
    def __init__(self, pool: "WorkerPool", device: Optional[str] = None):
        """``device``: the pool's (its workers), or "compile" (compile workers, ``WorkerPool.compile``)."""
        self.pool = pool
        self.main = device is None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        env = pool._env()
        self.proc = subprocess.Popen(
            [pool.python, "-m", "runner.worker.zygote", str(theirs.fileno()), device or pool.device,
             "1" if pool.isolate else "0"],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env, cwd=pool.root, start_new_session=True)
        theirs.close()
        self.log: collections.deque[str] = collections.deque(maxlen=200)
        self.ready = threading.Event()
        self.info: dict = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_err(self):
        for raw in self.proc.stderr:
            self.log.append(raw.decode("utf-8", "replace").rstrip()[:2000])

    def _read(self):
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                break
            if not data:
                break
            try:
                msg = json.loads(data)
            except ValueError:
                continue
            ev = msg.get("event")
            if ev in ("ready", "fatal"):
                self.info = msg
                if ev == "ready" and self.main:
                    self.pool.sandbox_facts = dict(msg.get("sandbox") or {})
                    self.pool.confined = bool(msg.get("confined"))
                self.ready.set()
            elif ev == "spawned":
                job = self.pool._jobs.get(msg.get("job"))
                if job is not None:
                    job.keeper = int(msg["pid"])
                    job.messages.put({"event": "_spawned"})
            elif ev == "exited":
                job = self.pool._jobs.get(msg.get("job"))
                if job is not None:
                    job.messages.put({"event": "_exited", "code": msg.get("code"), "signal": msg.get("signal")})
        self.info = self.info or {"event": "fatal", "message": "the fork server exited"}
        self.ready.set()
        for job in list(self.pool._jobs.values()):
            job.messages.put({"event": "_exited", "code": None, "signal": None})

    def wait_ready(self, timeout: float) -> dict:
        if not self.ready.wait(timeout):
            raise PoolError(f"the worker fork server did not start within {timeout:.0f} s")
        if self.info.get("event") != "ready":
            tail = "\n".join(list(self.log)[-20:])
            why = self.info.get("message", "it exited")
            extra = f" Is torch installed for {self.pool.python}?" if "No module named" in why + tail else ""
            raise PoolError(f"a worker could not start: {why}.{extra}\n{tail}".rstrip())
        return self.info

    def spawn(self, job: WorkerProcess) -> None:
        msg = json.dumps({"op": "spawn", "job": job.number, "scratch": job.scratch}).encode()
        child_sock, err_w = job.child_fds
        with self.lock:
            socket.send_fds(self.sock, [msg], [child_sock.fileno(), err_w])
        child_sock.close()
        os.close(err_w)
        job.child_fds = ()

    def alive(self) -> bool:
        return self.proc.poll() is None and not (self.ready.is_set() and self.info.get("event") != "ready")

    def close(self) -> None:
        try:
            self.sock.send(json.dumps({"op": "exit"}).encode())
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------- the pool


def effective_limits(asked: Optional[Limits], ceiling: Optional[Limits]) -> Limits:
    """There is no "no limit": a missing, non-finite or non-positive limit means the ceiling (or
    the default), and with ceilings (a daemon's) a request may lower a limit, never raise it."""
    import dataclasses
    import math
    out, default = Limits(), Limits()
    for f in dataclasses.fields(Limits):
        top = getattr(ceiling, f.name) if ceiling is not None else None
        v = getattr(asked, f.name, None) if asked is not None else None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        value = v if ok else (top if top is not None else getattr(default, f.name))
        if top is not None:
            value = min(value, top)
        setattr(out, f.name, type(getattr(default, f.name))(value))
    return out


def reference_digest(req: EvalRequest) -> str:
    """What a loaded reference worker's state depends on: the reference tree, the target, and the
    options that decide its input cases (``REFERENCE_STATE``). The others (trials, timing,
    tolerances, limits, compile reports, the candidate's) come with each evaluation's ``attach``,
    so that a tuner's screens, runs and confirmation, each with options of its own, share the
    worker and what it has already computed."""
    opts = to_dict(req.options)
    kept = {k: opts.get(k) for k in REFERENCE_STATE}
    blob = json.dumps({"files": req.files, "target": to_dict(req.target), "options": kept}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def sweep_stale_roots(tmp: Optional[str] = None) -> int:
    """Delete the scratch roots of pools whose process is gone (a pool killed with -9)."""
    tmp = tmp or tempfile.gettempdir()
    n = 0
    try:
        names = os.listdir(tmp)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(POOL_PREFIX):
            continue
        try:
            pid = int(name[len(POOL_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if not sandbox.alive(pid):
            _remove_root(os.path.join(tmp, name))
            n += 1
    return n


def _remove_root(path: str) -> None:
    """Delete a pool's root; never through a link (another user could plant one in /tmp under
    a pool's name, pointing at a folder of yours), nor one owned by another user."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return
    try:
        os.chmod(path, 0o700)  # the root is not listable while workers run (see WorkerPool)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


class WorkerPool:
    def __init__(self, size: int = 2, device: str = "auto", python: Optional[str] = None,
                 env: Optional[dict] = None, start_timeout: float = 180.0, isolate_network: bool = True,
                 spares: Optional[int] = None, max_limits: Optional[Limits] = None,
                 hide: tuple[str, ...] = ()):
        self.size = max(1, size)
        self.device = device
        self.python = python or sys.executable
        self.extra_env = env or {}
        self.start_timeout = start_timeout
        self.isolate = isolate_network
        self._spares_asked = spares
        self.max_limits = max_limits  # the runner's ceilings (a daemon's); None: the request's own
        # What no job may see besides the pool's root: a daemon's state directory and token file.
        self.hide = tuple(os.path.abspath(h) for h in hide if h)
        self.sandbox_facts: dict[str, str] = {}  # the fork server's self-test, in words
        self.confined: Optional[bool] = None  # whether jobs get the sandbox's view of the files
        sweep_stale_roots()
        self.root = tempfile.mkdtemp(prefix=f"{POOL_PREFIX}{os.getpid()}-")
        self._cond = threading.Condition()
        self._jobs: dict[int, WorkerProcess] = {}
        self._numbers = 0
        self._spares: list[WorkerProcess] = []
        self._starting = 0
        # Reference workers kept for their next evaluation: digest -> those at rest (oldest
        # first), least recently used digest first; at most ``size`` in all, so that evaluations
        # of one reference run side by side (a tuner's batch) each find one loaded.
        self._refs: collections.OrderedDict[str, list[WorkerProcess]] = collections.OrderedDict()
        self._resting: dict[str, int] = {}  # digest -> reference workers still giving back memory
        self._described: collections.OrderedDict[str, list] = collections.OrderedDict()
        """digest -> the input cases as the first reference worker of that digest described them
        (``described``), the most recent ``DESCRIBED_KEPT``."""
        self._server: Optional[ForkServer] = None
        self._compiler: Optional[ForkServer] = None  # compile workers' fork server, started on first use
        self._compile_spare: Optional[WorkerProcess] = None
        self._info: Optional[DeviceInfo] = None
        self._closed = False
        self._slots = threading.Semaphore(self.size)
        self.device_lock = RWLock()
        self.replaced = 0
        # Workers may not list the root (they run without the capabilities that override file
        # modes): each reaches only the directories whose random names it is given.
        os.chmod(self.root, 0o300)
        # Triton's shared compile layer: written by the pool alone (runner.tcache).
        self.compile_cache = os.path.join(self.root, "tc-" + os.urandom(12).hex())
        os.mkdir(self.compile_cache, 0o755)
        self._server_requests: "queue.Queue[Optional[tuple[str, threading.Event]]]" = queue.Queue()
        threading.Thread(target=self._monitor, daemon=True).start()
        threading.Thread(target=self._server_keeper, daemon=True).start()

    # ----------------------------------------------------------------- environment

    def _env(self) -> dict:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["GEAK_DEVICE"] = self.device
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        env["GEAK_TRITON_SHARED_CACHE"] = self.compile_cache
        env["GEAK_POOL_ROOT"] = self.root
        env["GEAK_SANDBOX_HIDE"] = os.pathsep.join(self.hide)
        env["GEAK_SANDBOX_TMP_MB"] = str((self.max_limits or Limits()).memory_mb)
        env.pop("TRITON_INTERPRET", None)  # the fork server decides, from the device it finds
        for name in list(env):  # the runner's secrets are not the job's to read
            if name in SECRET_ENV or name.endswith(("_API_KEY", "_TOKEN", "_SECRET")):
                del env[name]
        return env

    def _forget(self, job: WorkerProcess) -> None:
        with self._cond:
            self._jobs.pop(job.number, None)

    # ----------------------------------------------------------------- workers

    def _server_keeper(self) -> None:
        """Starts the fork servers, always from this one long-lived thread: a launcher that sets
        the parent-death signal (the daemon's) ties the server's life to the thread that started
        it, which must not be a short-lived request thread."""
        while True:
            got = self._server_requests.get()
            if got is None:
                return
            kind, done = got
            attr = "_server" if kind == "main" else "_compiler"
            with self._cond:
                current = getattr(self, attr)
                if not self._closed and (current is None or not current.alive()):
                    setattr(self, attr, None)
                    if current is not None:
                        current.close()
                    try:
                        setattr(self, attr, ForkServer(self, None if kind == "main" else kind))
                    except OSError as e:
                        self._server_error = e
            done.set()

    def _server_ready(self, kind: str = "main") -> ForkServer:
        attr = "_server" if kind == "main" else "_compiler"
        with self._cond:
            if self._closed:
                raise PoolError("the runner is shut down")
            server = getattr(self, attr)
        if server is None or not server.alive():
            done = threading.Event()
            self._server_requests.put((kind, done))
            done.wait()
            with self._cond:
                server = getattr(self, attr)
            if server is None:
                raise PoolError(f"could not start the worker fork server: {getattr(self, '_server_error', '')}")
        server.wait_ready(self.start_timeout)
        return server

    def _spawn(self, kind: str = "main") -> WorkerProcess:
        """Fork a worker and wait for its hello (its device, its sandbox)."""
        server = self._server_ready(kind)
        with self._cond:
            self._numbers += 1
            job = WorkerProcess(self, self._numbers)
            self._jobs[job.number] = job
        try:
            server.spawn(job)
            deadline = time.monotonic() + self.start_timeout
            while True:
                try:
                    m = job.messages.get(timeout=max(0.05, deadline - time.monotonic()))
                except queue.Empty:
                    raise PoolError(f"a worker did not start within {self.start_timeout:.0f} s") from None
                if m is None or m.get("event") in ("fatal", "_exited"):
                    tail = job.log_since(0, 20)
                    why = (m or {}).get("message") or "it exited"
                    raise PoolError(f"a worker could not start: {why}\n{tail}".rstrip())
                if m.get("event") == "hello":
                    job.device = from_dict(DeviceInfo, m["device"])
                    job.device.sandbox = dict(self.sandbox_facts)
                    job.facts = dict(m.get("sandbox") or {})
                    job.pid = job.find_worker()
                    pid = job.worker_pid()
                    job.netns = sandbox.namespace(pid, "net") if pid else ""
                    if kind != "main":
                        return job
                    with self._cond:
                        self._info = self._info or job.device
                    if job.device.is_gpu:
                        self._warm(job)
                        # No user code has run there yet: its warm-up's compiles
                        from ..tcache import WARM  # (not at the top: it imports triton where it can)
                        promote_compiles(job, self.compile_cache, WARM)  # spare the next spares theirs
                    return job
        except BaseException:
            job.close()
            raise

    def _warm(self, job: WorkerProcess) -> None:
        """A fresh worker's warm-up (``runner.worker.warmup.gpu_part``), one part per ``warm`` op,
        each holding the device lock for reading, as any op that runs kernels does: the warm-up's
        kernels are on the GPU that another evaluation may be timing, and timing takes the lock
        alone. A timing that asks meanwhile waits for the part in hand (milliseconds), not for
        the whole warm-up. What the ops cost is the spare's, not an evaluation's: its counts are
        zeroed after. Only GPU workers are asked (a CPU worker has nothing to warm)."""
        part = 0
        try:
            while True:
                reply = job.call({"op": "warm", "part": part}, "read", Budget(self.start_timeout))
                if reply.get("failure") or not reply.get("more"):
                    break
                part += 1
        except Stopped as e:
            why = f"{e.kind}: {e.message}" if e.message else e.kind
            raise PoolError(f"a worker could not start: it stopped during its warm-up ({why})") from None
        finally:
            job.new_evaluation()

    @property
    def target_spares(self) -> int:
        """Spare workers kept started: ``spares`` if given; else ``size``, and on a GPU up to
        four more. A single-use candidate worker takes 0.43-0.51 s to start on an H100 (fork,
        sandbox, CUDA context, warm-up) and an evaluation of a small kernel about 0.2 s: with
        only ``size`` starting at a time, back-to-back evaluations waited 36-62 ms for each one.
        (On the CPU a worker starts in a fraction of that, and more at once would take the
        cores the evaluations use.)"""
        if self._spares_asked is not None:
            return self._spares_asked
        gpu = self._info is not None and self._info.is_gpu
        return self.size + (min(self.size, 4) if gpu else 0)

    def _fill(self) -> None:
        """Keep spares ready (in a background thread)."""
        while True:
            with self._cond:
                if self._closed or len(self._spares) + self._starting >= self.target_spares:
                    return
                self._starting += 1
            try:
                job = self._spawn()
            except PoolError:
                with self._cond:
                    self._starting -= 1
                    self._cond.notify_all()
                return
            with self._cond:
                self._starting -= 1
                if self._closed:
                    job.close()
                    return
                self._spares.append(job)
                self._cond.notify_all()

    def _refill(self) -> None:
        threading.Thread(target=self._fill, daemon=True).start()

    def _take_spare(self) -> WorkerProcess:
        with self._cond:
            while self._spares:
                job = self._spares.pop(0)
                if job.alive():
                    break
                job.close()
            else:
                job = None
        self._refill()
        if job is None:
            job = self._spawn()
        return job

    def described(self, digest: str) -> Optional[list]:
        """The cases a reference worker of ``digest`` described, if one has: a new reference
        worker of the same digest is given them instead of drawing every case to describe it."""
        with self._cond:
            return self._described.get(digest)

    def remember_cases(self, digest: str, cases: list) -> None:
        with self._cond:
            self._described[digest] = cases
            self._described.move_to_end(digest)
            while len(self._described) > DESCRIBED_KEPT:
                self._described.popitem(last=False)

    def _take_reference(self, digest: str) -> WorkerProcess:
        with self._cond:
            # A reference worker of this digest still giving back what it held: it is ready
            # sooner than a new one would load.
            end = time.monotonic() + REST_WAIT_S
            while (not self._refs.get(digest) and self._resting.get(digest) and not self._closed
                   and time.monotonic() < end):
                self._cond.wait(max(0.0, end - time.monotonic()))
            kept = self._refs.get(digest)
            job = kept.pop() if kept else None
            if kept is not None and not kept:
                del self._refs[digest]
        if job is not None and job.alive():
            return job
        if job is not None:
            job.close()
        job = self._take_spare()
        job.digest = digest
        return job

    def _return_reference(self, job: WorkerProcess) -> None:
        """After an evaluation: the reference worker is kept for the next evaluation of the
        same reference once it has given back what it holds (its records, cached device memory).
        That happens after the result is returned, in a thread of its own, holding the device
        lock for reading so that it never overlaps a timing run."""
        if not job.clean or job.uses >= REFERENCE_USES or not job.alive() or job.loaded is None or self._closed:
            job.close()
            return
        job.wait_until = None  # the next evaluation sets its own
        with self._cond:
            self._resting[job.digest] = self._resting.get(job.digest, 0) + 1
        threading.Thread(target=self._rest, args=(job,), daemon=True).start()

    def _rest(self, job: WorkerProcess) -> None:
        try:
            self._keep_reference(job)
        finally:
            with self._cond:
                n = self._resting.pop(job.digest, 1) - 1
                if n > 0:
                    self._resting[job.digest] = n
                self._cond.notify_all()

    def _keep_reference(self, job: WorkerProcess) -> None:
        try:
            reply = job.call({"op": "rest"}, "read", Budget(10.0))
        except Stopped:
            reply = {"failure": {}}
        if "failure" in reply or self._closed:
            job.close()
            return
        with self._cond:
            self._refs.setdefault(job.digest, []).append(job)
            self._refs.move_to_end(job.digest)
            evict = []
            while sum(len(v) for v in self._refs.values()) > self.size:
                digest, kept = next(iter(self._refs.items()))
                evict.append(kept.pop(0))
                if not kept:
                    del self._refs[digest]
        for j in evict:
            j.close()

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """Start the fork server and spare workers now (normally on first use); the device."""
        want = min(max(n or 1, 1), self.target_spares)
        started = []
        with self._cond:
            need = max(0, want - len(self._spares) - self._starting)
        threads = [threading.Thread(target=lambda: started.append(self._safe_spawn())) for _ in range(need)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [s for s in started if isinstance(s, PoolError)]
        with self._cond:
            for s in started:
                if isinstance(s, WorkerProcess):
                    self._spares.append(s)
            self._cond.notify_all()
        if self._info is None:
            if errors:
                raise errors[0]
            self._spares.append(self._spawn())
        return self._info

    def _safe_spawn(self):
        try:
            return self._spawn()
        except PoolError as e:
            return e

    def compile(self, request: dict, budget: Budget) -> list[dict]:
        """The ahead-of-time compiles a CPU worker cannot make (``runner.aot.compile_request``:
        the candidate tree and the launches to compile), in a compile worker: a job of a second
        fork server that imported triton for compiling, sandboxed like every worker and used
        once. What it reports is a claim, as the candidate's own report was: it prunes a
        tuner's configs and is shown, it never makes a verdict. One report dict per job."""
        jobs = request.get("jobs") if isinstance(request, dict) else None
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            return []

        def failed(why: str) -> list[dict]:
            return [{"kernel": str(j.get("kernel", "")), "arch": str(j.get("arch", "")), "num_warps": 0,
                     "num_stages": 0, "fits": False, "error": why[:300], "variant": j.get("variant")}
                    for j in jobs]
        with self._cond:
            job, self._compile_spare = self._compile_spare, None
        try:
            if job is None or not job.alive():
                if job is not None:
                    job.close()
                job = self._spawn("compile")
        except PoolError as e:
            return failed(f"ahead-of-time compile could not start: {str(e).splitlines()[0]}")
        threading.Thread(target=self._spare_compiler, daemon=True).start()
        try:
            reply = job.call({"op": "compile", "files": request.get("files"), "jobs": jobs}, None, budget)
        except Stopped as e:
            return failed(f"ahead-of-time compile stopped: {e.kind} {e.message}".strip())
        finally:
            job.close()
        if "failure" in reply:
            return failed(f"ahead-of-time compile failed: {reply['failure'].get('message', '')}")
        out = reply.get("resources")
        return out if isinstance(out, list) and len(out) == len(jobs) else failed(
            "ahead-of-time compile gave no report per launch")

    def _spare_compiler(self) -> None:
        """One compile worker forked ahead of the next compile."""
        try:
            job = self._spawn("compile")
        except PoolError:
            return
        with self._cond:
            if self._compile_spare is None and not self._closed:
                self._compile_spare, job = job, None
        if job is not None:
            job.close()

    def device_info(self) -> DeviceInfo:
        return self._info or self.warm(1)

    def close(self):
        with self._cond:
            self._closed = True
            jobs = list(self._jobs.values())
            servers = [x for x in (self._server, self._compiler) if x is not None]
            self._server = self._compiler = self._compile_spare = None
            self._spares, self._refs = [], collections.OrderedDict()
            self._cond.notify_all()
        for j in jobs:
            j.close()
        for server in servers:
            server.close()
        self._server_requests.put(None)
        _remove_root(self.root)

    # ----------------------------------------------------------------- memory watch

    def _monitor(self):
        while not self._closed:
            time.sleep(0.25)
            with self._cond:
                jobs = [j for j in self._jobs.values() if j.memory_limit_mb and j.keeper and j.killed is None]
            if not jobs:
                continue
            table = sandbox.process_table()
            for j in jobs:
                limit, keeper = j.memory_limit_mb, j.keeper
                if not limit or not keeper:
                    continue
                mb = sandbox.job_memory_mb(keeper, sandbox.descendants(keeper, table))
                if mb > limit:
                    j.kill("host_oom", f"used {mb:.0f} MB of host memory (limit {limit:.0f} MB, "
                                       f"counted over all its processes)")

    # ----------------------------------------------------------------- evaluation

    def evaluate(self, req: EvalRequest) -> EvalResult:
        import dataclasses
        t0 = time.monotonic()
        # The options are resolved for this evaluation (unit, limits): a copy, since callers
        # share one options record between requests.
        req = dataclasses.replace(req, options=dataclasses.replace(req.options))
        wait_s = effective_limits(req.options.limits, self.max_limits).wait_s
        if not self._slots.acquire(timeout=wait_s):
            return EvalResult(status="timeout", correct=False, id=req.id,
                              message=f"waited {wait_s:g} s for a free worker slot (limits.wait_s); the runner "
                                      "was busy with other evaluations",
                              error=ErrorInfo(kind="wait", side="harness",
                                              message=f"no worker slot within {wait_s:g} s",
                                              hint="fewer evaluations at once, more --workers, or a longer "
                                                   "limits.wait_s"),
                              duration_s=round(time.monotonic() - t0, 3))
        slot_s = time.monotonic() - t0
        try:
            try:
                ref = self._take_reference(reference_digest(req))
                cand = self._take_spare()
            except PoolError as e:
                return EvalResult(status="crashed", correct=False, id=req.id, message=str(e).splitlines()[0],
                                  error=ErrorInfo(kind="runner_unavailable", side="harness", message=str(e),
                                                  hint="check the runner's Python environment and device"))
            req.options.limits = effective_limits(req.options.limits, self.max_limits)
            lim = req.options.limits
            ref.wait_until = cand.wait_until = t0 + min(lim.wait_s, lim.total_s)
            # Each side has an exchange directory in its own scratch (the only place it can
            # write); the session moves what one side hands the other (Evaluation.relay).
            name = "x-" + os.urandom(12).hex()
            xdirs = (os.path.join(ref.scratch, name), os.path.join(cand.scratch, name))
            for d in xdirs:
                os.mkdir(d, 0o700)
            try:
                result = Evaluation(self, req, ref, cand, xdirs, started=t0).run()
            finally:
                if req.candidate is None:  # the target against itself: no candidate code ran there
                    promote_compiles(cand, self.compile_cache, ref.digest)
                cand.close()
                shutil.rmtree(xdirs[0], ignore_errors=True)
                self._return_reference(ref)
            result.duration_s = round(time.monotonic() - t0, 3)
            if slot_s > 0.001:
                result.phases["slot_wait"] = round(slot_s, 3)
            return result
        finally:
            self._slots.release()
