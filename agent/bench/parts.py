"""A suite run in parts: which tasks a part runs, on which GPU, and the parts put into one table.

* **Which tasks.** ``select`` leaves out ``--exclude`` and orders the rest, by name or shuffled
  by a seed (``--order SEED``: any first part of that order is a random sample);
  ``--first N`` keeps the first N not yet measured and ``--shard I/N`` every N-th of those from
  the I-th (``shard``).
* **Several GPUs.** ``--gpus N`` runs one ``geak bench`` per GPU, each a subprocess seeing its
  own GPU through ``CUDA_VISIBLE_DEVICES`` (``visible_gpus``) with its own workers, the tasks
  dealt round them in their order (``deal``); GPU I's part is the run directory ``OUT/gpuI``
  (``run_parts``).
* **One table.** A part is a run directory: its ``state.json`` names the settings, the code
  that measured (``code_digest``: a digest of ``agent/`` and ``runner/``) and the device, with
  each task's record, and is written after every task, so a part whose process was killed
  still counts. ``merge`` puts parts into one table, a complete record (not stopped by the time
  budget, not a harness error) over one that is not, else the later part's, and refuses parts
  of other settings, code or device: one table measures one thing.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from agent.bench.suite import STATE_SCHEMA, TaskRecord, record_from_dict, stopped_by_call

PACKAGES = ("agent", "runner")
"""The code a table measures: the search and the evaluator."""


class PartsError(Exception):
    """Parts that cannot go into one table, or a part that cannot be read: the message says why."""


@functools.lru_cache(maxsize=None)
def code_digest(root: Optional[Path] = None) -> str:
    """What code measures: a digest of the package sources (``agent/``, ``runner/``), so that
    records are reused (``--resume``) and parts merged (``--merge``) only when the same code
    measured them."""
    root = root or Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for f in sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


# --------------------------------------------------------------------------- which tasks


def select(tasks: list, exclude: Optional[str] = None, order: Optional[int] = None) -> list:
    """The tasks less those ``exclude`` names (globs, comma-separated), by name, or in a random
    order fixed by the seed ``order``: any first part of that order is a random sample."""
    pats = [x.strip() for x in (exclude or "").split(",") if x.strip()]
    out = sorted((t for t in tasks if not any(fnmatch.fnmatch(t.name, p) for p in pats)), key=lambda t: t.name)
    if order is not None:
        random.Random(order).shuffle(out)
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` -> (I, N), 0 <= I < N; ValueError says what to give."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: give I/N, as 0/4") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {text!r}: I must be at least 0 and less than N")
    return i, n


def deal(items: Sequence, n: int) -> list[list]:
    """``items`` dealt round ``n`` hands in their order (the I-th hand: every n-th from the I-th),
    hands left empty dropped."""
    return [h for h in (list(items[i::n]) for i in range(n)) if h]


def same_files(tasks: list) -> list[tuple[str, str]]:
    """Pairs of task names that evaluate the same thing (``Task.digest``; the first name, the
    copy's): a folder copied into an earlier copy of itself lists every file twice, and a table
    counts each file once."""
    seen: dict[str, str] = {}
    pairs = []
    for t in sorted((t for t in tasks if not t.error), key=lambda t: (t.name.count("/"), t.name)):
        if t.digest in seen:
            pairs.append((seen[t.digest], t.name))
        else:
            seen[t.digest] = t.name
    return pairs


def visible_gpus(n: int, device: str, environ: Optional[dict] = None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value of each of ``n`` parts: the I-th GPU this process sees
    (the I-th of its own ``CUDA_VISIBLE_DEVICES``, else an index). On the interpreter with no
    ``CUDA_VISIBLE_DEVICES`` nothing is set (the parts still run apart). PartsError when the
    machine shows fewer than ``n``."""
    env = os.environ if environ is None else environ
    seen = env.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in seen.split(",") if x.strip()] if seen is not None else None
    if ids is None:
        if device == "interpreter":
            return [""] * n
        import torch
        ids = [str(i) for i in range(torch.cuda.device_count())]
    if len(ids) < n:
        raise PartsError(f"--gpus {n}: this machine shows {len(ids)} GPU(s)"
                         + (f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else "")
                         + f"; ask for at most {len(ids)}")
    return ids[:n]


