"""Evaluations on a Ray cluster: ``--runner ray://HOST:PORT`` (Ray client) or ``--runner ray:auto``.

``RayRunner`` has ``LocalRunner``'s interface (``evaluate``, ``evaluate_many``, ``device_info``,
``close``) and takes and returns the same ``EvalRequest`` / ``EvalResult`` records (as their
JSON, so the cluster reads exactly what a daemon would). On the cluster it keeps one long-lived
Ray actor per GPU (``num_gpus=1``); each actor owns a ``LocalRunner``, the same worker pool of
single-use, sandboxed worker processes as a local run, on the GPU Ray gave it, so timing is
exclusive per GPU through the pool's device lock. A cluster without GPUs (or ``device =
"interpreter"``) gets interpreter actors: one per unit of the custom resource
``geak_interpreter`` (``ray start --resources '{"geak_interpreter": 2}'``), or one per node.

Dispatch: requests wait in this client's queue and go to the least-loaded actor that has a free
worker (at most ``workers`` evaluations per actor), so nothing is queued on an actor that
could start elsewhere, and ``close()`` cancels what has not started. An actor or node that dies
mid-evaluation gives the request back to the queue; it starts again on another actor, at most
``MAX_ATTEMPTS`` times in all (the daemon's count), and each request gets exactly one result.
Actors restart where Ray can place them again.

Like the remote runner, ``evaluate`` and ``evaluate_many`` never raise for runner trouble: a
cluster that cannot be reached or has no actor left gives each request an ``EvalResult`` with
status ``crashed`` and error kind ``runner_unavailable`` whose message says which;
``device_info`` raises ``RunnerUnavailable``. ``ray`` is imported only here, and only when a
Ray runner is used (``pip install 'geak[ray]'``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Optional

from runner.serve.daemon.scheduler import MAX_ATTEMPTS
from .remote import RunnerUnavailable, unavailable_result
from ..schema import DeviceInfo, ErrorInfo, EvalRequest, EvalResult, Flag, SchemaError, from_dict, to_json

_CONNECTION_LOCK = threading.Lock()
# The Ray connection that RayRunners made (Ray allows one per process), and how many use it.
_CONNECTION: dict = {"address": None, "where": "", "users": 0}

RESOURCE = "geak_interpreter"
"""The custom Ray resource that says how many interpreter (CPU) actors a node takes."""

CLIENT_PORT = 10001  # `ray start --head` serves Ray clients there by default
INIT_ATTEMPTS = 3
"""Joins tried when the client server reports an initialization failure (a loaded head)."""
_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def parse_spec(spec: str) -> str:
    """``ray://HOST:PORT`` -> that address; ``ray:auto`` -> ``"auto"``. ValueError otherwise."""
    if spec == "ray:auto":
        return "auto"
    if spec.startswith("ray://"):
        parsed = urllib.parse.urlsplit(spec)
        try:
            port = parsed.port
        except ValueError:
            port = None
        if parsed.hostname and port and not parsed.path.strip("/") and not parsed.query:
            return f"ray://{parsed.netloc}"
    raise ValueError(f"runner '{spec}': use ray://HOST:PORT (a Ray cluster's client port, {CLIENT_PORT} unless "
                     "`ray start --head --ray-client-server-port` says otherwise) or ray:auto (the Ray cluster "
                     "this machine belongs to)")


# ============================================================================ the actor (on the cluster)


