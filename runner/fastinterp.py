"""The Triton CPU interpreter, without its repeated scans of ``triton.language``.

Worker side, interpreter only. Every call of a ``@triton.jit`` function from a kernel (``tl.max``,
``tl.sum``, ``tl.sigmoid``, the user's own helpers), once per program of the grid, makes the
interpreter (``triton.runtime.interpreter._patch_lang``) walk ``triton.language``,
``tl.tensor``, ``tl.math`` and ``tl.core`` with ``inspect.getmembers`` to find their builtins
and swap each for an interpreted version. The walk finds the same names every time: a row
softmax over 64 rows spent half of its interpreted run in it.

``install`` replaces ``_patch_builtin`` with one that remembers, per namespace, which names
have held a builtin, and swaps those that hold one now, in the same (sorted) order, through the
interpreter's own ``_patch_attr``. What it leaves patched is what the interpreter's own walk
leaves patched:

* a name's value only turns into a builtin again when a patch scope restores it, and every
  value such a scope took away was a builtin found by this function (the names are learnt
  before the first kernel runs, and only grow);
* a namespace that gains or loses an attribute (user code adding a builtin to ``tl``) is walked
  again, as the interpreter would walk it.

It is applied only where the interpreter's functions have the shape it was checked against
(Triton 3.x: ``_patch_builtin(pkg, builder, scope)``, ``_patch_attr``); elsewhere the
interpreter runs as shipped. ``tests/test_fastinterp.py`` runs kernels of every kind both ways
and compares the outputs bit for bit and the state of ``triton.language`` after each launch.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

OFF_ENV = "GEAK_STOCK_INTERPRETER"
"""Set to 1 to run the interpreter as shipped (for comparison)."""

_installed = False


def _fingerprint(pkg: Any) -> tuple:
    """Changes when a namespace (a module, or a class and its bases) gains or loses a name."""
    if inspect.ismodule(pkg):
        return (len(vars(pkg)),)
    return tuple(len(vars(c)) for c in getattr(pkg, "__mro__", (pkg,)))


def install() -> bool:
    """Swap in the remembering ``_patch_builtin``. Returns whether it did."""
    global _installed
    if _installed:
        return True
    if os.environ.get(OFF_ENV) == "1":
        return False
    try:
        from triton.runtime import interpreter as interp
        import triton.language as tl
    except Exception:
        return False
    stock = getattr(interp, "_patch_builtin", None)
    patch_attr = getattr(interp, "_patch_attr", None)
    is_builtin = getattr(getattr(tl, "core", None), "is_builtin", None)
    if not (callable(stock) and callable(patch_attr) and callable(is_builtin)
            and callable(getattr(interp, "_patch_lang", None))):
        return False
    try:
        if list(inspect.signature(stock).parameters) != ["pkg", "builder", "scope"] or \
                list(inspect.signature(patch_attr).parameters) != ["obj", "name", "member", "builder", "scope"]:
            return False
    except (TypeError, ValueError):
        return False

    known: dict[int, tuple[Any, tuple, list[str]]] = {}  # id(pkg) -> (pkg, fingerprint, sorted names)

    def walk(pkg: Any) -> list[str]:
        had = known.get(id(pkg))
        names = set(had[2]) if had is not None and had[0] is pkg else set()
        names.update(n for n, m in inspect.getmembers(pkg) if is_builtin(m))
        ordered = sorted(names)
        known[id(pkg)] = (pkg, _fingerprint(pkg), ordered)
        return ordered

    def patch_builtin(pkg, builder, scope):
        had = known.get(id(pkg))
        names = had[2] if had is not None and had[0] is pkg and had[1] == _fingerprint(pkg) else walk(pkg)
        for name in names:
            member = getattr(pkg, name, None)
            if is_builtin(member):
                patch_attr(pkg, name, member, builder, scope)

    # Learnt before any kernel runs, while every builtin is still one.
    for pkg in (tl, tl.tensor, getattr(tl, "math", None), tl.core, tl.core.tensor,
                getattr(tl.core, "tensor_descriptor_base", None)):
        if pkg is not None:
            walk(pkg)
    interp._patch_builtin = patch_builtin
    _installed = True
    return True