def run_parts(parts: list[tuple[list[str], dict, Path]]) -> list[int]:
    """Each ``(command, environment, log)`` started at once as a subprocess, its output to its
    log; their exit codes, once every one has ended."""
    procs = []
    try:
        for cmd, env, log in parts:
            log.parent.mkdir(parents=True, exist_ok=True)
            f = open(log, "w", encoding="utf-8")
            procs.append((subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f))
        return [p.wait() for p, _ in procs]
    finally:
        for p, f in procs:
            if p.poll() is None:  # interrupted: end what was started here
                p.terminate()
                p.wait()
            f.close()


# --------------------------------------------------------------------------- one table


@dataclass
class Part:
    """A run directory as a part of a table."""

    path: Path
    settings: dict
    code: Optional[str]
    device: Optional[dict]
    records: list[TaskRecord] = field(default_factory=list)
    bench: dict = field(default_factory=dict)
    """Its ``bench.json`` where the run got that far (suite, notes); empty for a run cut short."""


def read_part(path: Path) -> Part:
    """``path/state.json`` (and ``bench.json`` where there is one) as a part."""
    f = Path(path) / "state.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise ValueError(f"not a {STATE_SCHEMA} file")
        records = [record_from_dict(r) for r in data.get("tasks", {}).values()]
    except (OSError, ValueError, TypeError) as e:
        raise PartsError(f"{path}: cannot read {f} ({e}); give the --out folder of a geak bench run") from None
    try:
        bench = json.loads((Path(path) / "bench.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        bench = {}
    return Part(Path(path), data.get("settings") or {}, data.get("code"), data.get("device"), records,
                bench if isinstance(bench, dict) else {})


def complete(rec: TaskRecord) -> bool:
    """A record that measured its task: not stopped by the call's time budget, not a harness
    error (a task whose own budget was spent is complete)."""
    return rec.error is None and not stopped_by_call(rec)


DEVICE_KEYS = ("name", "backend", "arch", "torch", "triton")
"""What must be equal of two parts' devices (the GPU, and the torch and Triton that ran there)."""


def _device(d: Optional[dict]) -> Optional[dict]:
    return {k: d.get(k) for k in DEVICE_KEYS} if d else None


def differences(parts: list[Part]) -> list[str]:
    """How the parts differ in settings, code or device, in words ("settings: trials 3 in A, 1
    in B"); empty when they can be one table."""
    out = []
    first = parts[0]
    for p in parts[1:]:
        keys = sorted(k for k in set(first.settings) | set(p.settings) if first.settings.get(k) != p.settings.get(k))
        if keys:
            out.append("settings: " + "; ".join(f"{k} {json.dumps(first.settings.get(k))} in {first.path}, "
                                               f"{json.dumps(p.settings.get(k))} in {p.path}" for k in keys))
        if first.code != p.code:
            out.append(f"code: {first.code} in {first.path}, {p.code} in {p.path}")
        a, b = _device(first.device), _device(p.device)
        if a and b and a != b:
            diff = [k for k in DEVICE_KEYS if a.get(k) != b.get(k)]
            out.append("device: " + "; ".join(f"{k} {a.get(k)} in {first.path}, {b.get(k)} in {p.path}" for k in diff))
    return out


def merge(parts: list[Part], digests: Optional[dict[str, str]] = None) -> list[TaskRecord]:
    """One record per task over ``parts`` (in the order given), by task name: a complete record
    over one that is not, else the later part's. With ``digests`` (task name -> the digest of
    its file now), records of other versions of a file are left out. PartsError when the parts
    differ in settings, code or device."""
    why = differences(parts)
    if why:
        raise PartsError("the parts differ in " + "; ".join(why) + ": one table needs one code, settings and device")
    kept: dict[str, TaskRecord] = {}
    for p in parts:
        for r in p.records:
            if digests is not None and digests.get(r.name) != r.digest:
                continue
            prior = kept.get(r.name)
            if prior is None or complete(r) or not complete(prior):
                kept[r.name] = r
    return [kept[k] for k in sorted(kept)]
