"""One evaluation's worker processes: a ``WorkerProcess`` (a worker the fork server made, the
conversation over its socket, its exchange directory, its limits and how it ended), the time
``Budget`` of an evaluation, and what the two sides may hand each other. Standard library only.
The pool (``runner.judge.pool``) makes and keeps them; the session (``runner.judge.session``) talks through
them."""

from __future__ import annotations

import array
import collections
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import socket
import stat
import struct
import threading
import time
from typing import Optional

from .. import sandbox
from ..schema import DeviceInfo

SIGNALS = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGBUS: "a bus error (SIGBUS)",
            signal.SIGABRT: "an abort (SIGABRT)", signal.SIGFPE: "a floating-point exception (SIGFPE)",
            signal.SIGILL: "an illegal instruction (SIGILL)", signal.SIGKILL: "SIGKILL (often the "
            "kernel's out-of-memory killer)"}


MAX_LINE = 64 << 20  # a message longer than this from a worker is a protocol violation


# What the two sides of an evaluation hand each other through their exchange directories
# (``Evaluation.relay``): the reference's inputs, timing inputs and autotune choices, and the
# candidate's outputs. Nothing else crosses.
FROM_REFERENCE = ("in-", "time-", "autotune.json")


FROM_CANDIDATE = ("out-",)


class PoolError(RuntimeError):
    pass


MAX_FDS = 64
"""The most shared-memory files one message carries (``runner.worker.channel.MAX_FDS``)."""
_NAME = re.compile(r"[a-z][a-z0-9_]{0,23}")
MAX_STEPS = 16
"""Step names kept from one reply (``WorkerProcess.note_steps``)."""


SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def sealed(fd: int) -> bool:
    """Whether ``fd`` is a memfd that nothing can write, grow or shrink any more."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS and stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _device_part(name: str, fd: int) -> bool:
    """Whether ``fd``, handed as ``name``, may pass as a device part: named as one, and no
    regular file or folder (an exported allocation is neither; its reader imports it through the
    GPU driver, which refuses anything else)."""
    head, _, k = name.rpartition(".dev")
    if not head or not k.isdigit():
        return False
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


class Stopped(Exception):
    """A job ended during an op: it died, timed out, or was killed for memory."""

    def __init__(self, kind: str, message: str, job: "WorkerProcess"):
        super().__init__(message)
        self.kind, self.message, self.job = kind, message, job


class WorkerProcess:
    """The pool's handle on one forked worker (and the process tree below its keeper)."""

    def __init__(self, pool: "WorkerPool", number: int):
        self.pool = pool
        self.number = number
        self.scratch = os.path.join(pool.root, os.urandom(12).hex())
        os.mkdir(self.scratch, 0o700)
        self.sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Every message carries its sender's pid, checked by the kernel (SCM_CREDENTIALS): a
        # reply counts only from the worker's own process (see _read_out).
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sender: Optional[int] = None  # the worker's pid, from its first message
        self._fd_queue: list[int] = []  # shared-memory files received, not yet named by a message
        self.outbox: dict[str, int] = {}  # what the worker handed over (Evaluation.relay passes it on)
        self.inbox: dict[str, int] = {}  # what the other side handed it, sent with its next op
        err_r, err_w = os.pipe()
        self.child_fds = (child_sock, err_w)
        self.err = os.fdopen(err_r, "rb", buffering=0)
        self.messages: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.log: collections.deque[str] = collections.deque(maxlen=400)
        self.log_count = 0
        self.keeper: Optional[int] = None
        self.pid: Optional[int] = None  # the worker (below the keeper, and an init in its PID namespace)
        self.device: Optional[DeviceInfo] = None
        self.facts: dict = {}
        self.netns = ""
        self.exited: Optional[dict] = None
        self.killed: Optional[tuple[str, str]] = None
        self.memory_limit_mb: Optional[float] = None
        self.uses = 0
        self.loaded: Optional[dict] = None  # a reference worker's answer to "load"
        self.digest = ""
        self.clean = True
        self.new_evaluation()
        self._held_since = 0.0
        self.wait_until: Optional[float] = None  # the latest it may still wait for the device lock
        self.started = time.monotonic()
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def new_evaluation(self) -> None:
        """Zero what is counted per evaluation: a reference worker serves many in turn."""
        self.where = ""
        self.compile_s = 0.0  # seconds in announced compiles
        self.wait_s = 0.0  # seconds waiting for the device lock
        self.held_s = {"read": 0.0, "write": 0.0}  # seconds holding it, by kind
        self.op_s: dict[str, float] = {}  # seconds per op, from sending it to its reply (lock waits not counted)
        self.step_s: dict[str, float] = {}  # "op.step" -> seconds, as the worker timed its steps

    def note_steps(self, op: str, steps) -> None:
        """Add the seconds a reply says each step of ``op`` took (``channel.step``). What a
        candidate's worker says is a claim: only a few short lowercase names with finite,
        non-negative seconds are kept, and they go into ``phases``, which no verdict reads."""
        if not isinstance(steps, dict) or not _NAME.fullmatch(op):
            return
        for name, v in list(steps.items())[:MAX_STEPS]:
            if isinstance(name, str) and _NAME.fullmatch(name) and isinstance(v, (int, float)) \
                    and not isinstance(v, bool) and 0.0 <= v < 1e6:
                key = f"{op}.{name}"
                self.step_s[key] = self.step_s.get(key, 0.0) + float(v)

    # ----------------------------------------------------------------- pipes

    def _read_out(self):
        """Messages from the worker, one JSON line each. The kernel says which process sent each
        piece (it never joins the data of two senders in one read): the first message (the
        worker's hello) fixes the worker's pid, and data from any other process — a child or an
        orphan of the job holding a copy of the socket — ends the job as a protocol violation."""
        buf = bytearray()
        space = socket.CMSG_SPACE(struct.calcsize("iII")) + socket.CMSG_SPACE(MAX_FDS * 4)
        try:
            while True:
                data, anc, _, _ = self.sock.recvmsg(1 << 20, space)
                for lvl, typ, d in anc:
                    if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                        fds = array.array("i")
                        fds.frombytes(d[:len(d) - len(d) % fds.itemsize])
                        self._fd_queue.extend(fds)
                if not data:
                    break
                pid = next((struct.unpack("iII", d[:12])[0] for lvl, typ, d in anc
                            if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS), None)
                if self.sender is None:
                    self.sender = pid
                elif pid != self.sender:
                    self.kill("protocol", f"a message on the worker's channel came from another process (pid "
                                          f"{pid}, the worker is {self.sender}): something the code started "
                                          "tried to answer for the worker")
                    break
                buf += data
                while True:
                    end = buf.find(b"\n")
                    if end < 0:
                        break
                    raw = bytes(buf[:end])
                    del buf[:end + 1]
                    try:
                        msg = json.loads(raw)
                    except ValueError:
                        self.log.append(raw.decode("utf-8", "replace").rstrip()[:2000])
                        continue
                    if isinstance(msg, dict) and "fds" in msg and not self._take_fds(msg):
                        break
                    self.messages.put(msg)
                if len(self._fd_queue) > MAX_FDS:
                    self.kill("protocol", "the worker sent shared-memory files no message named")
                    break
                if len(buf) >= MAX_LINE:
                    self.kill("protocol", "the worker sent a message of more than 64 MB")
                    break
        except (OSError, ValueError):
            pass
        self.messages.put(None)

    def _take_fds(self, msg: dict) -> bool:
        """The shared-memory files a reply hands over (its "fds" names, in the order sent) go
        to ``outbox``; each must be a memfd sealed against any change (``exchange.SEALS``),
        else it is dropped (the other side finds it not written). A device part
        (named as ``exchange.part_name`` names them: GPU memory exported by the driver, ``runner.worker.devmem``)
        cannot be sealed: its reader only imports it through the driver, maps it read-only and
        copies it at once, and reads nothing else from it. False: a protocol breach."""
        names = msg.pop("fds")
        if not isinstance(names, list) or len(names) > MAX_FDS or len(names) > len(self._fd_queue):
            self.kill("protocol", "a message named shared-memory files it did not carry")
            return False
        for name in names:
            fd = self._fd_queue.pop(0)
            if not isinstance(name, str) or not (sealed(fd) or _device_part(name, fd)):
                os.close(fd)
                continue
            old = self.outbox.pop(name, None)
            if old is not None:
                os.close(old)
            self.outbox[name] = fd
        return True

    def discard_outbox(self) -> None:
        """Drop what the worker handed over without passing it on."""
        for fd in self.outbox.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.outbox = {}

    def hand(self, name: str, fd: int) -> None:
        """Send ``fd`` (the pool's copy; closed once sent) to the worker with its next op."""
        old = self.inbox.pop(name, None)
        if old is not None:
            os.close(old)
        self.inbox[name] = fd

    def _read_err(self):
        try:
            for raw in self.err:
                self.log.append(raw.decode("utf-8", "replace").rstrip()[:2000])
                self.log_count += 1
        except (OSError, ValueError):
            pass

    def send(self, msg: dict) -> bool:
        names = list(self.inbox)[:MAX_FDS]
        fds = [self.inbox.pop(n) for n in names]
        try:
            data = memoryview((json.dumps({**msg, "fds": names} if names else msg) + "\n").encode())
            if fds:
                n = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                data = data[n:]
            if data:
                self.sock.sendall(data)
            return True
        except OSError:
            return False
        finally:
            for fd in fds:
                os.close(fd)

    def log_since(self, mark: int, limit: int = 60) -> str:
        n = min(self.log_count - mark, len(self.log), limit)
        return "\n".join(list(self.log)[-n:]) if n > 0 else ""

    # ----------------------------------------------------------------- its processes

    def worker_pid(self) -> Optional[int]:
        return self.pid

    def find_worker(self) -> Optional[int]:
        """The worker's pid as this process sees it: the keeper's child, or, in a PID namespace of
        its own, the child of that namespace's init (the keeper's child)."""
        if self.keeper is None:
            return None
        table = sandbox.process_table()
        kids = [p for p, pp in table.items() if pp == self.keeper]
        if kids and self.facts.get("pid_namespace") == "own namespace":
            kids = [p for p, pp in table.items() if pp == kids[0]]
        return kids[0] if kids else None

    def tree(self) -> list[int]:
        return sandbox.descendants(self.keeper) if self.keeper else []

    def kill(self, kind: Optional[str] = None, message: str = "") -> None:
        """SIGKILL the job's whole process tree. Returns once every process in it has had its
        signal (none of them runs its code again), not once they are gone: a process with a CUDA
        context takes tens of milliseconds to die, and the fork server reaps them."""
        if kind and self.killed is None:
            self.killed = (kind, message)
        if self.keeper is not None:
            sandbox.kill_tree(self.keeper, wait=False)
        self.clean = False

    def close(self) -> None:
        """Kill the job's processes and forget its files. Never waits on its descendants."""
        self.kill()
        for f in (self.sock, self.err):
            try:
                f.close()
            except OSError:
                pass
        for fd in [*self._fd_queue, *self.outbox.values(), *self.inbox.values()]:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd_queue, self.outbox, self.inbox = [], {}, {}
        for fd in self.child_fds:
            try:
                fd.close() if hasattr(fd, "close") else os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.pool._forget(self)

    def alive(self) -> bool:
        return self.exited is None and self.killed is None and self.keeper is not None and sandbox.alive(self.keeper)

    # ----------------------------------------------------------------- one op

    def take_device(self, kind: str) -> None:
        """The GPU's device lock for ``kind`` (``read`` or ``write``), waited for until
        ``wait_until`` at the latest (the time counts in ``wait_s``); past it, ``Stopped("wait")``."""
        lock = self.pool.device_lock
        t = time.monotonic()
        got = (lock.acquire_read if kind == "read" else lock.acquire_write)(self.wait_until)
        self.wait_s += time.monotonic() - t
        if not got:
            raise Stopped("wait", f"waited {self.wait_s:.0f} s in all for the GPU, which other evaluations held",
                          self)
        self._held_since = time.monotonic()

    def release_device(self, kind: str) -> None:
        """Give back the device lock taken with ``take_device(kind)``."""
        self.held_s[kind] += time.monotonic() - self._held_since
        (self.pool.device_lock.release_read if kind == "read" else self.pool.device_lock.release_write)()

    def call(self, msg: dict, lock: Optional[str], budget: "Budget") -> dict:
        """Send an op and wait for its reply, holding the device lock the op needs (``read``,
        ``write``, or None; "held" when the caller holds it). Raises ``Stopped``."""
        gpu = self.device is not None and self.device.is_gpu
        held: Optional[str] = None

        def take():
            nonlocal held
            if gpu and lock in ("read", "write"):
                self.take_device(lock)
                held = lock

        def give():
            nonlocal held
            if held in ("read", "write"):
                self.release_device(held)
            held = None

        take()
        budget.start()
        op_started, waited = time.monotonic(), self.wait_s
        # A reply counts only with this op's nonce: one written before the op was sent (by code
        # of the job that wrote ahead on the channel) cannot carry it.
        nonce = os.urandom(8).hex()
        msg = {**msg, "nonce": nonce}
        try:
            if not self.send(msg):
                raise self.stopped()
            compiling_since = None
            while True:
                try:
                    m = self.messages.get(timeout=0.1)
                except queue.Empty:
                    m = False
                if self.killed is not None:
                    raise Stopped(self.killed[0], self.killed[1], self)
                if m is False:
                    if budget.expired():
                        self.kill("timeout", "")
                        raise Stopped("timeout", "", self)
                    if self.exited is not None:
                        raise self.stopped()
                    continue
                if m is None:
                    raise self.stopped()
                ev = m.get("event")
                if ev == "reply" and m.get("op") == msg.get("op") and m.get("nonce") == nonce:
                    self.note_steps(str(msg.get("op")), m.pop("steps_s", None))
                    return m
                if ev == "reply":
                    self.kill("protocol", f"a reply to '{m.get('op')}' the worker was not asked for: something "
                                          "in the code wrote on the worker's channel")
                    raise Stopped(self.killed[0], self.killed[1], self)
                if ev == "at":
                    self.where = f" (running the {m.get('side')} on case '{m.get('case')}')"
                elif ev == "phase" and m.get("phase") == "compile":
                    if lock != "held":
                        give()
                    budget.pause(lock_free=False)
                    compiling_since = time.monotonic()
                elif ev == "phase" and m.get("phase") == "run":
                    if compiling_since is not None:
                        self.compile_s += time.monotonic() - compiling_since
                        compiling_since = None
                    budget.pause(lock_free=True)
                    take()
                    budget.start()
                    if not self.send({"grant": True}):
                        raise self.stopped()
                elif ev == "_exited":
                    self.exited = m
                    raise self.stopped()
        finally:
            budget.stop()
            give()
            op = str(msg.get("op"))
            self.op_s[op] = self.op_s.get(op, 0.0) + time.monotonic() - op_started - (self.wait_s - waited)

    def stopped(self) -> Stopped:
        """How the worker ended (the fork server reports its keeper's status)."""
        deadline = time.monotonic() + 5
        while self.exited is None and time.monotonic() < deadline:
            try:
                m = self.messages.get(timeout=0.1)
            except queue.Empty:
                continue
            if m is not None and m.get("event") == "_exited":
                self.exited = m
        if self.killed is not None:
            return Stopped(self.killed[0], self.killed[1], self)
        sig = (self.exited or {}).get("signal")
        code = (self.exited or {}).get("code")
        if sig:
            what = SIGNALS.get(sig, f"signal {sig}")
            kind = "segfault" if sig in (signal.SIGSEGV, signal.SIGBUS) else \
                ("host_oom" if sig == signal.SIGKILL else "worker_died")
        else:
            what, kind = f"exit code {code}", "worker_died"
        return Stopped(kind, f"the worker died with {what}", self)


class Budget:
    """Seconds a stage may run, counted only while an op runs and holds what it needs (waits for
    the device lock are not counted)."""

    def __init__(self, limit_s: float):
        self.limit = limit_s
        self.used = 0.0
        self.since: Optional[float] = None

    def start(self):
        if self.since is None:
            self.since = time.monotonic()

    def stop(self):
        if self.since is not None:
            self.used += time.monotonic() - self.since
            self.since = None

    def pause(self, lock_free: bool):
        # A compile counts toward the stage's limit; waiting for the lock afterwards does not.
        if lock_free:
            self.stop()

    def expired(self) -> bool:
        now = self.used + (time.monotonic() - self.since if self.since is not None else 0.0)
        return now > self.limit


def promote_compiles(job: "WorkerProcess", shared: str, layer: str) -> None:
    """A worker's compiled kernels join a layer of the shared compile cache (runner.tcache):
    its reference's (``layer``: the reference digest), or the warm-up's (``tcache.WARM``),
    which only takes what a worker compiled before any user code ran there."""
    from ..tcache import promote
    if job.clean and layer and "/" not in layer:
        promote(os.path.join(job.scratch, ".triton"), os.path.join(shared, layer))
