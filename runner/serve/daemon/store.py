"""The durable job queue: every accepted request and every result lives in SQLite.

A job is ``queued`` -> ``running`` -> ``done`` (or ``cancelled`` while queued). The row is
committed before the submitter hears "accepted", and a result is committed before anyone is
told it is ready, so a crash or ``kill -9`` loses nothing: at the next start, jobs that were
``running`` go back to the queue (``recover``) and finished results are served as before.

Submission is idempotent by the client's id: the same id with the same request returns the
existing job; the same id with a different request is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A job id (use ``fullmatch``)."""
STATES = ("queued", "running", "done", "cancelled")
SQLITE_MAGIC = b"SQLite format 3\x00"
DB_NAME = "jobs.sqlite3"
_COLUMNS = {"seq", "id", "digest", "request", "state", "origin", "lane", "attempts", "result", "delivered",
            "submitted", "started", "finished"}
"""The columns a job database must have (``notes`` is added to older ones)."""

log = logging.getLogger("geak-runner")

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS jobs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    digest     TEXT NOT NULL,
    request    TEXT NOT NULL,
    state      TEXT NOT NULL,
    origin     TEXT NOT NULL DEFAULT 'http',
    lane       INTEGER,
    attempts   INTEGER NOT NULL DEFAULT 0,
    result     TEXT,
    delivered  INTEGER NOT NULL DEFAULT 0,
    submitted  REAL NOT NULL,
    started    REAL,
    finished   REAL,
    notes      TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, seq);
"""


def digest(request_json: str) -> str:
    return hashlib.sha256(request_json.encode()).hexdigest()


class Conflict(ValueError):
    """The id is taken by a different request."""


@dataclass
class DaemonJob:
    id: str
    state: str
    origin: str
    attempts: int
    lane: Optional[int]
    submitted: float
    started: Optional[float]
    finished: Optional[float]
    request: Optional[str] = None
    result: Optional[str] = None

    def summary(self) -> dict:
        return {"id": self.id, "state": self.state, "attempts": self.attempts, "lane": self.lane,
                "submitted": self.submitted, "started": self.started, "finished": self.finished}


_COLS = "id, state, origin, attempts, lane, submitted, started, finished"


class StateError(Exception):
    """The job database cannot be used as it is: the message says why and what to do."""


def _create_db(path: Path) -> None:
    """A new, empty job database at ``path``, readable by this user only. Made under a temporary
    name and renamed, so ``path`` is never an empty or half-made file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
        p.unlink(missing_ok=True)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    db = sqlite3.connect(str(tmp), isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA_SQL)
    finally:
        db.close()
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


STATE_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal", "token", "daemon.lock",
               "worker-python")
"""The files the daemon opens in its state directory, by name (``scratch`` is a directory,
swept at start)."""


def _refuse_links(directory: Path) -> None:
    """None of the state directory's files may be a symbolic link: the daemon would read, chmod
    and write the file it points to (a job queue, a token, the launcher it executes) wherever
    that is, outside the private directory."""
    for name in STATE_FILES:
        p = directory / name
        if p.is_symlink():
            raise StateError(f"{p} is a symbolic link (to {os.readlink(p)}); the state directory's files "
                             "must be its own: replace the link with the file it points to, or give "
                             "another --state directory")


def _check_db_file(path: Path) -> None:
    """An existing database file must be a SQLite file of this user's; it is made private."""
    st = path.stat()
    if not os.path.isfile(path):
        raise StateError(f"{path} is not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise StateError(f"{path} belongs to another user (uid {st.st_uid}); give this daemon a --state "
                         "directory of its own")
    if st.st_size == 0:
        raise StateError(f"{path} is empty (0 bytes), so it holds no jobs; a state that lost its queue is "
                         "not started silently. If no jobs were queued, delete it (a missing file starts a "
                         "new state); otherwise restore it from a backup")
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise StateError(f"{path} is not a SQLite database (not geak-runner's job queue); move it away or "
                         "give another --state directory")


