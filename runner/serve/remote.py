"""Runners elsewhere: the client of ``geak-runner serve``, with the ``LocalRunner`` interface.

* ``RemoteRunner(url, token)`` talks HTTP(S) to the daemon (``http://gpu-box:8765``).
* ``SpoolRunner(directory)`` drops request files into a spool directory that a daemon started
  with ``--spool`` watches (``file:///shared/geak-spool``), for GPU nodes that accept no
  inbound connections.

``runners.open_runner`` picks one from a URL.

``evaluate`` and ``evaluate_many`` never raise for runner trouble: a runner that cannot be
reached, refuses the token, stays busy, or speaks another schema gives each request an
``EvalResult`` with status ``crashed`` and error kind ``runner_unavailable`` whose message says
which, as the local pool does when its workers cannot start. ``device_info`` raises
``RunnerUnavailable`` (a ``PoolError``) with the same message.

Each evaluation is submitted under a job id this client picks; a submission that is retried
after a lost connection reuses it, so the daemon runs it once. No torch here: this module is
imported by the CLI and the language server.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Optional

from runner.judge.process import PoolError
from ..schema import (SCHEMA, DeviceInfo, ErrorInfo, EvalRequest, EvalResult, SchemaError, check_schema,
                     from_dict, to_json)


class RunnerUnavailable(PoolError):
    """The runner could not be used. ``reason``: unreachable | unauthorized | busy | version |
    rejected | timeout | protocol."""

    def __init__(self, reason: str, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.reason, self.message, self.hint = reason, message, hint


class BatchTooLarge(Exception):
    pass


def unavailable_result(req_id: str, e: RunnerUnavailable) -> EvalResult:
    return EvalResult(status="crashed", correct=False, id=req_id, message=e.message,
                      error=ErrorInfo(kind="runner_unavailable", side="harness", message=e.message, hint=e.hint))


def _job_ids(requests: list[EvalRequest]) -> dict[str, int]:
    """Each request gets an id if it has none; each evaluation a fresh job id (this call's own:
    a request object may be evaluated again, or copied with its id) -> the request's index."""
    for r in requests:
        r.id = r.id or uuid.uuid4().hex[:12]
    return {uuid.uuid4().hex: i for i in range(len(requests))}


def _parse_result(data, where: str) -> EvalResult:
    check_schema(data)
    return from_dict(EvalResult, data, where)


def _major(schema: str) -> str:
    return schema.rsplit("/", 1)[-1]


# ============================================================================ HTTP


UNKNOWN_PARALLELISM = 4
"""Evaluations at once where a runner cannot say: batches of 4 keep a few workers busy."""


