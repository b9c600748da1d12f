"""The request's source trees on disk inside a worker, imported as the user's project.

The reference tree is ``request.files``; the candidate tree is the same overlaid with
``request.candidate_files``. Each is written under the worker's scratch directory and imported
with its own copies of the project's modules (a tree's modules leave ``sys.modules`` after its
import, so the other tree imports its own).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import Callable, Optional

SIDES = ("reference", "candidate")


class BadPath(Exception):
    pass


class Trees:
    def __init__(self, scratch: Path, files: dict[str, str], candidate_files: dict[str, str],
                 candidate_paths: set[str], interp: bool):
        self.scratch = scratch
        self.files, self.candidate_files = files, candidate_files
        self.candidate_paths = candidate_paths  # files that differ in the candidate's tree
        self.roots = {"reference": scratch / "ref", "candidate": scratch / "cand"}
        self.loaded: dict[str, list] = {}
        """Each side's modules, taken out of sys.modules after import."""
        self.interp = interp

    def write(self, side: str) -> None:
        root = self.roots[side]
        files = dict(self.files)
        if side == "candidate":
            files.update(self.candidate_files)
        for rel, text in files.items():
            p = (root / rel).resolve()
            if root.resolve() not in p.parents:
                raise BadPath(f"file path '{rel}' leaves the project")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")

    # ----------------------------------------------------------------- paths

    def user_path(self, filename: str) -> str:
        """A scratch path as the user knows it (project-relative), marked for the candidate."""
        for side, root in self.roots.items():
            try:
                rel = Path(filename).resolve().relative_to(root.resolve()).as_posix()
                return rel + (" (candidate)" if side == "candidate" and rel in self.candidate_paths else "")
            except ValueError:
                continue
        return filename

    def is_user_file(self, filename: str) -> bool:
        try:
            Path(filename).resolve().relative_to(self.scratch.resolve())
            return True
        except ValueError:
            return False

    def scrub(self, text: str) -> str:
        for root in self.roots.values():
            text = text.replace(str(root) + os.sep, "").replace(str(root.resolve()) + os.sep, "")
        return text.replace(str(self.scratch), "<scratch>")

    # ----------------------------------------------------------------- imports

    @staticmethod
    def module_name(root: Path, rel: str) -> tuple[str, list[str]]:
        """Dotted name for ``rel`` inside ``root`` and the sys.path entries it needs."""
        parts = Path(rel).with_suffix("").parts
        pkg_depth = 0
        for i in range(len(parts) - 1, 0, -1):
            if (root.joinpath(*parts[:i]) / "__init__.py").exists():
                pkg_depth += 1
            else:
                break
        top = len(parts) - 1 - pkg_depth
        name = ".".join(parts[top:])
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        base = root.joinpath(*parts[:top])
        paths = [str(base)]
        if str(root) not in paths:
            paths.append(str(root))
        return name, paths

    def device_ctx(self):
        if self.interp:
            from .guards import InterpreterDevice
            return InterpreterDevice()
        return contextlib.nullcontext()

    def import_module(self, side: str, rel: str, before: Optional[Callable[[Path], None]] = None):
        root = self.roots[side]
        name, paths = self.module_name(root, rel)
        saved_path = list(sys.path)
        before_mods = set(sys.modules)
        sys.path[:0] = paths
        try:
            if before is not None:
                before(root)
            with self.device_ctx():
                module = importlib.import_module(name)
        finally:
            sys.path[:] = saved_path
            # Take this tree's modules out of sys.modules so the other tree imports its own.
            for m in set(sys.modules) - before_mods:
                f = getattr(sys.modules[m], "__file__", None) or ""
                if f and self.is_user_file(f):
                    self.loaded.setdefault(side, []).append(sys.modules.pop(m))
        return module
