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


# --------------------------------------------------------------------------- libdevice

def _erf(x):
    import math

    import numpy as np
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _round_half_away(x):
    import numpy as np
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _numpy_table() -> dict:
    """libdevice's elementwise functions as numpy computes them (the CPU's libm), by name."""
    import numpy as np
    one = {
        "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "tan": np.tan, "sin": np.sin, "cos": np.cos,
        "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
        "atanh": np.arctanh, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "exp10": lambda x: np.power(10.0, x),
        "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
        "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "abs": np.abs, "fabs": np.abs,
        "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint,
        "round": _round_half_away, "erf": _erf, "rcp": lambda x: 1.0 / x, "square": np.square,
    }
    two = {"pow": np.power, "atan2": np.arctan2, "fmod": np.fmod, "hypot": np.hypot, "fmax": np.fmax,
           "fmin": np.fmin, "copysign": np.copysign, "div_rn": np.divide, "fdiv_rn": np.divide,
           "remainder": np.remainder, "nextafter": np.nextafter}
    pred = {"isnan": np.isnan, "isinf": np.isinf, "isfinited": np.isfinite, "signbit": np.signbit,
            "finitef": np.isfinite}
    return {"one": one, "two": two, "pred": pred}


def _libdevice_function(name: str, kind: str, np_fn):
    """An interpreted kernel's call of ``libdevice.<name>``: numpy on the tensors' data."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def data(a):
        if isinstance(a, tl.core.tensor):
            return a.handle.data, a
        if isinstance(a, tl.core.constexpr):
            a = a.value
        return np.asarray(a), None

    def fn(*args, _semantic=None, **kwargs):
        vals = [data(a) for a in args]
        like = next((t for _, t in vals if t is not None), None)
        arrays = [v for v, _ in vals]
        if like is not None:
            arrays = [np.broadcast_to(a, like.handle.data.shape) if a.ndim == 0 else a for a in arrays]
        with np.errstate(all="ignore"):
            out = np_fn(*arrays)
        if like is None:
            return out
        if kind == "pred":
            return tl.core.tensor(TensorHandle(np.asarray(out, dtype=np.bool_), tl.int1),
                                  like.type.with_element_ty(tl.int1) if like.type.is_block() else tl.int1)
        dtype = like.handle.data.dtype
        return tl.core.tensor(TensorHandle(np.asarray(out).astype(dtype), like.handle.dtype), like.type)

    fn.__name__ = name
    return fn


def install_libdevice() -> list[str]:
    """Under the interpreter, ``libdevice.f(x)`` (``triton.language.extra.libdevice`` and the
    CUDA and HIP ones) computes with numpy: Triton's interpreter runs ``tl.math`` but leaves
    libdevice's functions empty, so a kernel calling ``libdevice.tanh`` failed with "'NoneType'
    object has no attribute 'type'". On a GPU nothing changes (it is installed only by an
    interpreter worker). Returns the names installed."""
    import importlib
    table = _numpy_table()
    done = []
    for mod_name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
                     "triton.language.extra.hip.libdevice"):
        try:
            mod = importlib.import_module(mod_name)
        except Exception:
            continue
        for kind, fns in table.items():
            for name, np_fn in fns.items():
                if hasattr(mod, name):
                    setattr(mod, name, _libdevice_function(name, kind, np_fn))
                    done.append(f"{mod_name.rsplit('.', 2)[-2]}.{name}")
    return done
