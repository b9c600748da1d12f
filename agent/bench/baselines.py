"""PyTorch baselines of a task, measured once per GPU and reused.

For a geak-format task with a ``<wrapper>_reference`` (PyTorch) in its file:

* ``eager``: the reference as target, the task's Triton wrapper as candidate — the runner checks
  that the first version computes what PyTorch computes, and on a GPU times both interleaved, so
  the speedup is "first version vs. torch eager";
* ``compile``: the same with ``torch.compile(reference)`` as target (Inductor; a GPU only —
  on a CPU Inductor emits C++, which says nothing about a GPU).

Timed results go into a JSON cache keyed by the GPU's name, the kind and the task's digest (a
hash of the text evaluated), so a second run on the same GPU — another agent, another strategy —
reuses them. Untimed results (the CPU interpreter) are never cached.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Optional

from runner.schema import EvalOptions, EvalRequest, Target

from agent.bench.tasks import Task

KINDS = ("eager", "compile")


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "geak" / "bench-baselines.json"


def baseline_request(task: Task, kind: str, options: EvalOptions) -> Optional[EvalRequest]:
    """The request that measures ``task``'s first version against its PyTorch reference, or None
    when the task has no reference."""
    if task.reference is None or task.format != "geak":
        return None
    req = task.request(options, target_symbol=task.reference)
    if kind == "compile":
        stem = Path(task.rel).stem
        gen = (Path(task.rel).parent / f"_geak_compiled_{stem}.py").as_posix()
        if gen.startswith("./"):
            gen = gen[2:]
        # Compiling in this thread: Inductor's pool of compile workers would otherwise outlive the
        # call, and the evaluator rejects work left running after a call.
        req.files[gen] = (task.text.rstrip("\n") + "\n\n\n# Added by geak bench: the reference under "
                          "torch.compile (Inductor).\nimport torch._inductor.config\n\n"
                          "torch._inductor.config.compile_threads = 1\n"
                          f"{task.reference}_compiled = torch.compile({task.reference})\n")
        req.target = Target(gen, f"{task.reference}_compiled")
    req.candidate = Target(task.rel, task.symbol)
    req.candidate_files = {}
    return req


class BaselineCache:
    """``{"<device>|<kind>|<digest>": {speedup, ref_ms, cand_ms, cases_timed, task}}`` in one JSON file."""

    def __init__(self, path: Optional[Path]):
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, dict] = {}
        if path is not None and path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                self.data = loaded if isinstance(loaded, dict) else {}
            except (OSError, json.JSONDecodeError):
                self.data = {}  # a damaged cache is rebuilt, not trusted

    @staticmethod
    def key(device: str, kind: str, digest: str) -> str:
        return f"{device}|{kind}|{digest}"

    def get(self, device: str, kind: str, digest: str) -> Optional[dict]:
        with self.lock:
            return self.data.get(self.key(device, kind, digest))

    def put(self, device: str, kind: str, digest: str, entry: dict) -> None:
        with self.lock:
            self.data[self.key(device, kind, digest)] = entry
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
            tmp.replace(self.path)
