"""A benchmark suite on disk -> tasks -> the runner's requests.

``load_suite(DIR, format)`` reads every ``*.py`` under DIR (``--format auto`` tells the formats
apart per file), adapts each task file (``formats.adapt``) and, with ``--candidates CDIR``,
finds each task's candidate files: ``CDIR/<stem>.py`` or several samples ``CDIR/<stem>/*.py``
(for pass@k). Requests are built with the runner's own ``build_request``, with the adapted text
passed as an editor override, so nothing is written into the user's checkout.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from runner.schema import EvalOptions, EvalRequest, Target
from runner.source import SourceError, build_request, find_project_root

from agent.bench.formats import FORMATS, Adapted, FormatError, adapt, candidate_text, detect

SKIP_DIRS = {"__pycache__", ".git", ".geak", ".venv", "node_modules"}


class SuiteError(Exception):
    """Bad input for a whole run (no tasks, a directory that does not exist, no task of that
    name): the message says what to do. A single task file that does not fit its format is not
    one: that task carries ``error`` and the rest run."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.hint = hint


@dataclass
class Task:
    name: str
    """The file's path relative to the suite directory, without ``.py`` (unique in a run)."""
    path: Path
    format: str
    symbol: str
    text: str
    """The adapted text the runner evaluates."""
    root: Path
    reference: Optional[str] = None
    candidates: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: Optional[str] = None
    """Why this task cannot run (file:line and the reason): reported as a harness error."""

    @property
    def rel(self) -> str:
        return self.path.resolve().relative_to(self.root).as_posix()

    @property
    def digest(self) -> str:
        """Hash of what is evaluated (the adapted text and the symbol): baselines and resumed
        results are reused only while it is the same."""
        return hashlib.sha256(f"{self.format}\0{self.symbol}\0{self.text}".encode()).hexdigest()[:16]

    def request(self, options: EvalOptions, candidate: Optional[Path] = None,
                candidate_symbol: Optional[str] = None, target_symbol: Optional[str] = None) -> EvalRequest:
        """The request for this task: the target alone, against ``candidate`` (a file in the
        task's format), or, with ``target_symbol``, another callable of the same file (baselines)."""
        if self.error:
            raise SuiteError(self.error)
        sym = target_symbol or self.symbol
        req, _, _ = build_request(f"{self.path}::{sym}", None, options, root=self.root,
                                  overrides={self.rel: self.text}, cwd=Path("/"))
        if candidate is not None:
            ctext = candidate.read_text(encoding="utf-8")
            if self.format == "kernelbench":
                # ModelNew lives in its own file next to the task's.
                crel = str(Path(self.rel).parent / f"_candidate_{self.path.stem}.py").lstrip("./")
                req.candidate = Target(crel, candidate_symbol or "ModelNew")
                req.candidate_files = {crel: ctext}
            else:
                merged = candidate_text(self.format, self.text, ctext)
                if self.format in ("tritonbench", "rocm"):
                    merged = adapt(merged, self.rel, self.format, self.symbol).text
                req.candidate = Target(self.rel, candidate_symbol or self.symbol)
                req.candidate_files = {self.rel: merged}
        return req


def _task_files(directory: Path, pattern: Optional[str]) -> list[Path]:
    if directory.is_file():
        return [directory]
    files = []
    for p in sorted(directory.rglob("*.py")):
        if any(part in SKIP_DIRS or part.startswith(".") for part in p.relative_to(directory).parts[:-1]):
            continue
        if p.name == "__init__.py" or p.name.startswith("_candidate_"):
            continue
        name = p.relative_to(directory).with_suffix("").as_posix()
        if pattern and not any(fnmatch.fnmatch(name, pat.strip()) or fnmatch.fnmatch(p.stem, pat.strip())
                               for pat in pattern.split(",")):
            continue
        files.append(p)
    return files


def _no_such_task(directory: Path, pattern: str) -> SuiteError:
    """``--tasks`` matched nothing: the names there are, the closest to what was asked first."""
    import difflib
    names = [p.relative_to(directory).with_suffix("").as_posix() for p in _task_files(directory, None)]
    if not names:
        return SuiteError(f"{directory}: no task files (*.py) at all", "name the folder that holds the task files")
    wanted = [w.strip() for w in pattern.split(",") if w.strip()]
    close: list[str] = []
    for w in wanted:
        close += [n for n in difflib.get_close_matches(w, names, n=5, cutoff=0.4) if n not in close]
        close += [n for n in names if w.lower().strip("*") and w.lower().strip("*") in n.lower() and n not in close]
    rest = [n for n in names if n not in close]
    shown = close + rest
    listing = ", ".join(shown[:30]) + (f", ... ({len(shown) - 30} more)" if len(shown) > 30 else "")
    return SuiteError(f"no task in {directory} matches --tasks '{pattern}'",
                      (f"did you mean {', '.join(close[:3])}? " if close else "")
                      + f"the tasks there: {listing} (--tasks takes names or globs, comma-separated)")


