"""The same ``@triton.autotune`` choice on both sides of a comparison (inside the workers).

An autotuned kernel picks its config by timing it, once per key, in each process. Timings are
noisy (more so on a GPU shared with other jobs), so the reference's process and the candidate's
may pick different configs of the same kernel, whose results differ in rounding (a different
``num_warps`` sums in another order). Usually that stays within tolerance; in code whose math
overflows or cancels it does not, and the original would be called wrong against itself.

So the reference's process writes the configs its autotuners chose (per kernel and key, as the
config's position in the kernel's own list), and the candidate's process starts each autotuner
of the *same* kernel, with the *same* list of configs, from those choices: both sides then run
the config a plain run of the original would most likely have picked. A candidate that changes
a kernel's configs, or the key, autotunes by itself as before. The pins are lifted before
timing, where each side's autotuner decides for itself; in the original's check (the original
against itself) both sides are timed with the reference's choices instead, pinned in the
timing process's copy of the reference tree too: a plain run autotunes once, and the check
should not autotune twice more.

A kernel is known by the file it is defined in (relative to the project) and its global name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

FILE = "autotune.json"


def _autotuner_class():
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:  # no Triton: nothing is autotuned
        return None
    return Autotuner


def _unwrap(obj, cls):
    """The Autotuner in ``obj`` (an Autotuner, or a ``@triton.heuristics`` around one)."""
    for _ in range(4):
        if isinstance(obj, cls):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def autotuners(modules: list, root: Path) -> dict[str, Any]:
    """Every autotuner defined at the top of one of ``modules`` (a side's, imported from under
    ``root``): {"path/rel.py::name": Autotuner}."""
    cls = _autotuner_class()
    if cls is None:
        return {}
    root = root.resolve()
    found: dict[str, Any] = {}
    for module in modules:
        f = getattr(module, "__file__", None)
        if not f:
            continue
        try:
            rel = Path(f).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        for name, obj in list(vars(module).items()):
            at = _unwrap(obj, cls)
            if at is not None:
                found[f"{rel}::{name}"] = at
    return found


def _configs(at) -> list[str]:
    return [str(c) for c in at.configs]


def _plain_key(key) -> Optional[list]:
    if isinstance(key, tuple) and all(isinstance(k, (int, float, str, bool)) or k is None for k in key):
        return list(key)
    return None


def choices(tuners: dict[str, Any]) -> dict[str, dict]:
    """What each autotuner chose so far: {kernel: {"configs": [...], "chosen": [[key, index]]}}."""
    out: dict[str, dict] = {}
    for name, at in tuners.items():
        chosen = []
        for key, config in dict(getattr(at, "cache", {}) or {}).items():
            plain = _plain_key(key)
            if plain is None:
                continue
            index = next((i for i, c in enumerate(at.configs) if c is config), None)
            if index is None:
                index = next((i for i, c in enumerate(at.configs) if str(c) == str(config)), None)
            if index is not None:
                chosen.append([plain, index])
        if chosen:
            out[name] = {"configs": _configs(at), "chosen": chosen}
    return out


def save(xdir: Path, modules: list, root: Path) -> None:
    """In the reference's process, after a run: write its choices so far (an autotuner's cache
    keeps every key it met) to the exchange directory. The file is only written here, never read
    back: the candidate's process can write into that directory too. Written beside and renamed
    into place, like every exchange file, so a link planted under its name is replaced, not followed."""
    found = choices(autotuners(modules, root))
    if not found:
        return
    path = xdir / FILE
    tmp = xdir / f"{FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(found))
    os.replace(tmp, path)


class Pins:
    """In the candidate's process: the reference's choices set into matching autotuners."""

    def __init__(self) -> None:
        self.set: list[tuple[Any, tuple, Any]] = []  # (autotuner, key, config)
        self.kernels: set[str] = set()

    def apply(self, xdir: Path, modules: list, root: Path) -> None:
        path = xdir / FILE
        if not path.exists():
            return
        try:
            wanted = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        for name, at in autotuners(modules, root).items():
            entry = wanted.get(name)
            if not isinstance(entry, dict) or entry.get("configs") != _configs(at):
                continue  # another kernel, or other configs: it autotunes by itself
            for key, index in entry.get("chosen", []):
                if not (isinstance(key, list) and isinstance(index, int) and 0 <= index < len(at.configs)):
                    continue
                k = tuple(key)
                if k in at.cache:
                    continue
                at.cache[k] = at.configs[index]
                self.set.append((at, k, at.configs[index]))
                self.kernels.add(name)

    def lift(self) -> None:
        """Before timing: each autotuner decides for itself again."""
        for at, key, config in self.set:
            if at.cache.get(key) is config:
                del at.cache[key]
        self.set.clear()
