"""Triton's compile cache for single-use workers (standard library and triton only).

Every worker compiles into a cache directory of its own (``TRITON_CACHE_DIR`` in its scratch
directory), so nothing a candidate writes there reaches another job. It also reads a shared
layer (``GEAK_TRITON_SHARED_CACHE``) that it sees read-only (a read-only bind mount in the
job's own mount namespace) and that only the pool writes: after a reference worker compiles,
the pool promotes its new entries (``promote``). So a kernel of the user's code compiles once
per runner, not once per worker, and candidate code can read that layer but never change it.
Where a job cannot have its own mount namespace, workers get no shared layer at all.

Triton picks this class up through ``TRITON_CACHE_MANAGER=runner.tcache:LayeredCacheManager``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from typing import Dict, Optional

SHARED_ENV = "GEAK_TRITON_SHARED_CACHE"
LAYER_ENV = "GEAK_TRITON_LAYER"  # this evaluation's layer of the shared cache (its reference's digest)
WARM = "_warm"  # the layer of what workers compile before any user code (their warm-up)


def shared_layers() -> list[str]:
    """The shared directories a worker reads, first to last: its evaluation's layer, then the
    warm-up's. Each reference has a layer of its own, so what one user's code compiled (or
    planted in its cache) is never loaded by an evaluation of another reference."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        return []
    layer = os.environ.get(LAYER_ENV, "")
    return [os.path.join(shared, x) for x in ((layer, WARM) if layer and "/" not in layer and layer != ".."
                                               else (WARM,))]

try:
    from triton.runtime.cache import FileCacheManager
except Exception:  # the pool imports promote() without triton
    FileCacheManager = object  # type: ignore[misc,assignment]


class LayeredCacheManager(FileCacheManager):  # type: ignore[misc,valid-type]
    """Writes go to this worker's own cache directory; reads fall back to the shared layer."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        self.shared_dir = None
        if not (override or dump):
            for layer in shared_layers():
                if os.path.isdir(os.path.join(layer, key)):
                    self.shared_dir = os.path.join(layer, key)
                    break

    def get_file(self, filename) -> Optional[str]:
        own = super().get_file(filename)
        if own is not None or self.shared_dir is None:
            return own
        path = os.path.join(self.shared_dir, filename)
        return path if os.path.exists(path) else None

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        own = super().get_group(filename)
        if own is not None or self.shared_dir is None:
            return own
        path = os.path.join(self.shared_dir, f"__grp__{filename}")
        try:
            with open(path) as f:
                children = json.load(f).get("child_paths")
        except (OSError, ValueError):
            return None
        if not isinstance(children, dict):
            return None
        out = {c: p for c, p in children.items()
               if isinstance(p, str) and os.path.dirname(p) == self.shared_dir and os.path.exists(p)}
        return out if len(out) == len(children) else None


MAX_ENTRY_BYTES = 256 << 20  # a compiled kernel's files are far smaller


def promote(private: str, shared: str) -> int:
    """Copy the cache entries (one directory per key) a worker compiled into a layer of the
    shared cache (``shared``: the layer of its reference, or the warm-up's), with group files
    pointing at their new place. Entries already there are kept. Only regular files are
    copied (never what a link points at: the user's code wrote this cache, and a link could
    name a file of the runner's), and only entries of a plausible size. Returns how many were
    added."""
    try:
        os.makedirs(shared, mode=0o755, exist_ok=True)
        keys = os.listdir(private)
    except OSError:
        return 0
    added = 0
    for key in keys:
        src, dst = os.path.join(private, key), os.path.join(shared, key)
        if os.path.exists(dst) or not os.path.isdir(src) or key.startswith("tmp"):
            continue
        if os.path.islink(src):
            continue
        entries = os.listdir(src)
        names = [n for n in entries if not n.startswith("tmp.")]
        if not names or len(names) != len(entries):
            continue  # being written (Triton writes through tmp.* directories)
        try:
            sts = [os.lstat(os.path.join(src, n)) for n in names]
        except OSError:
            continue
        if not all(stat.S_ISREG(st.st_mode) for st in sts) or sum(st.st_size for st in sts) > MAX_ENTRY_BYTES:
            continue
        # Kernels are groups (the group file is written last); launchers and driver helpers
        # (compiled with the C compiler on first use in a process) are single files.
        if any(n.endswith(".json") for n in names) and not any(n.startswith("__grp__") for n in names):
            continue
        tmp = tempfile.mkdtemp(prefix=".promote-", dir=shared)
        try:
            for n in names:
                s = os.path.join(src, n)
                if n.startswith("__grp__"):
                    with open(s) as f:
                        grp = json.load(f)
                    grp["child_paths"] = {c: os.path.join(dst, os.path.basename(p))
                                          for c, p in (grp.get("child_paths") or {}).items()}
                    with open(os.path.join(tmp, n), "w") as f:
                        json.dump(grp, f)
                else:
                    shutil.copyfile(s, os.path.join(tmp, n), follow_symlinks=False)
            os.chmod(tmp, 0o755)
            os.rename(tmp, dst)
            added += 1
        except (OSError, ValueError):
            shutil.rmtree(tmp, ignore_errors=True)
    return added
