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
import tempfile
from typing import Dict, Optional

SHARED_ENV = "GEAK_TRITON_SHARED_CACHE"

try:
    from triton.runtime.cache import FileCacheManager
except Exception:  # the pool imports promote() without triton
    FileCacheManager = object  # type: ignore[misc,assignment]


class LayeredCacheManager(FileCacheManager):  # type: ignore[misc,valid-type]
    """Writes go to this worker's own cache directory; reads fall back to the shared layer."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        shared = os.environ.get(SHARED_ENV)
        self.shared_dir = os.path.join(shared, key) if shared and not (override or dump) else None

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


def promote(private: str, shared: str) -> int:
    """Copy the cache entries (one directory per key) a trusted worker compiled into the shared
    layer, with group files pointing at their new place. Entries already there are kept.
    Returns how many were added."""
    try:
        keys = os.listdir(private)
    except OSError:
        return 0
    added = 0
    for key in keys:
        src, dst = os.path.join(private, key), os.path.join(shared, key)
        if os.path.exists(dst) or not os.path.isdir(src) or key.startswith("tmp"):
            continue
        entries = os.listdir(src)
        names = [n for n in entries if not n.startswith("tmp.")]
        if not names or len(names) != len(entries):
            continue  # being written (Triton writes through tmp.* directories)
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
                    shutil.copy2(s, os.path.join(tmp, n))
            os.chmod(tmp, 0o755)
            os.rename(tmp, dst)
            added += 1
        except (OSError, ValueError):
            shutil.rmtree(tmp, ignore_errors=True)
    return added
