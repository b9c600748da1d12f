"""Structural comparison of outputs, with dtype-aware tolerances.

Tensors, tuples, lists, dicts, scalars and None are compared element by element; containers
must have the same length and keys (nothing is truncated), tensors the same shape, dtype and
device kind. Floating values pass when |actual - expected| <= atol * s + rtol * |expected|,
NaN only where the expected value is NaN, and infinities must match exactly. ``s`` is the
tensor's scale: the mean |expected| over its finite values, at least 1. A sum of many terms
that cancels to near zero carries the rounding error of its terms, not of its result, so two
correct reductions in different orders differ by about eps times the outputs' typical size;
``atol`` is counted in that unit. Outputs of magnitude 1 or less keep ``atol`` as it is.

Runs inside the worker (needs torch). The comparison is done on float64 copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..schema import Tolerance

DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-7, rtol=1e-7),
    "float32": Tolerance(atol=1e-5, rtol=1e-4),
    "float16": Tolerance(atol=1e-3, rtol=2e-3),
    "bfloat16": Tolerance(atol=1e-2, rtol=1.6e-2),
    "float8_e4m3fn": Tolerance(atol=1e-1, rtol=1.25e-1),
    "float8_e4m3fnuz": Tolerance(atol=1e-1, rtol=1.25e-1),
    "float8_e5m2": Tolerance(atol=2e-1, rtol=2.5e-1),
    "float8_e5m2fnuz": Tolerance(atol=2e-1, rtol=2.5e-1),
    "complex64": Tolerance(atol=1e-5, rtol=1e-4),
    "complex128": Tolerance(atol=1e-7, rtol=1e-7),
}
_PY_FLOAT = "float32"  # Python floats usually come from .item() of float32 results


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def tolerance_for(dtype: str, overrides: dict[str, Tolerance]) -> Tolerance:
    if dtype in overrides:
        return overrides[dtype]
    if "default" in overrides:
        return overrides["default"]
    return DEFAULT_TOLERANCES.get(dtype, Tolerance(atol=0.0, rtol=0.0))


@dataclass
class Comparison:
    ok: bool = True
    max_abs: float = 0.0
    max_rel: float = 0.0
    detail: Optional[str] = None
    structure: bool = False  # a difference of shape, type or length
    no_answer: bool = False  # the original's own results vary there: nothing can be checked
    number: bool = False  # the first difference is of a plain number (a test's .item(), a norm)

    def fail(self, detail: str) -> "Comparison":
        if self.ok:
            self.ok, self.detail = False, detail
        return self

    def structural(self, detail: str) -> "Comparison":
        """A difference of shape, type or length: no element error can be stated."""
        self.max_abs = self.max_rel = math.inf
        self.structure = self.structure or self.ok
        return self.fail(detail)

    def merge(self, other: "Comparison") -> None:
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        if not other.ok and self.ok:
            self.structure, self.number = other.structure, other.number
        if not other.ok:
            self.fail(other.detail or "mismatch")


def _fmt_index(shape, flat: int) -> str:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s if s else 0)
        flat //= s if s else 1
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _compare_tensor(exp: torch.Tensor, act: Any, path: str, tols: dict[str, Tolerance]) -> Comparison:
    c = Comparison()
    if not isinstance(act, torch.Tensor):
        return c.structural(f"{path}: expected a tensor, got {type(act).__name__}")
    if tuple(exp.shape) != tuple(act.shape):
        return c.structural(f"{path}: shape {tuple(act.shape)}, expected {tuple(exp.shape)}")
    if exp.dtype != act.dtype:
        return c.structural(f"{path}: dtype {dtype_name(act.dtype)}, expected {dtype_name(exp.dtype)}")
    if exp.device.type != act.device.type:
        return c.structural(f"{path}: on {act.device.type}, expected on {exp.device.type}")
    if exp.numel() == 0:
        return c
    dt = dtype_name(exp.dtype)
    if not (exp.is_floating_point() or exp.is_complex()):
        diff = exp != act
        n = int(diff.sum())
        if n:
            flat = int(diff.reshape(-1).nonzero()[0])
            e, a = exp.reshape(-1)[flat].item(), act.reshape(-1)[flat].item()
            c.max_abs = float((exp.to(torch.float64) - act.to(torch.float64)).abs().max()) \
                if exp.dtype != torch.bool else 1.0
            return c.fail(f"{path}{_fmt_index(exp.shape, flat)}: {a}, expected {e} "
                          f"({n} of {exp.numel()} elements differ; {dt} must match exactly)")
        return c
    if _same_values(exp, act):  # the usual case, at a tenth of the cost of the errors below
        return c
    tol = tolerance_for(dt, tols)
    e64, a64, err, bad, scale = _errors(exp, act, tol)
    e_nan, a_nan, e_inf = torch.isnan(e64), torch.isnan(a64), torch.isinf(e64)
    atol = tol.atol * scale
    c.max_abs = float(err.max())
    if bool((e_nan != a_nan).any() or (e_inf & (e64 != a64)).any()):
        c.max_abs = math.inf  # a NaN or an infinity where the other side has a number
    denom = torch.clamp(e64.abs(), min=max(atol, 1e-30))
    c.max_rel = math.inf if c.max_abs == math.inf else float((err / denom).max())
    n_bad = int(bad.sum())
    if n_bad:
        flat = int(bad.reshape(-1).nonzero()[0])
        e, a = e64.reshape(-1)[flat].item(), a64.reshape(-1)[flat].item()
        where = _fmt_index(e64.shape, flat)
        total = e64.numel()
        atol_text = f"atol={tol.atol:g}" + (f"·{scale:.3g} (the output's mean magnitude)" if scale > 1 else "")
        c.fail(f"{path}{where}: {a:.6g}, expected {e:.6g} ({n_bad} of {total} elements outside "
               f"{atol_text} + rtol={tol.rtol:g}·|expected| for {dt}; max abs error "
               f"{c.max_abs:.3g}, max rel error {c.max_rel:.3g})")
    return c


def _errors(exp: torch.Tensor, act: torch.Tensor, tol: Tolerance):
    """float64 views, absolute errors, the mask of elements outside the tolerance, and the
    output's mean magnitude that scales atol (floating-point or complex tensors of one shape)."""
    if exp.is_complex():
        e64 = torch.view_as_real(exp.resolve_conj()).to(torch.float64)
        a64 = torch.view_as_real(act.resolve_conj()).to(torch.float64)
    else:
        e64, a64 = exp.to(torch.float64), act.to(torch.float64)
    e_nan, a_nan = torch.isnan(e64), torch.isnan(a64)
    bad = e_nan != a_nan
    e_inf = torch.isinf(e64)
    bad |= e_inf & (e64 != a64)
    finite = ~(e_nan | a_nan | e_inf)
    err = torch.where(finite, (a64 - e64).abs(), torch.zeros((), dtype=torch.float64, device=e64.device))
    err = torch.where(torch.isinf(a64) & ~e_inf, torch.full((), math.inf, dtype=torch.float64,
                                                            device=e64.device), err)
    scale = max(1.0, float(e64[finite].abs().mean())) if bool(finite.any()) else 1.0
    bad |= err > tol.atol * scale + tol.rtol * e64.abs()
    return e64, a64, err, bad, scale


