"""Spool mode: requests as files in a directory that client and GPU node share.

For clusters whose GPU nodes accept no inbound connections. The protocol:

* a client writes ``DIR/<id>.request.json`` (an EvalRequest) atomically: write a temporary
  name in DIR (a name not ending in ``.request.json``), then rename it;
* the daemon picks the file up (watchdog), queues it durably under ``<id>`` (the file name is
  the job id: submitting the same file twice runs it once), renames it to
  ``<id>.accepted.json`` (so a client sees it was taken), and when the evaluation is done
  writes ``DIR/<id>.result.json`` (an EvalResult) atomically: temp file, fsync, ``os.replace``;
* a request that cannot be read gets a result file too, with status ``rejected`` and error
  kind ``bad_request``;
* the client deletes the files when it has read the result;
* ``DIR/runner.json`` says which runner serves the directory (schema, devices, pid, host) and,
  refreshed every few seconds, ``alive_until`` (a Unix time).

Network file systems (NFS, Lustre, GPFS) do not deliver change events made on other hosts, so
the default observer polls the directory (``--spool-poll`` seconds); ``--spool-poll 0`` uses
the OS's native events (inotify), fine when everything runs on one host.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Optional

from runner.schema import SCHEMA, ErrorInfo, EvalResult, to_dict, to_json
from .scheduler import Scheduler
from .store import Conflict, Store
from .validate import Invalid, Policy, check_id, parse_request

log = logging.getLogger("geak-runner")

REQUEST_SUFFIX = ".request.json"
RESULT_SUFFIX = ".result.json"
ACCEPTED_SUFFIX = ".accepted.json"
HEARTBEAT_S = 10.0
FRESH_S = 5.0  # a file this young that is not yet valid JSON may still be being written


def write_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Spool:
    def __init__(self, directory: Path, store: Store, scheduler: Scheduler, max_body: int,
                 poll_s: float = 1.0, policy: Optional[Policy] = None):
        self.dir = directory
        self.store = store
        self.scheduler = scheduler
        self.max_body = max_body
        self.policy = policy or Policy()
        self.poll_s = poll_s
        self._observer = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._devices: Optional[list] = None
        scheduler.on_done(self._deliver)

    # ------------------------------------------------------------------ life cycle

    def start(self):
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver

        self.dir.mkdir(parents=True, exist_ok=True)
        self._announce()
        for jid in self.store.undelivered("spool"):  # finished while no one was writing results
            self._deliver(jid)
        spool = self

        class Handler(FileSystemEventHandler):
            def on_created(self, event):
                if not event.is_directory:
                    spool.take(Path(event.src_path))

            def on_modified(self, event):
                if not event.is_directory:
                    spool.take(Path(event.src_path))

            def on_moved(self, event):
                if not event.is_directory:
                    spool.take(Path(event.dest_path))

        self._observer = PollingObserver(timeout=self.poll_s) if self.poll_s > 0 else Observer()
        self._observer.schedule(Handler(), str(self.dir), recursive=False)
        self._observer.start()
        for p in sorted(self.dir.glob("*" + REQUEST_SUFFIX)):  # what arrived while we were down
            self.take(p)
        threading.Thread(target=self._heartbeat, daemon=True).start()

    def stop(self):
        self._stop.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(10)
        self._announce(alive=False)

    def _announce(self, alive: bool = True):
        write_atomic(self.dir / "runner.json", json.dumps({
            "schema": SCHEMA, "server": "geak-runner", "pid": os.getpid(), "host": socket.gethostname(),
            "alive_until": time.time() + 3 * HEARTBEAT_S if alive else 0, "devices": self._devices}, indent=2))

    def _heartbeat(self):
        try:
            self._devices = [to_dict(lane.device_info()) for lane in self.scheduler.lanes]
        except Exception as e:
            log.error("spool: the workers could not start: %s", e)
        while not self._stop.is_set():
            try:
                self._announce()
            except OSError as e:
                log.warning("spool: cannot write runner.json: %s", e)
            self._stop.wait(HEARTBEAT_S)

    # ------------------------------------------------------------------ requests in

    def take(self, path: Path):
        name = path.name
        if not name.endswith(REQUEST_SUFFIX) or name.startswith("."):
            return
        jid = name[: -len(REQUEST_SUFFIX)]
        with self._lock:  # several events for one file arrive close together
            try:
                check_id(jid, "the file name")
            except Invalid as e:
                log.warning("spool: ignoring %s: %s", name, e.message)
                return
            if (self.dir / (jid + RESULT_SUFFIX)).exists():
                return
            try:
                st = path.stat()
                if st.st_size > self.max_body:
                    raise Invalid(413, "too_large", f"{name} is {st.st_size} bytes; this runner accepts at "
                                  f"most {self.max_body} (--max-body-mb)")
                raw = path.read_bytes()
            except FileNotFoundError:
                return
            except Invalid as e:
                self._reject(jid, e.message)
                return
            try:
                data = json.loads(raw)
            except RecursionError:
                self._reject(jid, f"{name} is nested too deeply")
                return
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                if time.time() - st.st_mtime < FRESH_S:
                    return  # probably still being written; its next event brings it back
                self._reject(jid, f"{name} is not JSON: {e}")
                return
            try:
                _, text, flags = parse_request(data, name, jid=jid, policy=self.policy)
                jobs = self.store.submit([(jid, text, [to_dict(f) for f in flags])], origin="spool")
            except Invalid as e:
                self._reject(jid, e.message)
                return
            except Conflict as e:
                self._reject(jid, f"{e}; use a new file name for a new request")
                return
            try:
                os.replace(path, self.dir / (jid + ACCEPTED_SUFFIX))
            except FileNotFoundError:
                pass
        job, created = jobs[0]
        if created:
            log.info("spool: queued %s", jid)
            self.scheduler.wake()
        elif job.state in ("done", "cancelled"):
            self._deliver(jid)

    def _reject(self, jid: str, message: str):
        log.warning("spool: rejected %s: %s", jid, message)
        write_atomic(self.dir / (jid + RESULT_SUFFIX), to_json(EvalResult(
            status="rejected", correct=False, id=jid, message=message,
            error=ErrorInfo(kind="bad_request", side="harness", message=message)), indent=2))

    # ------------------------------------------------------------------ results out

    def _deliver(self, jid: str):
        job = self.store.get(jid, full=True)
        if job is None or job.origin != "spool":
            return
        if job.state == "done":
            write_atomic(self.dir / (jid + RESULT_SUFFIX), job.result)
        elif job.state == "cancelled":
            self._reject(jid, "the job was cancelled before it ran")
        else:
            return
        self.store.mark_delivered(jid)
