"""The HTTP API of ``geak-runner serve`` (aiohttp).

All bodies are JSON (``Content-Type: application/json``). Requests and results are the
``EvalRequest`` / ``EvalResult`` records of ``runner/schema.py``. Every route but
``/v1/health`` needs ``Authorization: Bearer TOKEN``. Requests from web pages (any ``Origin``
header) are refused, and so, on a loopback daemon, are ``Host`` names other than loopback
ones (DNS rebinding). Errors are ``{"error": {"code", "message"}}`` with a 4xx/5xx status;
"busy" answers carry ``Retry-After``.

  GET  /v1/health                      liveness, schema, whether a token is required
  GET  /v1/device                      the device of each lane
  GET  /v1/queue                       job counts, running, slots, queue limit
  POST /v1/jobs                        one EvalRequest, or {"requests": [EvalRequest, ...]}
  GET  /v1/jobs/{id}                   the job's state (and its result when done)
  GET  /v1/jobs/{id}/result?wait=S     the EvalResult (200) or, not yet done after S s, the state (202)
  POST /v1/jobs/{id}/cancel            cancel a queued job (also DELETE /v1/jobs/{id})
  POST /v1/results                     {"ids": [...], "wait": S}: results of those done, as soon as one is
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import Optional

from aiohttp import web

from runner.schema import SCHEMA, to_dict
from .scheduler import Scheduler
from .store import Busy, Conflict, Store
from .validate import Invalid, Policy, check_id, parse_request

log = logging.getLogger("geak-runner")

VERSION = "0.1.0"
MAX_BATCH = 256
MAX_WAIT_S = 60.0


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: Optional[int] = None):
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


def _error_response(status: int, code: str, message: str, retry_after: Optional[int] = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="geak-runner"'
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}


@web.middleware
async def errors_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except ApiError as e:
        return _error_response(e.status, e.code, e.message, e.retry_after)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app["max_body"]
        return _error_response(413, "too_large", f"the request body is larger than this runner accepts "
                               f"({limit // (1 << 20)} MiB; the daemon's --max-body-mb)")
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _error_response(e.status, _HTTP_CODES.get(e.status, "http_error"),
                               f"{e.reason}: {request.method} {request.path}")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("internal error handling %s %s", request.method, request.path)
        return _error_response(500, "internal", "internal error in the runner (see its log)")


def host_name(host: str) -> str:
    """``Host`` header -> the name without the port, lower case (``[::1]:8765`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def browser_guard(hosts: Optional[frozenset]):
    """Refuse what only a web page would send: an ``Origin`` header, a body that is not JSON
    (the content types a page may POST without asking first), and, when ``hosts`` is given
    (a loopback daemon), a ``Host`` that is not one of them (DNS rebinding)."""

    @web.middleware
    async def guard(request: web.Request, handler):
        origin = request.headers.get("Origin")
        if origin is not None:
            raise ApiError(403, "forbidden_origin", f"requests from web pages are refused (Origin: "
                           f"{origin[:100]}); this runner serves the geak CLI and editors")
        host = request.headers.get("Host")
        if hosts is not None and host is not None and host_name(host) not in hosts:
            raise ApiError(403, "forbidden_host", f"this runner does not answer to the host name "
                           f"'{host[:100]}' (it answers to {', '.join(sorted(hosts))}; the daemon's "
                           "--allow-host adds names, e.g. a reverse proxy's)")
        ctype = request.headers.get("Content-Type")
        if request.method in ("POST", "PUT", "PATCH") and (ctype is not None or request.body_exists) \
                and request.content_type != "application/json":
            raise ApiError(415, "unsupported_media_type", f"the body must be JSON, sent as Content-Type: "
                           f"application/json (got {(ctype or 'none')[:100]})")
        return await handler(request)

    return guard


def auth_middleware(token: str):
    expected = token.encode("utf-8")

    @web.middleware
    async def check(request: web.Request, handler):
        if request.path == "/v1/health":
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if not header:
            raise ApiError(401, "unauthorized", "this runner needs a token: send 'Authorization: Bearer "
                           "TOKEN' (GEAK_RUNNER_TOKEN for the geak CLI)")
        scheme, _, given = header.partition(" ")
        # Compare in constant time; a wrong scheme compares too, so timing tells nothing. Header
        # bytes that are not UTF-8 arrive as surrogates: replaced, never an error.
        ok = hmac.compare_digest(given.strip().encode("utf-8", "replace"), expected) and scheme.lower() == "bearer"
        if not ok:
            raise ApiError(401, "unauthorized", "the token was not accepted by this runner")
        return await handler(request)

    return check


class Api:
    def __init__(self, store: Store, scheduler: Scheduler, loop: asyncio.AbstractEventLoop,
                 policy: Optional[Policy] = None):
        self.store = store
        self.scheduler = scheduler
        self.loop = loop
        self.policy = policy or Policy()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._devices: Optional[list] = None
        scheduler.on_done(self._done_from_thread)

    # ------------------------------------------------------------------ completion wake-ups

    def _done_from_thread(self, jid: str):
        self.loop.call_soon_threadsafe(self._wake, jid)

    def _wake(self, jid: str):
        for ev in self._waiters.pop(jid, ()):
            ev.set()

    def _watch(self, ids, ev: asyncio.Event):
        for jid in ids:
            self._waiters.setdefault(jid, set()).add(ev)

    def _unwatch(self, ids, ev: asyncio.Event):
        for jid in ids:
            s = self._waiters.get(jid)
            if s is not None:
                s.discard(ev)
                if not s:
                    self._waiters.pop(jid, None)

    # ------------------------------------------------------------------ helpers

    async def _json(self, request: web.Request):
        if request.content_length is not None and request.content_length > request.app["max_body"]:
            raise web.HTTPRequestEntityTooLarge(max_size=request.app["max_body"],
                                                actual_size=request.content_length)
        raw = await request.read()
        if not raw:
            raise ApiError(400, "bad_request", "the request body is empty; send a JSON object")
        try:
            return await asyncio.to_thread(json.loads, raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, "bad_request", f"the request body is not JSON: {e}") from None
        except RecursionError:
            raise ApiError(400, "bad_request", "the request body is nested too deeply") from None

    @staticmethod
    def _wait_param(value, where: str) -> float:
        try:
            w = float(value)
        except (TypeError, ValueError):
            raise ApiError(400, "bad_request", f"{where} must be a number of seconds") from None
        if not (w >= 0):
            raise ApiError(400, "bad_request", f"{where} must be a number of seconds, 0 or more")
        return min(w, MAX_WAIT_S)

    @staticmethod
    def _check_id(jid, where: str = "id") -> str:
        try:
            return check_id(jid, where)
        except Invalid as e:
            raise ApiError(e.status, e.code, e.message) from None

    def _parse_request(self, data, where: str) -> tuple[str, str, list]:
        try:
            jid, text, flags = parse_request(data, where, policy=self.policy)
        except Invalid as e:
            raise ApiError(e.status, e.code, e.message) from None
        return jid, text, [to_dict(f) for f in flags]

    def _parse_submission(self, data) -> list[tuple[str, str, list]]:
        if isinstance(data, dict) and "requests" in data:
            items = data["requests"]
            if not isinstance(items, list) or not items:
                raise ApiError(400, "bad_request", "'requests' must be a non-empty list of EvalRequest objects")
            if len(items) > MAX_BATCH:
                raise ApiError(413, "too_large", f"a batch holds at most {MAX_BATCH} requests; got {len(items)}")
            return [self._parse_request(d, f"requests[{i}]") for i, d in enumerate(items)]
        return [self._parse_request(data, "EvalRequest")]

    def _job_doc(self, job) -> dict:
        doc = job.summary()
        if job.state == "done" and job.result:
            doc["result"] = json.loads(job.result)
        return doc

    # ------------------------------------------------------------------ routes

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "draining" if self.scheduler.draining else "ok",
                                  "schema": SCHEMA, "server": f"geak-runner/{VERSION}",
                                  "auth": request.app["auth"]})

    async def device(self, request: web.Request) -> web.Response:
        if self._devices is None:
            try:
                infos = await asyncio.to_thread(lambda: [lane.device_info() for lane in self.scheduler.lanes])
            except Exception as e:
                raise ApiError(503, "runner_unavailable", f"the runner's workers could not start: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            self._devices = [to_dict(d) for d in infos]
        return web.json_response({"devices": self._devices, "lanes": len(self.scheduler.lanes),
                                  "workers_per_lane": self.scheduler.lanes[0].workers})

    async def queue(self, request: web.Request) -> web.Response:
        counts = await asyncio.to_thread(self.store.counts)
        return web.json_response({"jobs": counts, "running": self.scheduler.running,
                                  "slots": self.scheduler.slots, "max_queue": self.scheduler.max_queue,
                                  "completed_since_start": self.scheduler.completed,
                                  "draining": self.scheduler.draining})

    async def submit(self, request: web.Request) -> web.Response:
        if self.scheduler.draining:
            raise ApiError(503, "draining", "the runner is shutting down; submit again when it is back",
                           retry_after=5)
        data = await self._json(request)
        # Off the event loop: checking a large batch must not hold up health checks and results.
        parsed = await asyncio.to_thread(self._parse_submission, data)
        del data
        if len(parsed) > self.scheduler.max_queue:
            raise ApiError(413, "batch_too_large", f"a batch of {len(parsed)} requests can never fit this "
                           f"runner's queue ({self.scheduler.max_queue}, its --max-queue); send smaller batches")
        try:
            jobs = await asyncio.to_thread(self.store.submit, parsed, "http", self.scheduler.max_queue)
        except Conflict as e:
            raise ApiError(409, "conflict", str(e)) from None
        except Busy as e:
            raise ApiError(429, "busy", f"the runner is busy: {e}; retry later",
                           retry_after=self.scheduler.retry_after(e.excess)) from None
        if any(created for _, created in jobs):
            self.scheduler.wake()
        body = {"jobs": [{**job.summary(), "created": created} for job, created in jobs]}
        return web.json_response(body, status=202 if any(c for _, c in jobs) else 200)

    async def job(self, request: web.Request) -> web.Response:
        jid = self._check_id(request.match_info["id"])
        job = await asyncio.to_thread(self.store.get, jid, True)
        if job is None:
            raise ApiError(404, "not_found", f"no job '{jid}' on this runner")
        return web.json_response(self._job_doc(job))

    async def result(self, request: web.Request) -> web.Response:
        jid = self._check_id(request.match_info["id"])
        wait = self._wait_param(request.query.get("wait", "0"), "wait")
        ev = asyncio.Event()
        self._watch([jid], ev)
        try:
            got = await asyncio.to_thread(self.store.result, jid)
            if got is None:
                raise ApiError(404, "not_found", f"no job '{jid}' on this runner")
            if got[0] in ("queued", "running") and wait > 0:
                try:
                    await asyncio.wait_for(ev.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                got = await asyncio.to_thread(self.store.result, jid)
        finally:
            self._unwatch([jid], ev)
        state, text = got
        if state == "done":
            return web.Response(text=text, content_type="application/json")
        if state == "cancelled":
            raise ApiError(410, "cancelled", f"job '{jid}' was cancelled before it ran")
        return web.json_response({"id": jid, "state": state}, status=202)

    async def results(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        if not isinstance(data, dict) or not isinstance(data.get("ids"), list) or not data["ids"]:
            raise ApiError(400, "bad_request", "expected {\"ids\": [job ids], \"wait\": seconds}")
        if len(data["ids"]) > 4 * MAX_BATCH:
            raise ApiError(413, "too_large", f"at most {4 * MAX_BATCH} ids at a time")
        ids = [self._check_id(j, "ids[]") for j in data["ids"]]
        wait = self._wait_param(data.get("wait", 0), "wait")
        ev = asyncio.Event()
        self._watch(ids, ev)
        try:
            doc = await asyncio.to_thread(self._collect, ids)
            if not doc["results"] and not doc["cancelled"] and doc["pending"] and wait > 0:
                try:
                    await asyncio.wait_for(ev.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                doc = await asyncio.to_thread(self._collect, ids)
        finally:
            self._unwatch(ids, ev)
        return web.Response(text=json.dumps(doc), content_type="application/json")

    def _collect(self, ids: list[str]) -> dict:
        doc: dict = {"results": {}, "pending": {}, "cancelled": [], "unknown": []}
        for jid in ids:
            got = self.store.result(jid)
            if got is None:
                doc["unknown"].append(jid)
            elif got[0] == "done":
                doc["results"][jid] = json.loads(got[1])
            elif got[0] == "cancelled":
                doc["cancelled"].append(jid)
            else:
                doc["pending"][jid] = got[0]
        return doc

    async def cancel(self, request: web.Request) -> web.Response:
        jid = self._check_id(request.match_info["id"])
        state = await asyncio.to_thread(self.store.cancel, jid)
        if state is None:
            raise ApiError(404, "not_found", f"no job '{jid}' on this runner")
        if state == "cancelled":
            return web.json_response({"id": jid, "state": "cancelled"})
        raise ApiError(409, "not_cancellable", f"job '{jid}' is {state}; only queued jobs can be cancelled"
                       + (" (a running evaluation finishes within its time limits)" if state == "running" else ""))


def make_app(store: Store, scheduler: Scheduler, token: str, max_body: int,
             loop: asyncio.AbstractEventLoop, policy: Optional[Policy] = None,
             hosts: Optional[frozenset] = None) -> web.Application:
    """``hosts``: the only ``Host`` names served (a loopback daemon), or None for any."""
    if not token:
        raise ValueError("the daemon always has a token")
    app = web.Application(client_max_size=max_body,
                          middlewares=[errors_middleware, browser_guard(hosts), auth_middleware(token)])
    app["max_body"] = max_body
    app["auth"] = True
    api = Api(store, scheduler, loop, policy)
    app["api"] = api
    app.router.add_get("/v1/health", api.health)
    app.router.add_get("/v1/device", api.device)
    app.router.add_get("/v1/queue", api.queue)
    app.router.add_post("/v1/jobs", api.submit)
    app.router.add_get("/v1/jobs/{id}", api.job)
    app.router.add_delete("/v1/jobs/{id}", api.cancel)
    app.router.add_get("/v1/jobs/{id}/result", api.result)
    app.router.add_post("/v1/jobs/{id}/cancel", api.cancel)
    app.router.add_post("/v1/results", api.results)
    return app