def _candidates_for(cdir: Path, name: str, stem: str) -> list[Path]:
    for base in (name, stem):
        f = cdir / f"{base}.py"
        if f.is_file():
            return [f]
        d = cdir / base
        if d.is_dir():
            return sorted(p for p in d.glob("*.py") if p.is_file())
    return []


def load_suite(directory: Path, fmt: str = "auto", pattern: Optional[str] = None,
               candidates: Optional[Path] = None) -> tuple[list[Task], list[str]]:
    """Tasks of a suite, and notes for people (files that are not tasks, left-out harness code)."""
    directory = Path(directory)
    if not directory.exists():
        raise SuiteError(f"{directory}: no such directory", "name the folder that holds the task files")
    if fmt != "auto" and fmt not in FORMATS:
        raise SuiteError(f"unknown format '{fmt}'", "use one of auto, " + ", ".join(FORMATS))
    if candidates is not None and not candidates.is_dir():
        raise SuiteError(f"{candidates}: no such directory (--candidates)",
                         "name a folder with one <task>.py (or a folder <task>/ of samples) per task")
    directory = directory.resolve()
    base = directory if directory.is_dir() else directory.parent
    tasks: list[Task] = []
    notes: list[str] = []
    not_tasks: list[str] = []
    files = _task_files(directory, pattern)
    if pattern and not files and directory.is_dir():
        raise _no_such_task(directory, pattern)
    for f in files:
        name = f.relative_to(base).with_suffix("").as_posix()
        root = find_project_root(f)
        rel = f.resolve().relative_to(root.resolve()).as_posix()
        use = fmt if fmt != "auto" else "?"
        try:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise FormatError(rel, f"cannot read: {e}") from None
            found = detect(text, rel)
            use = found if fmt == "auto" else fmt
            if found is None:  # not a task in any format (a helper module, a README's code)
                not_tasks.append(name)
                continue
            if fmt != "auto" and found is not None and found != fmt:
                raise FormatError(rel, f"looks like the {found} format, not {fmt}",
                                  hint=f"use --format {found} or --format auto")
            a: Adapted = adapt(text, rel, use)
        except FormatError as e:
            # This task is reported as a harness error; the others run.
            tasks.append(Task(name=name, path=f, format=use or "?", symbol="?", text="", root=root.resolve(),
                              error=str(e) + (f" ({e.hint})" if e.hint else "")))
            continue
        t = Task(name=name, path=f, format=use, symbol=a.symbol, text=a.text, root=root.resolve(),
                 reference=a.reference, notes=list(a.notes))
        if candidates is not None:
            t.candidates = _candidates_for(candidates, name, f.stem)
            if not t.candidates:
                t.notes.append(f"no candidate in {candidates} (looked for {f.stem}.py and {f.stem}/*.py)")
        tasks.append(t)
    if not_tasks:
        notes.append(f"{len(not_tasks)} file(s) are not tasks in any format and were left out: "
                     + ", ".join(not_tasks[:8]) + (" ..." if len(not_tasks) > 8 else ""))
    if not tasks:
        raise SuiteError(f"{directory}: no benchmark tasks found" + (f" matching '{pattern}'" if pattern else ""),
                         "a task file is a geak task (wrapper + get_inputs), a TritonBench-G or GEAK ROCm "
                         "file (tests below a line of 146 '#'), or a KernelBench file (Model, get_inputs, "
                         "get_init_inputs)")
    return tasks, notes


def check_requests(tasks: list[Task], options: EvalOptions) -> list[Task]:
    """Build every task's request once up front; a task whose request cannot be built (its
    file's syntax, a missing symbol, no inputs) gets ``error`` and is reported, not run.
    Returns the tasks with an error."""
    for t in tasks:
        if t.error:
            continue
        try:
            t.request(options)
        except SourceError as e:
            msg = e.info.message if e.info.message.startswith(t.rel) else f"{t.rel}: {e.info.message}"
            t.error = msg + (f" ({e.info.hint})" if e.info.hint else "")
    return [t for t in tasks if t.error]
