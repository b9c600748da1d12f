"""The projects of the editor's documents: each document's project root and path, the project's
store and options, the text an evaluation reads (the editor's unsaved documents over the files
on disk), and the runner the editor's settings name."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterable, Optional

from pygls import uris

from geak_lsp.errors import UserFacing
from geak_lsp.settings import Settings
from geak_lsp.store import Store


class Projects:
    def __init__(self, warn: Callable[[str], None] = lambda m: None):
        self.warn = warn
        self._stores: dict[Path, Store] = {}
        self._roots: dict[str, tuple[Path, str]] = {}
        self.runner = None
        self._runner_key: Optional[tuple] = None
        self._runner_lock = threading.Lock()

    def project(self, uri: str) -> tuple[Path, str]:
        """(project root, path of the document relative to it); cached per document."""
        hit = self._roots.get(uri)
        if hit is None:
            from runner.source import find_project_root
            path = uris.to_fs_path(uri)
            if not path:
                raise UserFacing(f"{uri}: GEAK works on files on disk; save the document first")
            f = Path(path).resolve()
            root = find_project_root(f)
            hit = (root, f.relative_to(root).as_posix())
            self._roots[uri] = hit
        return hit

    def store(self, root: Path) -> Store:
        st = self._stores.get(root)
        if st is None:
            st = self._stores[root] = Store(root)
            if st.problem:
                self.warn("GEAK: " + st.problem)
        return st

    def options(self, root: Path, s: Settings):
        """The project's options with the editor's device."""
        from runner.config import ConfigError, project_options
        try:
            opts = project_options(root)
        except ConfigError as e:
            raise UserFacing(f"GEAK: {e}") from None
        opts.device = s.device
        return opts

    def overrides(self, uri: str, root: Path, rel: str, text: str,
                  open_documents: Iterable[tuple[str, str]]) -> dict[str, str]:
        """The document's text, and the unsaved text of the project's other open documents
        (``(uri, text)`` pairs)."""
        overrides = {rel: text}
        for other, source in open_documents:
            if other != uri:
                try:
                    r2, p2 = self.project(other)
                    if r2 == root:
                        overrides[p2] = source
                except (UserFacing, ValueError):
                    pass
        return overrides

    def request(self, uri: str, symbol: str, text: str, opts, open_documents: Iterable[tuple[str, str]]):
        """The runner's request for ``symbol`` of the document, its text being ``text``."""
        from runner.source import SourceError, build_request
        root, rel = self.project(uri)
        try:
            req, _, _ = build_request(f"{root / rel}::{symbol}", None, opts, root=root,
                                      overrides=self.overrides(uri, root, rel, text, open_documents), cwd=root)
        except SourceError as e:
            raise UserFacing(f"GEAK: {e.info.message}" + (f" — {e.info.hint}" if e.info.hint else "")) from None
        return req

    def runner_for(self, s: Settings):
        """The runner the settings name (one at a time: a new one when they change)."""
        key = (s.runner_url, s.device, s.workers)
        with self._runner_lock:
            if self.runner is not None and self._runner_key == key:
                return self.runner
            old = self.runner
            from runner.config import ConfigError
            from runner.serve.runners import open_runner
            try:
                self.runner = open_runner(s.runner_url or "local", s.device, s.workers)
            except ConfigError as e:
                raise UserFacing(f"geak.runner.url: {e}") from None
            self._runner_key = key
        if old is not None:
            threading.Thread(target=old.close, daemon=True).start()
        return self.runner

    def close(self, wait_s: float = 0.0) -> None:
        """Stop the runner (its idle workers), waiting at most ``wait_s``."""
        r = self.runner
        if r is not None:
            done = threading.Thread(target=r.close, daemon=True)
            done.start()
            if wait_s:
                done.join(wait_s)
