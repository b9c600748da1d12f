"""What the reference's and the candidate's workers share: loading the code under test, and
running one case of it while recording what it produced (inside the worker).

A *record* is what gets compared, as plain data (``runner.worker.exchange.to_plain``):

* unit ``symbol``: ``{"output": ..., "inputs_after": [...], "grads": [...] | None}`` — the
  call's outputs, every argument's state after the call (in-place updates), and, when inputs
  require gradients and outputs carry them, the gradients of those inputs for seeded random
  output gradients (the backward kernels are checked too);
* unit ``tests``: ``{"return": ..., "calls": [{"fn", "output", "inputs_after"}, ...]}`` — what the
  test returned, and every call it made into the code above the separator.

Before each call (or test) every random generator is seeded the same way on both sides, and
``torch.empty`` and friends are filled with a byte pattern (``runner.worker.exchange.Allocations``).
"""

from __future__ import annotations

import copy
import inspect
import math
import types
from pathlib import Path
from typing import Any, Optional

from . import channel
from .errors import Failure, classify
from .exchange import Allocations, clone_layout, given_copies, input_breaches, leaves, to_plain, unchanged_inputs
from .inputs import Call, seed_all
from .trees import Trees
from ..units import separator_line, without_test_calls

MAX_TIMED_CALLS = 8  # per test, in unit "tests"


def clone_call(call: Call) -> Call:
    """A copy of a call's arguments with every tensor's layout kept (``clone_layout``)."""
    args, kwargs = clone_layout((tuple(call.args), dict(call.kwargs)))
    return Call(args, kwargs)


