"""geak.results: what the results view shows for a target (its runs, newest first, and its last
measurement), from the project's store."""

from __future__ import annotations

import dataclasses

from geak_lsp.errors import target_of
from geak_lsp.projects import Projects
from geak_lsp.targets import TargetCache


def results(arg, projects: Projects, targets: TargetCache) -> dict:
    uri, name = target_of("geak.results", arg)
    root, rel = projects.project(uri)
    found = targets.last(uri)
    target = found.by_name(name) if found is not None else None
    symbol = target.evaluated if target is not None else name
    st = projects.store(root)
    runs = st.runs(rel, symbol)
    latest = st.latest(rel, symbol)
    current = found.source_hash(target) if target is not None and not found.syntax_error else None
    return {"uri": uri, "name": name, "symbol": symbol, "path": rel, "source_hash": current,
            "runs": [dataclasses.asdict(r) for r in runs[:5]],
            "measurement": dataclasses.asdict(latest) if latest is not None else None}
