"""Input cases, found in the user's module by convention (inside the worker).

1. ``get_inputs(**case)`` with an optional ``INPUT_CASES = [dict(...), ...]`` (several shapes),
   and ``get_init_inputs()`` for ``nn.Module`` targets (KernelBench);
2. ``test_*()`` functions with no parameters that call the target (TritonBench-G);
3. pytest-style ``test_*(a, b, ...)`` functions with ``@pytest.mark.parametrize`` (GEAK ROCm).

For 2 and 3 the test runs for real with the target replaced by a recorder: the arguments of
each call become a case, and the test's own verdict is reported. Every trial draws new inputs
under its own seed.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .compare import clone

MAX_PARAM_SETS = 32


class InputError(Exception):
    """The user's input convention is present but does not produce usable inputs."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.hint = hint


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % (2 ** 32))
    except Exception:
        pass


@dataclass
class Call:
    args: tuple
    kwargs: dict


@dataclass
class Case:
    label: str
    make: Callable[[int], Call]
    """seed -> a fresh Call (new tensors each time)."""


@dataclass
class Discovery:
    convention: str
    cases: list[Case]
    init: Optional[Callable[[int], Call]] = None
    notes: list[str] = field(default_factory=list)
    """The user's own test failing on the current code, parameter sets left out, and so on."""


def _as_call(value: Any, where: str) -> Call:
    if isinstance(value, dict):
        return Call((), dict(value))
    if isinstance(value, (list, tuple)):
        return Call(tuple(value), {})
    if isinstance(value, torch.Tensor):
        return Call((value,), {})
    raise InputError(f"{where} returned {type(value).__name__}; expected a list of arguments",
                     hint="return a list, e.g. return [x, y]")


def _label(case: dict) -> str:
    def v(x):
        return str(x).replace("torch.", "")
    return ", ".join(f"{k}={v(x)}" for k, x in case.items()) or "default"


def discover(module: Any, symbol: str, is_module_target: bool) -> Discovery:
    get_inputs = getattr(module, "get_inputs", None)
    if callable(get_inputs):
        return _from_get_inputs(module, get_inputs, is_module_target)
    tests = [(n, f) for n, f in vars(module).items()
             if n.startswith("test") and callable(f) and getattr(f, "__module__", None) == module.__name__]
    if tests and not is_module_target:
        return _from_tests(module, symbol, tests)
    raise InputError(f"no inputs to run '{symbol}' on",
                     hint=f"add get_inputs() returning the arguments for {symbol}, or a test_*() "
                          f"function that calls {symbol}")


def _from_get_inputs(module: Any, get_inputs: Callable, is_module_target: bool) -> Discovery:
    raw = getattr(module, "INPUT_CASES", None)
    if raw is None:
        cases_kw: list[dict] = [{}]
        convention = "kernelbench"
    else:
        if not isinstance(raw, (list, tuple)) or not all(isinstance(c, dict) for c in raw) or not raw:
            raise InputError("INPUT_CASES must be a non-empty list of dicts of get_inputs() "
                             "keyword arguments", hint="e.g. INPUT_CASES = [dict(n=1024), dict(n=4096)]")
        cases_kw = [dict(c) for c in raw]
        convention = "cases"

    def maker(kw: dict) -> Callable[[int], Call]:
        def make(seed: int) -> Call:
            seed_all(seed)
            try:
                value = get_inputs(**kw)
            except TypeError as e:
                if "argument" in str(e):
                    raise InputError(f"get_inputs({_label(kw)}) failed: {e}",
                                     hint="each INPUT_CASES entry must name get_inputs() parameters") from e
                raise
            return _as_call(value, "get_inputs()")
        return make

    get_init = getattr(module, "get_init_inputs", None)

    def init(seed: int) -> Call:
        seed_all(seed)
        return _as_call(get_init(), "get_init_inputs()") if callable(get_init) else Call((), {})

    return Discovery(convention=convention, cases=[Case(_label(kw), maker(kw)) for kw in cases_kw],
                     init=init if is_module_target else None)