class Side:
    role = ""

    def __init__(self, req, device, launches, xdir: Path, scratch: Path):
        import torch

        from . import guards
        self.torch, self.guards = torch, guards
        self.req, self.opts, self.device = req, req.options, device
        self.interp = not device.is_gpu
        self.launches = launches
        self.xdir = xdir
        self.self_check = req.candidate is None
        self.cand_target = req.candidate or req.target
        self.unit = req.options.unit if req.options.unit in ("symbol", "tests") else "symbol"
        files, cfiles = dict(req.files), dict(req.candidate_files)
        if self.unit == "tests":  # the tests run under the runner's seeds, not at import
            for tree, path in ((files, req.target.path), (cfiles, self.cand_target.path)):
                if path in tree:
                    tree[path] = without_test_calls(tree[path])
        self.trees = Trees(scratch, files, cfiles, set(req.candidate_files), self.interp)
        self.seps: dict[str, Optional[int]] = {}

    # ----------------------------------------------------------------- errors

    def failure(self, exc: BaseException, side: str, where: str) -> Failure:
        return classify(exc, side, where, self.trees)

    def import_side(self, side: str, path: str, before=None):
        seed_all(self.opts.seed)  # what a module draws at import is the same in every process
        try:
            self.trees.write(side)
            return self.trees.import_module(side, path, before)
        except Failure:
            raise
        except BaseException as e:
            raise self.failure(e, side, f"importing {path}") from None

    def resolve(self, module, symbol: str, side: str, path: str):
        if not hasattr(module, symbol):
            import sys
            stem = path.rsplit("/", 1)[-1].removesuffix(".py")
            if "/" not in path and stem in sys.stdlib_module_names:
                raise Failure("compile_error", "shadows_stdlib", side,
                              f"{path}: the file is named like the standard library's module '{stem}', which was "
                              f"imported before it: 'import {stem}' gives the standard library's module, not "
                              f"this file", hint=f"rename {path} (e.g. to my_{stem}.py)", file=path)
            raise Failure("compile_error", "missing_symbol", side, f"{path}: '{symbol}' is not defined after import",
                          file=path)
        obj = getattr(module, symbol)
        if not callable(obj):
            raise Failure("compile_error", "not_callable", side,
                          f"{path}: '{symbol}' is a {type(obj).__name__}, not a function or class",
                          hint="name a function, an nn.Module class or a torch.autograd.Function", file=path)
        return obj

    # ----------------------------------------------------------------- what is called

    def is_module_class(self, obj) -> bool:
        return isinstance(obj, type) and issubclass(obj, self.torch.nn.Module)

    def callable_of(self, obj):
        """A torch.autograd.Function is called through ``apply``."""
        if isinstance(obj, type) and issubclass(obj, self.torch.autograd.Function):
            return obj.apply
        return obj

    def build_model(self, obj, init, seed: int, weights_from=None):
        """A module target, instantiated under the seed; a candidate whose parameters match the
        reference's names and shapes gets the reference's weights."""
        call = init(seed) if init else None
        seed_all(seed)
        try:
            with self.trees.device_ctx():
                model = obj(*(call.args if call else ()), **(call.kwargs if call else {}))
        except Failure:
            raise
        except BaseException as e:  # the user's constructor: said in their terms, not as the evaluator's error
            name = getattr(obj, "__name__", "the module")
            raise self.failure(e, self.role or "reference",
                               f"building {name}(*get_init_inputs())") from None
        if not self.interp:
            model = model.cuda()
        if weights_from is not None:
            rs, cs = weights_from.state_dict(), model.state_dict()
            if rs.keys() == cs.keys() and all(rs[k].shape == cs[k].shape for k in rs):
                model.load_state_dict(rs)
        return model

    def param_names(self, obj) -> Optional[list[str]]:
        try:
            target = obj.forward if self.is_module_class(obj) else self.callable_of(obj)
            names = list(inspect.signature(target).parameters)
            return names[1:] if self.is_module_class(obj) else names
        except (TypeError, ValueError):
            return None

    def to_device(self, obj):
        torch = self.torch
        if self.interp:
            return obj
        if isinstance(obj, torch.Tensor):
            return obj.cuda() if obj.device.type == "cpu" else obj
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.to_device(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self.to_device(v) for k, v in obj.items()}
        return obj

    def sync(self) -> None:
        if not self.interp:
            self.torch.cuda.synchronize()

    # ----------------------------------------------------------------- one call, recorded

    def record_call(self, fn, call: Call, seed: int, byte: int, ops=None, given: bool = False) -> dict:
        """Unit ``symbol``: one call of ``fn`` on ``call`` (which it may modify). With ``given``
        (the candidate, whose inputs were handed to it), an input the call leaves exactly as
        handed is recorded as ``same_as_given()``."""
        # The steps (``channel.step``: ``copies``, ``fn``, ``sync``, ``record``, ``bands``) say where a
        # call's time goes beside the code's own; diagnostics only.
        seed_all(seed + 7)  # the random state at the call is the same on both sides
        flat = list(call.args) + list(call.kwargs.values())
        with channel.step("copies"):
            copies = given_copies(flat) if given else None
        alloc = Allocations(byte, self.launches, inputs=flat)
        with self.trees.device_ctx(), alloc, (ops if ops is not None else _null()):
            with channel.step("fn"):
                out = fn(*call.args, **call.kwargs)
                grads = self.gradients(out, call, seed)
        with channel.step("sync"):
            self.sync()
        with channel.step("record"):
            rec = {"output": to_plain(out),
                   "inputs_after": unchanged_inputs(flat, copies) if given else to_plain(flat), "grads": grads}
        with channel.step("bands"):
            rec["oob"] = list(dict.fromkeys(alloc.breaches() + input_breaches(flat)))
        rec["reads_outside"] = alloc.outside_reads()
        del out
        return rec

    def gradients(self, out, call: Call, seed: int) -> Optional[dict]:
        """{argument index: its gradient} for the arguments that require one, after a backward
        pass with seeded random output gradients; None when nothing requires gradients."""
        torch = self.torch
        flat = list(call.args) + list(call.kwargs.values())
        ins = {str(i): t for i, t in enumerate(flat)
               if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf}
        outs = [t for _, t in leaves(out) if t.requires_grad and t.grad_fn is not None]
        if not ins or not outs:
            return None
        g = torch.Generator(device=outs[0].device)
        g.manual_seed(seed + 11)
        grad_outputs = [torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=g) for o in outs]
        torch.autograd.backward(outs, grad_outputs)
        return {i: to_plain(t.grad) for i, t in ins.items()}

    # ----------------------------------------------------------------- one test, recorded

    def top_functions(self, module, path: str) -> dict[str, Any]:
        """What the tests can call above the separator (unit ``tests``), by name: plain functions,
        names bound to an ``autograd.Function``'s ``apply`` (``attention = _attention.apply``),
        and the ``forward`` of each ``nn.Module`` class (as ``Class.forward``), all of the file."""
        if path not in self.seps:
            text = {**self.req.files, **self.req.candidate_files}.get(path, "")
            self.seps[path] = separator_line(text)
        sep = self.seps[path] or 10 ** 9
        torch = self.torch

        def above(fn) -> bool:
            # A decorated function (``@torch.no_grad()``) is the decorator's wrapper, whose code
            # lies in torch: where it stands in the file is the wrapped function's line.
            code = getattr(inspect.unwrap(fn), "__code__", None)
            return code is not None and code.co_firstlineno < sep

        out = {}
        for name, obj in vars(module).items():
            if name.startswith("test"):
                continue
            if isinstance(obj, types.FunctionType):
                if obj.__module__ == module.__name__ and above(obj):
                    out[name] = obj
            elif isinstance(obj, types.MethodType) and obj.__name__ == "apply" and isinstance(obj.__self__, type) \
                    and issubclass(obj.__self__, torch.autograd.Function) \
                    and obj.__self__.__module__ == module.__name__ and above(obj.__self__.forward):
                out[name] = obj
            elif isinstance(obj, type) and issubclass(obj, torch.nn.Module) and obj.__module__ == module.__name__ \
                    and isinstance(obj.__dict__.get("forward"), types.FunctionType) and above(obj.forward):
                out[f"{name}.forward"] = obj.forward
        return out

    def snapshot(self, args: tuple, kwargs: dict) -> tuple:
        """A call's arguments as they are when it starts (``clone_layout``); an ``nn.Module``
        among them (a ``forward``'s ``self``) is copied whole, so that what is timed later is the
        module this call saw."""
        pre_a, pre_k = clone_layout((args, kwargs))

        def one(x):
            if isinstance(x, self.torch.nn.Module):
                try:
                    return copy.deepcopy(x)
                except Exception:
                    return x
            return x
        return tuple(one(x) for x in pre_a), {k: one(v) for k, v in pre_k.items()}

    def record_test(self, module, path: str, case, seed: int, byte: int, ops=None,
                    capture: bool = False) -> tuple[dict, list]:
        """Unit ``tests``: run one test (``case.fn(**case.params)``) under ``seed``; returns the
        record and, with ``capture``, the arguments of its first calls (for timing)."""
        top = self.top_functions(module, path)
        calls: list[dict] = []
        timed: list[dict] = []
        depth = [0]

        def wrap(name, fn):
            def recorded(*a, **k):
                if depth[0]:
                    return fn(*a, **k)
                depth[0] += 1
                pre = self.snapshot(a, k) if capture and len(timed) < MAX_TIMED_CALLS else None
                if ops is not None:
                    ops.active = True
                try:
                    out = fn(*a, **k)
                finally:
                    depth[0] -= 1
                    if ops is not None:
                        ops.active = False
                calls.append({"fn": name, "output": to_plain(out),
                              "inputs_after": to_plain(list(a) + list(k.values()))})
                if pre is not None:
                    timed.append({"fn": name, "args": list(pre[0]), "kwargs": pre[1]})
                return out
            recorded.__wrapped__ = fn
            return recorded

        originals = dict(top)
        if ops is not None:
            ops.active = False  # the test's own torch work is not the code's
        for name, fn in top.items():
            put(module, name, wrap(name, fn))
        limit = self.opts.interpreter_max_elements * 4 if self.interp else None
        alloc = Allocations(byte, self.launches, max_elements=limit)
        try:
            seed_all(seed)
            with self.trees.device_ctx(), alloc, (ops if ops is not None else _null()):
                ret = case.fn(**case.params)
            self.sync()
        finally:
            for name, fn in originals.items():
                put(module, name, fn)
            if ops is not None:
                ops.active = True
        return {"return": to_plain(ret), "calls": calls, "oob": alloc.breaches(),
                "reads_outside": alloc.outside_reads()}, timed

    # ----------------------------------------------------------------- timing (GPU)

    def time_pairs(self, pairs: list[tuple], rep_ms: float, min_reps: int) -> dict:
        """Each (ref call, cand call) timed interleaved; the case's figures are sums over its
        calls (as TritonBench sums over input sizes), and ``per_call`` gives each call's reps
        and times (the device time the reps took: ``verdict.reported_busy_s``)."""
        from ..devices import l2_bytes
        from .timing import hidden_work, time_pair
        opts = self.opts
        ref_ms = cand_ms = ref_wall = cand_wall = 0.0
        ref_sp = cand_sp = 0.0
        reps, methods, notes, hidden, per_call = 0, set(), set(), [], []
        for ref_call, cand_call in pairs:
            pt = time_pair(ref_call, cand_call, warmup_ms=opts.warmup_ms, rep_ms=rep_ms,
                           min_reps=min_reps, max_reps=opts.max_reps,
                           flush_bytes=l2_bytes(self.device), flush_l2=opts.flush_l2,
                           cuda_graph_below_us=opts.cuda_graph_below_us)
            ref_ms += pt.ref_ms
            cand_ms += pt.cand_ms
            ref_wall += pt.ref_wall_ms
            cand_wall += pt.cand_wall_ms
            ref_sp, cand_sp = max(ref_sp, pt.ref_spread_pct), max(cand_sp, pt.cand_spread_pct)
            reps += pt.reps
            per_call.append([pt.reps, pt.ref_ms, pt.cand_ms])
            for name, seconds in pt.steps.items():
                channel.add_step(name, seconds)
            methods.add(pt.method)
            if pt.note:
                notes.add(pt.note)
            hw = hidden_work(pt)
            if hw:
                hidden.append(hw)
        return {"ref_ms": ref_ms, "cand_ms": cand_ms, "ref_spread_pct": ref_sp, "cand_spread_pct": cand_sp,
                "reps": reps, "method": "+".join(sorted(methods)), "notes": sorted(notes),
                "hidden_work": hidden, "ref_wall_ms": ref_wall, "cand_wall_ms": cand_wall,
                "calls": len(pairs), "per_call": per_call}


    def work(self, calls: list[Call], module, fn) -> dict:
        """Bytes one call must move (inputs and outputs, or the file's ``get_bytes``) and its
        floating-point operations (``get_flops``), summed over the timed calls. ``bytes_basis``
        says which: ``get_bytes``, or ``tensors`` (the sizes of inputs and outputs, what a kernel
        that touches each of them once moves). ``module`` is the original's module, ``fn`` its
        target (unit ``symbol``; None for unit ``tests``, whose files have no ``get_bytes``)."""
        from .compare import nbytes, tensors
        moved, flops, notes, counted = 0, None, [], True
        bytes_fn = getattr(module, "get_bytes", None) if fn is not None else None
        flops_fn = getattr(module, "get_flops", None) if fn is not None else None
        for call in calls:
            n = nbytes((call.args, call.kwargs))
            if fn is not None:
                fresh = clone_call(call)
                with self.torch.no_grad():
                    out = fn(*fresh.args, **fresh.kwargs)
                n += nbytes(out)
            if callable(bytes_fn):
                try:
                    n = int(bytes_fn(*call.args, **call.kwargs))
                except Exception as e:
                    counted = False
                    notes.append(f"get_bytes failed ({type(e).__name__}: {str(e)[:120]}); bytes counted as "
                                 "inputs + outputs")
            moved += n
            if callable(flops_fn):
                try:
                    flops = (flops or 0.0) + float(flops_fn(*call.args, **call.kwargs))
                except Exception:
                    pass
        dtype = "float32"
        ts = [t for c in calls for t in tensors((c.args, c.kwargs)) if t.is_floating_point()]
        if ts:
            dtype = str(ts[0].dtype).replace("torch.", "")
        basis = "get_bytes" if callable(bytes_fn) and counted else "tensors"
        return {"bytes_moved": moved, "bytes_basis": basis,
                "flops": flops if flops is None or math.isfinite(flops) else None,
                "dtype": dtype, "notes_work": notes}


def put(module, name: str, fn) -> None:
    """Bind ``name`` (``f``, or ``Class.forward``) in ``module`` to ``fn``."""
    owner, _, attr = name.rpartition(".")
    setattr(getattr(module, owner) if owner else module, attr, fn)


def lookup(module, name: str):
    """What ``name`` (``f``, or ``Class.forward``) is in ``module``, or None."""
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def finite(x: float) -> Optional[float]:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