class Store:
    """Thread-safe: one connection behind a lock (each statement is short).

    ``directory`` holds ``jobs.sqlite3``: a missing file is a new, empty queue; an empty file,
    another user's, or one that is not geak-runner's database raises ``StateError``, and so does
    a symbolic link in the place of any of the directory's files (``STATE_FILES``)."""

    def __init__(self, directory: Path):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _refuse_links(directory)
        self.path = directory / DB_NAME
        if self.path.exists():
            _check_db_file(self.path)
        else:
            _create_db(self.path)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None,
                                   timeout=30)
        self._lock = threading.Lock()
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")  # a commit is on disk before we answer
                tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if "jobs" not in tables:
                    raise StateError(f"{self.path} is a SQLite database without geak-runner's jobs table "
                                     f"(it has: {', '.join(sorted(tables)) or 'no tables'}); move it away or "
                                     "give another --state directory")
                cols = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
                if not _COLUMNS <= cols:
                    raise StateError(f"{self.path}: its jobs table is not geak-runner's (missing "
                                     f"{', '.join(sorted(_COLUMNS - cols))}); move it away or give another "
                                     "--state directory")
                if "notes" not in cols:  # made by an older version
                    self._db.execute("ALTER TABLE jobs ADD COLUMN notes TEXT")
                self._db.executescript(_SCHEMA_SQL)
            if self.path.stat().st_mode & 0o077:  # made by an older version, under umask 022
                os.chmod(self.path, 0o600)
                log.warning("made %s private (it was readable by other users)", self.path)
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StateError(f"{self.path} cannot be read as a job database: {e}") from None
        except BaseException:
            self._db.close()
            raise

    def close(self):
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ submit

    def submit(self, items: list[tuple], origin: str = "http",
               max_queued: Optional[int] = None) -> list[tuple[DaemonJob, bool]]:
        """Insert ``(id, request_json)`` or ``(id, request_json, notes)`` items in one
        transaction (``notes``: flags for the result, as JSON-able dicts). Returns ``(job,
        created)`` per item. Raises ``Conflict`` (nothing inserted) when an id is taken by
        another request, and ``Busy`` when the new jobs would take the queue past ``max_queued``."""
        now = time.time()
        out: list[tuple[DaemonJob, bool]] = []
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                new = 0
                seen: dict[str, str] = {}
                plan = []
                for jid, text, *rest in items:
                    notes = json.dumps(rest[0]) if rest and rest[0] else None
                    d = digest(text)
                    if jid in seen:
                        if seen[jid] != d:
                            raise Conflict(f"id '{jid}' appears twice in the batch with different requests")
                        plan.append((jid, text, d, "dup", notes))
                        continue
                    seen[jid] = d
                    row = cur.execute("SELECT digest FROM jobs WHERE id=?", (jid,)).fetchone()
                    if row is not None:
                        if row[0] != d:
                            raise Conflict(f"id '{jid}' is already used by a different request")
                        plan.append((jid, text, d, "old", notes))
                    else:
                        plan.append((jid, text, d, "new", notes))
                        new += 1
                if max_queued is not None and new:
                    queued = cur.execute("SELECT COUNT(*) FROM jobs WHERE state='queued'").fetchone()[0]
                    if queued + new > max_queued:
                        raise Busy(queued, queued + new - max_queued)
                for jid, text, d, kind, notes in plan:
                    if kind == "new":
                        cur.execute("INSERT INTO jobs (id, digest, request, state, origin, submitted, notes) "
                                    "VALUES (?, ?, ?, 'queued', ?, ?, ?)", (jid, d, text, origin, now, notes))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            for jid, _, _, kind, _ in plan:
                out.append((self._get(jid), kind == "new"))
        return out

    # ------------------------------------------------------------------ scheduling

    def claim(self, lane: int) -> Optional[tuple[str, str, int, list]]:
        """Take the oldest queued job for ``lane``: ``(id, request_json, attempts, notes)`` or
        None. ``attempts`` counts this start; ``notes`` are the flags stored at submission."""
        with self._lock:
            # A claim lost to a power cut only runs the job again, so it need not wait for fsync
            # (the next durable commit writes it too); submissions and results do wait.
            self._db.execute("PRAGMA synchronous=NORMAL")
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                row = cur.execute("SELECT id, request, attempts, notes FROM jobs WHERE state='queued' ORDER BY seq "
                                  "LIMIT 1").fetchone()
                if row is not None:
                    cur.execute("UPDATE jobs SET state='running', lane=?, started=?, attempts=attempts+1 "
                                "WHERE id=?", (lane, time.time(), row[0]))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self._db.execute("PRAGMA synchronous=FULL")
        return (row[0], row[1], row[2] + 1, json.loads(row[3]) if row[3] else []) if row else None

    def finish(self, jid: str, result_json: str) -> bool:
        """Store a result once; False if the job was not running (finished or cancelled)."""
        with self._lock:
            cur = self._db.execute("UPDATE jobs SET state='done', result=?, finished=? "
                                   "WHERE id=? AND state='running'", (result_json, time.time(), jid))
            return cur.rowcount == 1

    def cancel(self, jid: str) -> Optional[str]:
        """Cancel a queued job. Returns the job's state after the call, None if unknown."""
        with self._lock:
            self._db.execute("UPDATE jobs SET state='cancelled', finished=? WHERE id=? AND state='queued'",
                             (time.time(), jid))
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (jid,)).fetchone()
        return row[0] if row else None

    def recover(self) -> list[tuple[str, int]]:
        """At start: jobs left ``running`` by a crash go back to the queue. Returns their
        ``(id, attempts)``."""
        with self._lock:
            rows = self._db.execute("SELECT id, attempts FROM jobs WHERE state='running'").fetchall()
            self._db.execute("UPDATE jobs SET state='queued', lane=NULL, started=NULL WHERE state='running'")
        return [(r[0], r[1]) for r in rows]

    def purge(self, older_than_s: float) -> int:
        """Forget finished and cancelled jobs that ended more than ``older_than_s`` ago (spool
        results not yet written out are kept). Returns how many."""
        with self._lock:
            cur = self._db.execute("DELETE FROM jobs WHERE state IN ('done', 'cancelled') AND finished < ? "
                                   "AND NOT (origin = 'spool' AND delivered = 0)",
                                   (time.time() - older_than_s,))
            return cur.rowcount

    def mark_delivered(self, jid: str):
        with self._lock:
            self._db.execute("UPDATE jobs SET delivered=1 WHERE id=?", (jid,))

    def undelivered(self, origin: str) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM jobs WHERE origin=? AND state IN ('done','cancelled') "
                                    "AND delivered=0", (origin,)).fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ reading

    def _get(self, jid: str, full: bool = False) -> Optional[DaemonJob]:
        cols = _COLS + (", request, result" if full else "")
        row = self._db.execute(f"SELECT {cols} FROM jobs WHERE id=?", (jid,)).fetchone()
        return DaemonJob(*row) if row else None

    def get(self, jid: str, full: bool = False) -> Optional[DaemonJob]:
        with self._lock:
            return self._get(jid, full)

    def result(self, jid: str) -> Optional[tuple[str, Optional[str]]]:
        """``(state, result_json)`` or None if the id is unknown."""
        with self._lock:
            row = self._db.execute("SELECT state, result FROM jobs WHERE id=?", (jid,)).fetchone()
        return (row[0], row[1]) if row else None

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        out = {s: 0 for s in STATES}
        out.update({r[0]: r[1] for r in rows})
        return out


class Busy(RuntimeError):
    def __init__(self, queued: int, excess: int = 1):
        super().__init__(f"the queue is full ({queued} jobs waiting)")
        self.queued = queued
        self.excess = excess
        """How many queued jobs must start before the refused submission fits."""