class RemoteRunner:
    """Client of ``geak-runner serve``.

    ``timeout``: seconds to wait for one ``evaluate``/``evaluate_many`` call's results (queue
    time included). ``connect_s``: how long the first connection is retried;
    ``reconnect_s``: how long a connection lost after that (the daemon restarting) is retried
    before the runner is called unreachable. ``busy_s``: how long "busy" answers (429/503, honouring Retry-After)
    are waited out. ``verify``: TLS verification: True (the system's CAs, or the bundle named
    by ``SSL_CERT_FILE``), a CA bundle path, or an ``ssl.SSLContext``.
    """

    def __init__(self, url: str, token: Optional[str] = None, *, timeout: float = 3600.0,
                 connect_timeout: float = 5.0, connect_s: float = 3.0, reconnect_s: float = 60.0, busy_s: float = 300.0,
                 poll_s: float = 20.0, batch: int = 64, verify=True):
        import httpx  # only when a remote runner is used

        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"runner URL '{url}' is not http://HOST:PORT or https://HOST:PORT")
        self.url = url.rstrip("/")
        self.token = token if token is not None else (os.environ.get("GEAK_RUNNER_TOKEN") or None)
        self.timeout, self.busy_s = timeout, busy_s
        self.connect_s, self.reconnect_s = connect_s, reconnect_s
        self._connected = False
        self.poll_s, self.batch = poll_s, max(1, min(batch, 256))
        headers = {"User-Agent": "geak-remote/1", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._httpx = httpx
        if verify is True and os.environ.get("SSL_CERT_FILE"):
            verify = os.environ["SSL_CERT_FILE"]
        if isinstance(verify, (str, os.PathLike)):
            verify = ssl.create_default_context(cafile=str(verify))
        self._client = httpx.Client(base_url=self.url, headers=headers, verify=verify, trust_env=False,
                                    timeout=httpx.Timeout(connect=connect_timeout, read=poll_s + 30.0,
                                                          write=60.0, pool=60.0))
        self._checked = False
        self._info: Optional[DeviceInfo] = None
        self._slots: Optional[int] = None
        self._closed = False
        self._active: set[str] = set()  # job ids some evaluate_many call is waiting for
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ transport

    def _call(self, method: str, path: str, body=None, *, busy_deadline: Optional[float] = None):
        """One API call with retries on connection loss and on "busy". Returns
        ``(status, parsed JSON)`` for 2xx and for 404/409/410/422-like answers the caller handles."""
        httpx = self._httpx
        lost_since: Optional[float] = None
        busy_until = busy_deadline if busy_deadline is not None else time.monotonic() + self.busy_s
        attempt = 0
        while True:
            if self._closed:
                raise RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was closed)")
            try:
                r = self._client.request(method, path, content=None if body is None else json.dumps(body),
                                         headers={"Content-Type": "application/json"} if body is not None
                                         else None)
            except (httpx.TransportError, RuntimeError) as e:
                if self._closed:
                    raise RunnerUnavailable("closed", "the evaluation was cancelled (the runner client was "
                                            "closed)") from None
                if not isinstance(e, httpx.TransportError):
                    raise
                if isinstance(e.__context__, ssl.SSLCertVerificationError) or any(
                        m in str(e) for m in ("CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER")):
                    raise RunnerUnavailable(
                        "unreachable", f"TLS with {self.url} failed: {e}",
                        hint="give the runner's CA certificate in SSL_CERT_FILE (or use a certificate "
                             "your system trusts)") from None
                now = time.monotonic()
                lost_since = lost_since or now
                if now - lost_since >= (self.reconnect_s if self._connected else self.connect_s):
                    raise RunnerUnavailable(
                        "unreachable", f"cannot reach the runner at {self.url}: {type(e).__name__}: {e}".rstrip(": "),
                        hint="is `geak-runner serve` running there, and is the port reachable from here?") from None
                attempt += 1
                time.sleep(min(2.0, 0.1 * 2 ** attempt) * (0.5 + random.random()))
                continue
            lost_since, attempt, self._connected = None, 0, True
            try:
                doc = r.json() if r.content else {}
            except ValueError:
                raise RunnerUnavailable("protocol", f"{self.url} answered {r.status_code} with something that is "
                                        "not JSON: is it a geak runner?") from None
            err = doc.get("error") if isinstance(doc, dict) else None
            msg = err.get("message", "") if isinstance(err, dict) else ""
            code = err.get("code", "") if isinstance(err, dict) else ""
            if r.status_code == 401:
                raise RunnerUnavailable("unauthorized", f"the runner at {self.url} refused the request: {msg}",
                                        hint="set GEAK_RUNNER_TOKEN to the daemon's token")
            if r.status_code == 429 or (r.status_code == 503 and code in ("draining", "busy", "")):
                try:
                    wait = float(r.headers.get("Retry-After", "2"))
                except ValueError:
                    wait = 2.0
                if time.monotonic() + wait > busy_until:
                    raise RunnerUnavailable("busy", f"the runner at {self.url} is busy: {msg or r.status_code}",
                                            hint="try again later, or give the daemon a larger --max-queue")
                time.sleep(max(0.2, min(wait, 30.0)))
                continue
            if code == "batch_too_large" or (r.status_code == 413 and code == "too_large"):
                raise BatchTooLarge(msg)  # more jobs than its queue, or a body over its --max-body-mb
            if code == "schema_mismatch":
                raise RunnerUnavailable("version", f"version mismatch: {msg}",
                                        hint="install the same geak version on both sides")
            if r.status_code in (400, 413, 422):
                raise RunnerUnavailable("rejected", f"the runner at {self.url} rejected the request: {msg}")
            if r.status_code >= 500:
                raise RunnerUnavailable("protocol", f"the runner at {self.url} failed: {msg or r.status_code}")
            if r.status_code >= 400 and r.status_code not in (404, 409, 410):
                raise RunnerUnavailable("protocol", f"the runner at {self.url} answered {r.status_code}: "
                                        f"{msg or r.reason_phrase}")
            return r.status_code, doc

    def _handshake(self):
        if self._checked:
            return
        status, doc = self._call("GET", "/v1/health")
        if status != 200 or not isinstance(doc, dict) or "schema" not in doc:
            raise RunnerUnavailable("protocol", f"{self.url} does not look like a geak runner "
                                    f"(GET /v1/health answered {status})")
        if _major(str(doc["schema"])) != _major(SCHEMA):
            raise RunnerUnavailable("version", f"version mismatch: the runner at {self.url} speaks "
                                    f"'{doc['schema']}', this client '{SCHEMA}'",
                                    hint="install the same geak version on both sides")
        if doc.get("auth") and not self.token:
            raise RunnerUnavailable("unauthorized", f"the runner at {self.url} needs a token and none was given",
                                    hint="set GEAK_RUNNER_TOKEN to the daemon's token")
        self._checked = True

    # ------------------------------------------------------------------ Runner interface

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        jobs = _job_ids(requests)
        by_index = {i: jid for jid, i in jobs.items()}
        results: dict[int, EvalResult] = {}
        deadline = time.monotonic() + self.timeout
        with self._lock:
            self._active.update(jobs)
        try:
            self._handshake()
            for start in range(0, len(requests), self.batch):
                chunk = list(range(start, min(start + self.batch, len(requests))))
                self._submit([(by_index[i], requests[i]) for i in chunk])
            pending = set(jobs)
            while pending:
                if time.monotonic() > deadline:
                    raise RunnerUnavailable("timeout", f"no result from {self.url} within {self.timeout:g} s",
                                            hint="the runner may be overloaded; its queue keeps the jobs")
                wait = max(0.0, min(self.poll_s, deadline - time.monotonic()))
                ids = sorted(pending)[:1024]
                _, doc = self._call("POST", "/v1/results", {"ids": ids, "wait": wait})
                for jid, data in (doc.get("results") or {}).items():
                    if jid in pending:
                        i = jobs[jid]
                        try:
                            res = _parse_result(data, "EvalResult")
                        except SchemaError as e:
                            raise RunnerUnavailable("version", f"the runner at {self.url} sent a result this "
                                                    f"client cannot read: {e}") from None
                        res.id = requests[i].id
                        results[i] = res
                        pending.discard(jid)
                for jid in doc.get("cancelled") or []:
                    if jid in pending:
                        results[jobs[jid]] = unavailable_result(requests[jobs[jid]].id, RunnerUnavailable(
                            "cancelled", "the job was cancelled on the runner before it ran"))
                        pending.discard(jid)
                lost = [j for j in doc.get("unknown") or [] if j in pending]
                if lost:  # the daemon came back without its state: submit again (same ids)
                    self._submit([(j, requests[jobs[j]]) for j in lost])
        except RunnerUnavailable as e:
            self._cancel([jid for jid, i in jobs.items() if i not in results])
            for i, r in enumerate(requests):
                results.setdefault(i, unavailable_result(r.id, e))
        except BaseException:  # interrupted: leave nothing queued for nobody
            self._cancel([jid for jid, i in jobs.items() if i not in results])
            raise
        finally:
            with self._lock:
                self._active.difference_update(jobs)
        return [results[i] for i in range(len(requests))]

    def _submit(self, items: list[tuple[str, EvalRequest]]):
        body = {"requests": [json.loads(to_json(r)) | {"id": jid} for jid, r in items]}
        try:
            self._call("POST", "/v1/jobs", body, busy_deadline=time.monotonic() + self.busy_s)
        except BatchTooLarge as e:  # the daemon's queue or body limit is smaller than our batches: halve them
            if len(items) == 1:
                raise RunnerUnavailable("rejected", f"the runner at {self.url} rejected the request: {e}") from None
            self.batch = max(1, len(items) // 2)
            for start in range(0, len(items), self.batch):
                self._submit(items[start:start + self.batch])

    def _cancel(self, ids: list[str]):
        for jid in ids[:256]:
            try:
                self._client.post(f"/v1/jobs/{jid}/cancel", timeout=2.0)
            except Exception:
                return  # best effort: the runner is gone or going

    device = "auto"
    """The daemon's own ``--device`` applies."""

    @property
    def parallelism(self) -> int:
        """The daemon's lanes × workers per lane (asked once, with its device); 4 when it
        cannot be asked."""
        if self._slots is None:
            try:
                self.device_info()
            except RunnerUnavailable:
                return UNKNOWN_PARALLELISM
        return self._slots or UNKNOWN_PARALLELISM

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """The daemon starts its own workers; this asks for its device (a connection, checked)."""
        return self.device_info()

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            self._handshake()
            _, doc = self._call("GET", "/v1/device")
            try:
                self._info = from_dict(DeviceInfo, doc["devices"][0], "device")
                slots = doc.get("lanes", 1) * doc.get("workers_per_lane", 1)
                self._slots = slots if isinstance(slots, int) and slots > 0 else None
            except (KeyError, IndexError, TypeError, SchemaError) as e:
                raise RunnerUnavailable("protocol", f"the runner at {self.url} sent no device description "
                                        f"({e})") from None
        return self._info

    def close(self) -> None:
        """Also from another thread: calls waiting for results return at once (at the latest
        after ``poll_s``) with ``runner_unavailable`` results, and their jobs that have not
        started yet are cancelled on the daemon."""
        self._closed = True
        with self._lock:
            active = list(self._active)
        self._cancel(active)
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================ spool


REQUEST_SUFFIX = ".request.json"
RESULT_SUFFIX = ".result.json"
ACCEPTED_SUFFIX = ".accepted.json"


class SpoolRunner:
    """Client of a daemon's spool directory (``geak-runner serve --spool DIR``)."""

    def __init__(self, directory, *, timeout: float = 3600.0, pickup_s: float = 60.0, poll_s: float = 0.2):
        self.dir = Path(directory)
        self.timeout, self.pickup_s, self.poll_s = timeout, pickup_s, poll_s
        if not self.dir.is_dir():
            raise ValueError(f"spool directory {self.dir} does not exist")

    device = "auto"
    """The daemon's own ``--device`` applies."""
    parallelism = UNKNOWN_PARALLELISM
    """Not asked of the daemon behind the spool."""

    def _runner_doc(self) -> Optional[dict]:
        try:
            return json.loads((self.dir / "runner.json").read_text())
        except (OSError, ValueError):
            return None

    def _check(self):
        doc = self._runner_doc()
        if doc is None:
            raise RunnerUnavailable("unreachable", f"no runner serves {self.dir} (no runner.json there)",
                                    hint="start `geak-runner serve --spool DIR` on the GPU node")
        if _major(str(doc.get("schema", ""))) != _major(SCHEMA):
            raise RunnerUnavailable("version", f"version mismatch: the runner serving {self.dir} speaks "
                                    f"'{doc.get('schema')}', this client '{SCHEMA}'")

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        jobs = _job_ids(requests)
        results: dict[int, EvalResult] = {}
        try:
            self._check()
            for jid, i in jobs.items():
                tmp = self.dir / f".{jid}.tmp"
                tmp.write_text(to_json(requests[i]), encoding="utf-8")
                os.replace(tmp, self.dir / (jid + REQUEST_SUFFIX))
            t0 = time.monotonic()
            pending = set(jobs)
            while pending:
                for jid in list(pending):
                    p = self.dir / (jid + RESULT_SUFFIX)
                    try:
                        text = p.read_text(encoding="utf-8")
                    except FileNotFoundError:
                        continue
                    try:
                        res = _parse_result(json.loads(text), "EvalResult")
                    except (ValueError, SchemaError) as e:
                        raise RunnerUnavailable("version", f"cannot read {p}: {e}") from None
                    i = jobs[jid]
                    res.id = requests[i].id
                    results[i] = res
                    pending.discard(jid)
                    for q in (p, self.dir / (jid + REQUEST_SUFFIX), self.dir / (jid + ACCEPTED_SUFFIX)):
                        q.unlink(missing_ok=True)
                if not pending:
                    break
                waited = time.monotonic() - t0
                if waited > self.timeout:
                    raise RunnerUnavailable("timeout", f"no result in {self.dir} within {self.timeout:g} s")
                if waited > self.pickup_s and all((self.dir / (j + REQUEST_SUFFIX)).exists() for j in pending) \
                        and not self._alive():
                    raise RunnerUnavailable("unreachable", f"no runner picked up the requests in {self.dir} "
                                            f"within {self.pickup_s:g} s",
                                            hint="is `geak-runner serve --spool DIR` running on the GPU node?")
                time.sleep(self.poll_s)
        except RunnerUnavailable as e:
            for i, r in enumerate(requests):
                results.setdefault(i, unavailable_result(r.id, e))
        finally:
            for jid, i in jobs.items():
                if i not in results or results[i].error and results[i].error.kind == "runner_unavailable":
                    (self.dir / (jid + REQUEST_SUFFIX)).unlink(missing_ok=True)
        return [results[i] for i in range(len(requests))]

    def _alive(self) -> bool:
        doc = self._runner_doc()
        return bool(doc and doc.get("alive_until", 0) > time.time())

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """The daemon starts its own workers; this asks for its device (a connection, checked)."""
        return self.device_info()

    def device_info(self) -> DeviceInfo:
        self._check()
        deadline = time.monotonic() + self.pickup_s
        while True:
            doc = self._runner_doc() or {}
            if doc.get("devices"):
                return from_dict(DeviceInfo, doc["devices"][0], "device")
            if time.monotonic() > deadline:
                raise RunnerUnavailable("unreachable", f"the runner serving {self.dir} has not reported its device")
            time.sleep(self.poll_s)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