def _param_sets(fn: Callable) -> tuple[list[dict], list[str]]:
    """Expand @pytest.mark.parametrize marks (without running pytest)."""
    notes = []
    grids: list[list[dict]] = []
    for mark in reversed(getattr(fn, "pytestmark", []) or []):
        if getattr(mark, "name", "") != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            if hasattr(v, "values") and hasattr(v, "marks"):  # pytest.param(...)
                vals = tuple(v.values)
            elif len(names) == 1:
                vals = (v,)
            else:
                vals = tuple(v)
            rows.append(dict(zip(names, vals)))
        grids.append(rows)
    sets = [dict(itertools.chain.from_iterable(d.items() for d in combo))
            for combo in itertools.product(*grids)] if grids else [{}]
    if len(sets) > MAX_PARAM_SETS:
        step = len(sets) / MAX_PARAM_SETS
        notes.append(f"{fn.__name__}: {len(sets)} parameter sets, {MAX_PARAM_SETS} of them used")
        sets = [sets[int(i * step)] for i in range(MAX_PARAM_SETS)]
    return sets, notes


def _runnable_sets(name: str, fn: Callable, notes: list[str]) -> Optional[tuple[list[dict], bool]]:
    """The parameter sets a test can run with (pytest marks expanded; a test that needs a
    fixture is left out, with a note), and whether it takes parameters; None if it cannot be
    inspected."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    sets, n = _param_sets(fn)
    notes += n
    out = []
    for ps in sets:
        missing = [p for p, prm in params.items() if p not in ps and prm.default is prm.empty]
        if missing:
            notes.append(f"{name}: left out, it needs the pytest fixture(s) {', '.join(missing)}")
            break
        out.append(ps)
    return out, bool(params)


def _from_tests(module: Any, symbol: str, tests: list[tuple[str, Callable]]) -> Discovery:
    real = getattr(module, symbol)
    notes: list[str] = []
    plans: list[tuple[str, Callable, dict]] = []
    convention = "tritonbench"
    for name, fn in tests:
        found = _runnable_sets(name, fn, notes)
        if found is None:
            continue
        sets, takes_params = found
        if takes_params:
            convention = "pytest"
        plans += [(name, fn, ps) for ps in sets]

    cache: dict[tuple[int, int], tuple[list[Call], Optional[str]]] = {}

    def capture(i: int, seed: int) -> tuple[list[Call], Optional[str]]:
        if (i, seed) not in cache:
            _, fn, ps = plans[i]
            calls: list[Call] = []

            def recorder(*args, **kwargs):
                calls.append(Call(clone(args), clone(kwargs)))
                return real(*args, **kwargs)

            setattr(module, symbol, recorder)
            error = None
            try:
                seed_all(seed)
                fn(**ps)
            except Exception as e:  # the user's own assertion, usually
                error = f"{type(e).__name__}: {str(e).strip()[:300]}"
            finally:
                setattr(module, symbol, real)
            cache[(i, seed)] = (calls, error)
        return cache[(i, seed)]

    cases: list[Case] = []
    for i, (name, fn, ps) in enumerate(plans):
        calls, error = capture(i, 0)
        if error:
            notes.append(f"{name}{'[' + _label(ps) + ']' if ps else ''} fails on the current code: {error}")
        label0 = name + (f"[{_label(ps)}]" if ps else "")
        for j in range(len(calls)):
            def make(seed: int, i=i, j=j) -> Call:
                got, _ = capture(i, seed)
                if j >= len(got):
                    # The test's control flow depends on its random values: for this call, fall
                    # back to the inputs the test made under seed 0.
                    got, _ = capture(i, 0)
                return clone(got[j])
            cases.append(Case(label0 + (f" call {j + 1}" if len(calls) > 1 else ""), make))
    if not cases:
        errors = [n for n in notes if "fails on the current code" in n]
        raise InputError(f"the test functions ({', '.join(n for n, _ in tests)}) never call '{symbol}'"
                         + (f"; {errors[0]}" if errors else ""),
                         hint=f"make a test_*() call {symbol} directly, or add get_inputs()")
    return Discovery(convention=convention, cases=cases, notes=notes)


@dataclass
class UnitTest:
    """Unit ``tests``: one test function with one parameter set."""

    label: str
    fn: Callable
    params: dict


def unit_tests(module: Any, below_line: int) -> tuple[list["UnitTest"], list[str]]:
    """The test functions defined below the separator line, each parameter set a case."""
    notes: list[str] = []
    out: list[UnitTest] = []
    for name, fn in vars(module).items():
        code = getattr(fn, "__code__", None)
        if not name.startswith("test") or not callable(fn) or code is None or \
                getattr(fn, "__module__", None) != module.__name__ or code.co_firstlineno <= below_line:
            continue
        found = _runnable_sets(name, fn, notes)
        for ps in (found[0] if found else []):
            out.append(UnitTest(name + (f"[{_label(ps)}]" if ps else ""), fn, ps))
    return out, notes