class EvalActor:
    """One GPU's (or one interpreter slot's) worker pool on a cluster node. Made a Ray actor
    class by ``RayRunner`` (``ray.remote(EvalActor)``); its methods take and return JSON."""

    def __init__(self, device: str, workers: int):
        from .local import LocalRunner
        self.runner = LocalRunner(workers=workers, device=device)
        self.device = device

    def hello(self) -> dict:
        """Starts the pool's first worker; what this actor evaluates on, or why it cannot."""
        from runner.judge.process import PoolError
        where = {"pid": os.getpid(), "host": socket.gethostname(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
        try:
            info = self.runner.device_info()
        except PoolError as e:
            return {**where, "error": str(e)}
        return {**where, "device": json.loads(to_json(info))}

    def evaluate(self, text: str) -> str:
        from runner.serve.daemon.scheduler import crashed_result
        from runner.judge.process import PoolError
        from ..schema import request_from_json
        try:
            req = request_from_json(text)
        except SchemaError as e:  # a client of another schema major
            return to_json(EvalResult(status="rejected", correct=False, message=str(e),
                                      error=ErrorInfo(kind="bad_request", side="harness", message=str(e))))
        try:
            return to_json(self.runner.evaluate(req))
        except PoolError as e:
            return to_json(crashed_result(req.id, str(e), kind="runner_unavailable"))
        except Exception as e:  # noqa: BLE001 - said in the result, as the daemon does
            return to_json(crashed_result(req.id, f"internal error in the runner: {type(e).__name__}: {e}"))

    def close(self) -> None:
        self.runner.close()


# ============================================================================ the client


@dataclasses.dataclass(eq=False)
class _Item:
    request: EvalRequest
    text: str
    future: concurrent.futures.Future
    attempts: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)  # why earlier attempts ended


@dataclasses.dataclass(eq=False)
class _Actor:
    index: int
    handle: Any
    capacity: int
    state: str = "starting"  # starting | ready | down (lost, maybe restarting) | dead
    probe: Any = None  # the pending hello (at start, and after a loss)
    probe_at: float = 0.0  # when a lost actor is asked again
    info: Optional[DeviceInfo] = None
    where: dict = dataclasses.field(default_factory=dict)
    running: dict = dataclasses.field(default_factory=dict)  # ObjectRef -> _Item
    served: int = 0
    lost: int = 0
    error: str = ""


class RayRunner:
    """Evaluations spread over the actors of a Ray cluster.

    ``address``: ``ray://HOST:PORT`` (Ray client), ``"auto"`` (the cluster this machine is part
    of), or None (the Ray connection this process already has). ``device``: ``auto`` (GPU actors
    if the cluster has GPUs, else interpreter actors), ``cuda``, or ``interpreter``.
    ``workers``: evaluations at once per actor (the pool's size). ``actors``: at most this many
    actors (default: every GPU, or every interpreter slot). ``start_s``: how long to wait for a
    first actor to be ready; ``lost_s``: how long queued requests wait while no actor is ready
    (after a loss) before they fail; ``connect_s``: how long a ``ray://`` address is tried.
    """

    def __init__(self, address: Optional[str] = "auto", *, device: str = "auto", workers: int = 2,
                 actors: Optional[int] = None, start_s: float = 180.0, lost_s: float = 60.0,
                 connect_s: float = 3.0, max_attempts: int = MAX_ATTEMPTS, ship_code: bool = True):
        try:
            import ray  # noqa: F401
        except ImportError as e:
            raise ValueError(f"a Ray runner needs Ray, which this Python cannot import ({e}): "
                             "pip install 'geak[ray]' (Ray with its client)") from None
        if device not in ("auto", "cuda", "interpreter"):
            raise ValueError(f"device '{device}': use auto, cuda or interpreter")
        if actors is not None and actors < 1:
            raise ValueError("a Ray runner needs at least one actor")
        self.address = address
        self.device, self.workers = device, max(1, workers)
        self.max_actors = actors
        self.start_s, self.lost_s, self.connect_s = start_s, lost_s, connect_s
        self.max_attempts = max(1, max_attempts)
        self.ship_code = ship_code
        self._cond = threading.Condition()
        self._start_lock = threading.Lock()
        self._queue: collections.deque[_Item] = collections.deque()
        self._actors: list[_Actor] = []
        self._refs: dict[Any, tuple[str, _Actor]] = {}  # ObjectRef -> ("eval" | "hello", actor)
        self._started = False
        self._closed = False
        self._broken: Optional[RunnerUnavailable] = None
        self._own_connection = False
        self._thread: Optional[threading.Thread] = None
        self._stalled_since: Optional[float] = None
        self._started_at = 0.0
        self._need = "GPU"
        self.retried = 0  # evaluations started again after their actor was lost
        self.submitted = 0  # evaluations handed to actors (retries included)

    @classmethod
    def from_spec(cls, spec: str, *, device: str = "auto", workers: int = 2, **kwargs) -> "RayRunner":
        """``ray://HOST:PORT`` or ``ray:auto``; ValueError (a one-line message) otherwise, or
        when Ray is not installed. Nothing is contacted until the first evaluation."""
        address = parse_spec(spec)
        try:
            return cls(address, device=device, workers=workers, **kwargs)
        except ValueError as e:
            raise ValueError(f"runner '{spec}': {e}") from None

    @property
    def where(self) -> str:
        return {"auto": "ray:auto (this machine's Ray cluster)", None: "the connected Ray cluster"}.get(
            self.address, self.address)

    # ------------------------------------------------------------------ start

    def _connect(self):
        """Join the cluster, or share this process's connection (Ray allows one per process)."""
        import ray
        with _CONNECTION_LOCK:
            if ray.is_initialized():
                if _CONNECTION["users"] and self.address not in (None, _CONNECTION["address"]):
                    raise RunnerUnavailable(
                        "rejected", f"this process already uses the Ray cluster {_CONNECTION['where']}; it cannot "
                        f"also use {self.where}", hint="one process talks to one Ray cluster: close the other "
                        "runner first, or run this in another process")
                if _CONNECTION["users"]:  # another RayRunner's connection: the last one to close ends it
                    _CONNECTION["users"] += 1
                    self._own_connection = True
                return  # else the process's own (e.g. a test's or a notebook's): left to it
            if self.address is None:
                raise RunnerUnavailable("unreachable", "this process is not connected to a Ray cluster",
                                        hint="use ray://HOST:PORT or ray:auto")
            self._join()
            _CONNECTION.update(address=self.address, where=self.where, users=1)
            self._own_connection = True

    def _disconnect(self):
        if not self._own_connection:
            return
        self._own_connection = False
        import ray
        with _CONNECTION_LOCK:
            _CONNECTION["users"] -= 1
            if _CONNECTION["users"] <= 0:
                _CONNECTION.update(address=None, where="", users=0)
                try:
                    ray.shutdown()
                except Exception:  # noqa: BLE001 - the cluster may be gone already
                    pass

    def _join(self):
        import ray
        if self.address.startswith("ray://"):
            parsed = urllib.parse.urlsplit(self.address)
            deadline = time.monotonic() + self.connect_s
            while True:  # Ray's own client waits 30 s on a closed port; say it sooner
                try:
                    socket.create_connection((parsed.hostname, parsed.port), timeout=2.0).close()
                    break
                except OSError as e:
                    if time.monotonic() >= deadline:
                        raise RunnerUnavailable(
                            "unreachable", f"cannot reach the Ray cluster at {self.address}: {e.strerror or e}",
                            hint=f"is `ray start --head` running there (Ray clients connect to port {CLIENT_PORT} by "
                                 "default), and is the port reachable from here?") from None
                    time.sleep(0.2)
        _use_cluster_token()
        # The job ships this client's `runner` package, so the cluster runs the same evaluator
        # whatever geak version its nodes have installed (they need torch, triton and numpy).
        env = {"py_modules": [_PACKAGE_DIR]} if self.ship_code else None
        failed: Exception = RuntimeError("not tried")
        for attempt in range(INIT_ATTEMPTS):
            try:
                ray.init(address=self.address, namespace="geak", runtime_env=env, log_to_driver=False,
                         logging_level=logging.ERROR)
                return
            except Exception as e:  # noqa: BLE001 - Ray raises many kinds; one line for a person
                failed = e
                # The client server starts a process per connection; on a loaded head that can
                # fail to come up in time ("Initialization failure from server"): try again.
                if "Initialization failure from server" not in str(e) or attempt + 1 == INIT_ATTEMPTS:
                    break
                try:
                    ray.shutdown()
                except Exception:  # noqa: BLE001 - nothing was joined
                    pass
                time.sleep(1.0 + attempt)
        lines = str(failed).strip().splitlines() or [type(failed).__name__]
        first = (lines[0] + (" " + lines[-1].strip() if len(lines) > 1 else ""))[:300]
        if self.address == "auto":
            hint = ("start Ray on this machine (`ray start --head`, or `ray start --address HEAD:6379` to join "
                    "a cluster), or use ray://HOST:PORT")
        else:
            hint = ("a cluster started with token authentication (Ray's default) needs its token here: copy "
                    "the head's ~/.ray/auth_token, or set RAY_AUTH_TOKEN; Ray and Python must be the same "
                    "versions on both sides")
        raise RunnerUnavailable("unreachable", f"could not join the Ray cluster at {self.where}: {first}",
                                hint=hint) from None

    def _plan(self) -> tuple[int, dict, str]:
        """How many actors, with which Ray options, running the pool on which device."""
        import ray
        res = ray.cluster_resources()
        gpus = int(res.get("GPU", 0))
        if self.device != "interpreter" and gpus:
            return gpus, {"num_gpus": 1, "num_cpus": 0}, self.device
        if self.device == "cuda":
            raise RunnerUnavailable("rejected", f"the Ray cluster at {self.where} has no GPU (--device cuda)",
                                    hint="add a GPU node (`ray start --address HEAD:6379` on it), or use --device "
                                         "interpreter")
        slots = int(res.get(RESOURCE, 0))
        if slots:
            return slots, {"num_cpus": 0, "resources": {RESOURCE: 1}}, "interpreter"
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        return max(1, nodes), {"num_cpus": 1, "scheduling_strategy": "SPREAD"}, "interpreter"

    def _start(self):
        """Connect, place the actors and wait until one is ready. Raises RunnerUnavailable (also
        for what Ray itself raises on the way: one line, not a traceback)."""
        try:
            self._start_actors()
        except RunnerUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - e.g. the cluster went away while actors were placed
            raise RunnerUnavailable("unreachable", f"the Ray cluster at {self.where} failed: {_first_line(e)}",
                                    hint="see the cluster's state with `ray status`") from None

    def _start_actors(self):
        with self._start_lock:
            if self._broken is not None:
                raise self._broken
            if self._started:
                return
            if self._closed:
                raise RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was closed)")
            import ray
            self._connect()
            try:
                count, options, device = self._plan()
            except BaseException:
                self._disconnect()
                raise
            if self.max_actors:
                count = min(count, self.max_actors)
            remote_cls = ray.remote(EvalActor)
            options = {**options, "max_concurrency": self.workers + 2, "max_restarts": self.max_attempts,
                       "max_task_retries": 0}
            self._need = "GPU" if options.get("num_gpus") else f"{RESOURCE} or CPU"
            with self._cond:
                if self._closed:  # closed while connecting
                    self._disconnect()
                    raise RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was closed)")
                for i in range(count):
                    handle = remote_cls.options(**options).remote(device, self.workers)
                    actor = _Actor(i, handle, self.workers)
                    actor.probe = handle.hello.remote()
                    self._refs[actor.probe] = ("hello", actor)
                    self._actors.append(actor)
                self._started = True
                self._started_at = time.monotonic()
            self._thread = threading.Thread(target=self._dispatch, name="geak-ray-dispatch", daemon=True)
            self._thread.start()
        deadline = time.monotonic() + self.start_s
        with self._cond:
            while not any(a.state == "ready" for a in self._actors):
                if self._broken is not None:
                    raise self._broken
                if self._closed:
                    raise RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was closed)")
                if all(a.state == "dead" for a in self._actors):
                    why = "; ".join(sorted({a.error for a in self._actors if a.error})) or "they died"
                    self._broken = RunnerUnavailable("unreachable", f"no Ray actor could start on {self.where}: "
                                                     f"{why}", hint="check the nodes' Python environment (torch, "
                                                     "triton, numpy) with `geak-runner info` there")
                    raise self._broken
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RunnerUnavailable(
                        "busy", f"no Ray actor was ready on {self.where} within {self.start_s:g} s",
                        hint=f"each actor needs one {self._need} that no other job holds: see `ray status`")
                self._cond.wait(min(left, 1.0))

    # ------------------------------------------------------------------ dispatch (one thread)

    def _assign(self):
        """Queued requests to the least-loaded ready actors with a free worker (holding _cond)."""
        while self._queue:
            free = [a for a in self._actors if a.state == "ready" and len(a.running) < a.capacity]
            if not free:
                return
            actor = min(free, key=lambda a: (len(a.running) / a.capacity, a.served + len(a.running), a.index))
            item = self._queue.popleft()
            if item.future.done():  # its caller went away
                continue
            item.attempts += 1
            self.submitted += 1
            ref = actor.handle.evaluate.remote(item.text)
            actor.running[ref] = item
            self._refs[ref] = ("eval", actor)

    def _dispatch(self):
        import ray
        while True:
            with self._cond:
                if self._closed:
                    return
                try:
                    self._probe()
                    self._assign()
                except Exception as e:  # noqa: BLE001 - submitting failed: the connection is gone
                    self._fail_all(RunnerUnavailable("unreachable", f"lost the Ray cluster at {self.where}: {e}"))
                    return
                waiting = list(self._refs)
                self._check_lost()
            if not waiting:  # nothing out: wait for requests, or for a lost actor's next hello
                with self._cond:
                    if not self._closed:
                        self._cond.wait(0.2 if self._queue else 0.5)
                continue
            try:
                ready, _ = ray.wait(waiting, num_returns=1, timeout=0.1)
                if ready:
                    ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
            except Exception as e:  # noqa: BLE001 - e.g. the Ray client lost its server for good
                with self._cond:
                    self._fail_all(RunnerUnavailable("unreachable", f"lost the Ray cluster at {self.where}: {e}"))
                return
            for ref in ready:
                self._settle(ref)

    def _settle(self, ref):
        import ray
        outcome, failure = None, None
        try:
            outcome = ray.get(ref, timeout=30)
        except Exception as e:  # noqa: BLE001 - a loss (_is_loss) or the actor's own failure
            failure = e
        with self._cond:
            kind, actor = self._refs.pop(ref, (None, None))
            if actor is None or self._closed:
                return
            if kind == "hello":
                actor.probe = None
                self._hello(actor, outcome, failure)
            else:
                item = actor.running.pop(ref)
                if failure is None:
                    actor.served += 1
                    self._finish(item, outcome)
                elif _is_loss(failure):
                    self._lost(actor)
                    self._again(item, actor, failure)
                else:
                    self._resolve(item, _crash(item.request.id, f"the Ray actor failed to evaluate this request: "
                                                                f"{_first_line(failure)}", "internal"))
            self._cond.notify_all()

    def _hello(self, actor: _Actor, outcome, failure):
        if failure is not None:
            if isinstance(failure, _ray_exc("ActorDiedError")) or not _is_loss(failure):
                actor.state, actor.error = "dead", _first_line(failure)
            else:  # not reachable now (restarting, or its node is going): ask again shortly
                actor.state, actor.probe_at = "down", time.monotonic() + 1.0
            return
        actor.where = {k: outcome.get(k) for k in ("pid", "host", "gpus")}
        if outcome.get("error"):
            actor.state, actor.error = "dead", outcome["error"].splitlines()[0]
            _kill(actor.handle)
            return
        try:
            actor.info = from_dict(DeviceInfo, outcome["device"], "device")
        except (KeyError, SchemaError) as e:
            actor.state, actor.error = "dead", f"it sent no device description ({e})"
            _kill(actor.handle)
            return
        actor.state = "ready"

    def _lost(self, actor: _Actor):
        """An evaluation's actor was lost: no more work for it until it answers a hello again
        (Ray restarts it where it can; a hello that finds it dead for good ends it)."""
        if actor.state == "ready":
            actor.lost += 1
            actor.state, actor.probe_at = "down", time.monotonic()

    def _probe(self):
        """Hellos to lost actors that are due (holding _cond)."""
        now = time.monotonic()
        for a in self._actors:
            if a.state == "down" and a.probe is None and a.probe_at <= now:
                a.probe = a.handle.hello.remote()
                self._refs[a.probe] = ("hello", a)

    def _again(self, item: _Item, actor: _Actor, failure):
        item.lost.append(f"actor {actor.index}"
                         + (f" on {actor.where.get('host')}" if actor.where.get("host") else "")
                         + f": {_first_line(failure)}")
        if item.attempts >= self.max_attempts:
            self._resolve(item, _crash(
                item.request.id, f"the Ray actor evaluating this request was lost {item.attempts} times (last: "
                                 f"{item.lost[-1]}); it was not started again", "worker_died"))
            return
        self.retried += 1
        self._queue.appendleft(item)

    def _finish(self, item: _Item, text: str):
        try:
            data = json.loads(text)
            res = from_dict(EvalResult, data, "EvalResult")
        except (ValueError, SchemaError) as e:
            res = _crash(item.request.id, f"the Ray actor sent a result this client cannot read: {e}", "internal")
        res.id = item.request.id
        if item.lost:
            res.flags.append(Flag(code="evaluated_again", severity="info",
                                  message=f"evaluated again after its Ray actor was lost ({'; '.join(item.lost)})"))
        self._resolve(item, res)

    @staticmethod
    def _resolve(item: _Item, res: EvalResult):
        if not item.future.done():  # exactly one result per request
            item.future.set_result(res)

    def _check_lost(self):
        """Queued requests that found no ready actor for lost_s fail (holding _cond)."""
        now = time.monotonic()
        if not self._queue or any(a.state == "ready" for a in self._actors):
            self._stalled_since = None
            return
        if any(a.state == "starting" for a in self._actors) and now - self._started_at < self.start_s:
            return  # the first actors are still starting
        self._stalled_since = self._stalled_since or now
        if all(a.state == "dead" for a in self._actors) or now - self._stalled_since > self.lost_s:
            why = "; ".join(sorted({a.error for a in self._actors if a.error}))
            e = RunnerUnavailable("unreachable", f"no Ray actor is left on {self.where}"
                                  + (f" ({why})" if why else f": none came back within {self.lost_s:g} s"),
                                  hint="see the cluster's state with `ray status`")
            while self._queue:
                item = self._queue.popleft()
                self._resolve(item, unavailable_result(item.request.id, e))

    def _fail_all(self, e: RunnerUnavailable):
        """The connection is gone (holding _cond): every request waiting gets ``e``."""
        self._broken = e
        for item in list(self._queue) + [i for a in self._actors for i in a.running.values()]:
            self._resolve(item, unavailable_result(item.request.id, e))
        self._queue.clear()
        for a in self._actors:
            a.running.clear()
            a.state = "dead"
        self._refs.clear()
        self._cond.notify_all()

    # ------------------------------------------------------------------ Runner interface

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        if not requests:
            return []
        for r in requests:
            r.id = r.id or uuid.uuid4().hex[:12]
        try:
            self._start()
        except RunnerUnavailable as e:
            return [unavailable_result(r.id, e) for r in requests]
        items = [_Item(r, to_json(r), concurrent.futures.Future()) for r in requests]
        with self._cond:
            if self._closed or self._broken is not None:
                e = self._broken or RunnerUnavailable("closed", "the evaluation was cancelled (the runner client "
                                                                "was closed)")
                return [unavailable_result(r.id, e) for r in requests]
            self._queue.extend(items)
            self._cond.notify_all()
        try:
            return [it.future.result() for it in items]
        except BaseException:  # interrupted: leave nothing queued for nobody
            with self._cond:
                for it in items:
                    it.future.cancel()
                self._queue = collections.deque(i for i in self._queue if not i.future.done())
            raise

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """The actors started and each one's workers (``workers`` per actor; ``n`` is theirs)."""
        return self.device_info()

    def device_info(self) -> DeviceInfo:
        self._start()
        with self._cond:
            known = [a.info for a in sorted(self._actors, key=lambda a: a.state != "ready") if a.info]
        if not known:
            raise RunnerUnavailable("unreachable", f"no Ray actor is left on {self.where}",
                                    hint="see the cluster's state with `ray status`")
        return known[0]

    @property
    def parallelism(self) -> int:
        return self.slots

    @property
    def slots(self) -> int:
        """Evaluations that can run at once: actors (ready or starting) × workers. Starts the runner."""
        try:
            self._start()
        except RunnerUnavailable:
            return self.workers
        with self._cond:
            return sum(a.capacity for a in self._actors if a.state != "dead") or self.workers

    def settle(self, timeout: float) -> None:
        """Wait (after the start) until no actor is still starting, at most ``timeout`` s."""
        self._start()
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(a.state == "starting" for a in self._actors) and time.monotonic() < deadline:
                self._cond.wait(min(1.0, max(0.0, deadline - time.monotonic())))

    def actors(self) -> list[dict]:
        """Each actor: its state, device, host, pid, GPUs, evaluations running and served, losses."""
        with self._cond:
            return [{"index": a.index, "state": a.state, "device": str(a.info) if a.info else None,
                     "running": len(a.running), "served": a.served, "lost": a.lost, "error": a.error, **a.where}
                    for a in self._actors]

    def close(self) -> None:
        """Also from another thread: waiting calls return at once with ``runner_unavailable``
        results; requests that have not started never start; the actors and their worker
        processes stop."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            e = RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was closed)")
            items = list(self._queue) + [i for a in self._actors for i in a.running.values()]
            self._queue.clear()
            for item in items:
                self._resolve(item, unavailable_result(item.request.id, e))
            actors, self._actors = self._actors, []
            self._refs.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)
        try:
            import ray
            if ray.is_initialized() and actors:
                closing = [a.handle.close.remote() for a in actors if a.state == "ready"]
                if closing:  # the pools kill their workers; then the actors go
                    ray.wait(closing, num_returns=len(closing), timeout=5)
                for a in actors:
                    _kill(a.handle)
        except Exception:  # noqa: BLE001 - best effort: the cluster may be gone already
            pass
        with self._start_lock:
            self._disconnect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================ helpers


def _ray_exc(name: str) -> type:
    import ray.exceptions
    return getattr(ray.exceptions, name, ray.exceptions.RayActorError)


def _is_loss(e: BaseException) -> bool:
    """The actor, its worker process or its node went away (not: the evaluation itself failed)."""
    import ray.exceptions as x
    return isinstance(e, (x.RayActorError, x.WorkerCrashedError, x.NodeDiedError, x.ObjectLostError,
                          x.OutOfMemoryError, x.LocalRayletDiedError, x.GetTimeoutError))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {(text.splitlines() or [''])[0][:300]}".rstrip(": ")


def _crash(req_id: str, message: str, kind: str) -> EvalResult:
    return EvalResult(status="crashed", correct=False, id=req_id, message=message,
                      error=ErrorInfo(kind=kind, side="harness", message=message))


def _kill(handle) -> None:
    try:
        import ray
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _use_cluster_token() -> None:
    """A Ray client sends the cluster's token only in token mode: turn it on when a token is at
    hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and nobody chose a mode."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path)):
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray caches its config at import
        from ray._raylet import Config
        Config.initialize("")
    except Exception:  # noqa: BLE001 - an older Ray without token authentication
        pass