def outside(exp: torch.Tensor, act: Any, tols: Optional[dict[str, Tolerance]] = None) -> Optional[torch.Tensor]:
    """The elements of ``act`` that ``compare`` would call wrong against ``exp``, as a bool mask
    of ``exp``'s shape (None where the two are not comparable element by element)."""
    if not isinstance(act, torch.Tensor) or act.shape != exp.shape or act.dtype != exp.dtype \
            or exp.layout != torch.strided or act.layout != torch.strided:
        return None
    act = act.to(exp.device)
    if not (exp.is_floating_point() or exp.is_complex()):
        return exp != act
    bad = _errors(exp, act, tolerance_for(dtype_name(exp.dtype), tols or {}))[3]
    return bad.any(dim=-1) if exp.is_complex() else bad


def compare(expected: Any, actual: Any, tols: Optional[dict[str, Tolerance]] = None,
            path: str = "output") -> Comparison:
    tols = tols or {}
    if isinstance(expected, torch.Tensor):
        return _compare_tensor(expected, actual, path, tols)
    c = Comparison()
    if expected is None:
        return c if actual is None else c.structural(f"{path}: expected None, got {type(actual).__name__}")
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            return c.structural(f"{path}: expected a {type(expected).__name__} of {len(expected)}, got "
                          f"{type(actual).__name__}")
        if len(expected) != len(actual):
            return c.structural(f"{path}: {len(actual)} items, expected {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            c.merge(compare(e, a, tols, f"{path}[{i}]"))
        return c
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return c.structural(f"{path}: expected a dict, got {type(actual).__name__}")
        if set(expected) != set(actual):
            missing, extra = set(expected) - set(actual), set(actual) - set(expected)
            return c.structural(f"{path}: keys differ (missing {sorted(map(str, missing))}, "
                          f"unexpected {sorted(map(str, extra))})")
        for k in expected:
            c.merge(compare(expected[k], actual[k], tols, f"{path}[{k!r}]"))
        return c
    if isinstance(expected, bool) or isinstance(actual, bool):
        return c if expected is actual or (type(expected) is type(actual) and expected == actual) \
            else c.fail(f"{path}: {actual!r}, expected {expected!r}")
    if isinstance(expected, int) and not isinstance(actual, float):
        if not isinstance(actual, int):
            return c.structural(f"{path}: expected an int, got {type(actual).__name__}")
        return c if expected == actual else c.fail(f"{path}: {actual}, expected {expected}")
    if isinstance(expected, float) or isinstance(actual, float):
        if not isinstance(actual, (int, float)):
            return c.structural(f"{path}: expected a number, got {type(actual).__name__}")
        c.number = True  # kept only if this comparison fails
        t = tolerance_for(_PY_FLOAT, tols)
        e, a = float(expected), float(actual)
        if math.isnan(e) or math.isnan(a):
            return c if math.isnan(e) and math.isnan(a) else c.fail(f"{path}: {a}, expected {e}")
        if math.isinf(e) or math.isinf(a):
            return c if e == a else c.fail(f"{path}: {a}, expected {e}")
        c.max_abs = abs(a - e)
        c.max_rel = c.max_abs / max(abs(e), t.atol, 1e-30)
        if c.max_abs > t.atol + t.rtol * abs(e):
            c.fail(f"{path}: {a:.6g}, expected {e:.6g}")
        return c
    try:
        same = bool(expected == actual)
    except Exception:
        same = False
    return c if same else c.fail(f"{path}: {actual!r}, expected {expected!r}")


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Floating-point or complex tensors of one shape, dtype and device type: every element the
    same value (NaN where the other is NaN; an infinity only where the other has the same one)."""
    if a.is_complex():
        a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def bitwise_equal(a: Any, b: Any) -> bool:
    """True when two structures hold exactly the same values (NaN equal to NaN)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return _same_values(a, b)
        return bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            bitwise_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(bitwise_equal(a[k], b[k]) for k in a)
    return a is b or a == b


# --------------------------------------------------------------------------- helpers on structures


def tensors(obj: Any):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from tensors(o)


def map_tensors(obj: Any, fn) -> Any:
    """``obj`` with every tensor in it replaced by ``fn(tensor)``; tuples (named ones too), lists
    and dicts rebuilt around them, everything else kept."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(o, fn) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


def clone(obj: Any) -> Any:
    return map_tensors(obj, lambda t: t.detach().clone())


def summarize(obj: Any, names: Optional[list[str]] = None) -> str:
    """'x: float32[4096, 4096], dim: 1'."""

    def one(o: Any) -> str:
        if isinstance(o, torch.Tensor):
            return f"{dtype_name(o.dtype)}[{', '.join(map(str, o.shape))}]"
        if isinstance(o, (list, tuple)):
            inner = ", ".join(one(x) for x in o[:4]) + (", …" if len(o) > 4 else "")
            return f"({inner})" if isinstance(o, tuple) else f"[{inner}]"
        if isinstance(o, torch.dtype):
            return dtype_name(o)
        r = repr(o)
        return r if len(r) <= 24 else r[:21] + "..."

    if isinstance(obj, (list, tuple)):
        parts = [f"{names[i]}: {one(o)}" if names and i < len(names) else one(o) for i, o in enumerate(obj)]
        return ", ".join(parts)
    return one(obj)


def numel(obj: Any) -> int:
    return sum(t.numel() for t in tensors(obj))


def nbytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(obj))
