"""The worker: one subprocess that evaluates requests, one at a time, for the pool.

Protocol (JSON lines): requests come on stdin, messages go out on the original stdout, which
is kept for the protocol alone (the user's prints are sent to stderr, which the pool keeps a
tail of). Messages:

  -> {"event": "hello", "device": DeviceInfo, "pid": N}
  <- {"op": "eval", "request": EvalRequest}
  -> {"event": "phase", "phase": "import" | "run" | "compile" | "timing"}
  <- {"grant": true}            (for "run" and "timing": the pool holds the device lock)

On a GPU, a Triton compile inside the run phase is announced as a "compile" phase: the pool
lets go of the device lock while the CPU compiles (another worker may time meanwhile), and the
worker asks for "run" again before it launches anything.
  -> {"event": "result", "result": EvalResult, "retire": bool}

The worker imports only the standard library, torch, triton and numpy (and the user's code).
Run as ``python -m runner.worker``; ``GEAK_DEVICE`` = auto | cuda | interpreter.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Optional

_PROTO = None  # the protocol stream, set in main()


def send(msg: dict) -> None:
    _PROTO.write(json.dumps(msg, allow_nan=False) + "\n")
    _PROTO.flush()


def wait_grant() -> None:
    line = sys.stdin.readline()
    if not line:
        os._exit(0)  # the pool went away
    msg = json.loads(line)
    if not msg.get("grant"):
        os._exit(0)


_CURRENT_PHASE: list[Optional[str]] = [None]


def phase(name: str) -> None:
    _CURRENT_PHASE[0] = name
    send({"event": "phase", "phase": name})
    if name in ("run", "timing"):
        wait_grant()


def _compile_outside_device_lock() -> None:
    """Announce Triton compiles in the run phase as a "compile" phase (see the module's doc):
    compiling is CPU work, and holding the shared device lock through it would keep another
    worker's timing waiting. Triton versions without ``JITFunction._do_compile`` keep the lock."""
    import functools

    try:
        from triton.runtime.jit import JITFunction
    except Exception:
        return
    orig = getattr(JITFunction, "_do_compile", None)
    if orig is None:
        return

    @functools.wraps(orig)
    def _do_compile(self, *args, **kwargs):
        if _CURRENT_PHASE[0] != "run":
            return orig(self, *args, **kwargs)
        phase("compile")
        try:
            return orig(self, *args, **kwargs)
        finally:
            phase("run")

    JITFunction._do_compile = _do_compile


# --------------------------------------------------------------------------- setup

def _setup(requested: str):
    """Choose the device before triton is imported (TRITON_INTERPRET is read at decoration)."""
    import torch

    use_gpu = requested in ("auto", "cuda", "rocm") and torch.cuda.is_available()
    if not use_gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:  # imported lazily by the first TorchDispatchMode, and it rebinds torch.manual_seed:
        import torch._dynamo  # noqa: F401  import it now, before the integrity snapshot
    except Exception:
        pass
    from . import devices, guards

    info = devices.detect(requested)  # raises when a GPU was asked for and there is none
    if not use_gpu:
        guards.patch_cuda_for_interpreter()
        guards.patch_autotune_for_interpreter()
    try:
        import triton.knobs as knobs  # keep the interpreter flag consistent with our choice
        knobs.runtime.interpret = not use_gpu
    except Exception:
        pass
    launches = guards.LaunchRecorder()
    launches.install()
    if use_gpu:
        _compile_outside_device_lock()
    return info, launches


class Retire(Exception):
    """The process state can no longer be trusted (sticky CUDA error, tampering)."""


# --------------------------------------------------------------------------- the evaluation


class Failure(Exception):
    def __init__(self, status: str, kind: str, side: str, message: str, *, hint: Optional[str] = None,
                 tb: Optional[str] = None, file: Optional[str] = None, line: Optional[int] = None,
                 retire: bool = False):
        super().__init__(message)
        self.message = message
        self.status, self.kind, self.side, self.hint = status, kind, side, hint
        self.tb, self.file, self.line, self.retire = tb, file, line, retire


class Evaluation:
    def __init__(self, req, device, launches):
        import torch

        from . import guards
        self.torch = torch
        self.req = req
        self.opts = req.options
        self.device = device
        self.interp = device.backend == "interpreter"
        self.launches = launches
        self.guards = guards
        self.self_check = req.candidate is None
        self.cand_target = req.candidate or req.target
        self.require_triton = (self.opts.require_triton if self.opts.require_triton is not None
                               else not self.self_check)
        self.scratch = Path(tempfile.mkdtemp(prefix="geak-eval-"))
        self.trees = {"reference": self.scratch / "ref", "candidate": self.scratch / "cand"}
        self.flags = []
        self.retire = False
        self.tripwires: list = []
        self.trip_counter = [0]
        self.ref_threads: set = set()  # threads that appeared during the reference's calls
        self.cand_threads: set = set()  # ... during the candidate's (or while one of its was alive)

    # ----------------------------------------------------------------- paths, errors

    def user_path(self, filename: str) -> str:
        for side, root in self.trees.items():
            try:
                rel = Path(filename).resolve().relative_to(root.resolve()).as_posix()
                return rel + (" (candidate)" if side == "candidate" and not self.self_check and
                              rel in self.req.candidate_files else "")
            except ValueError:
                continue
        return filename

    def is_user_file(self, filename: str) -> bool:
        try:
            Path(filename).resolve().relative_to(self.scratch.resolve())
            return True
        except ValueError:
            return False

    def trimmed_tb(self, exc: BaseException) -> tuple[str, Optional[str], Optional[int]]:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if self.is_user_file(f.filename)]
        lines, file, line = [], None, None
        for f in frames:
            p = self.user_path(f.filename)
            lines.append(f'  File "{p}", line {f.lineno}, in {f.name}')
            if f.line:
                lines.append(f"    {f.line.strip()}")
            file, line = p.replace(" (candidate)", ""), f.lineno
        msg = self.scrub(f"{type(exc).__name__}: {exc}")
        return ("Traceback (user code):\n" + "\n".join(lines) + "\n" + msg if lines else msg), file, line

    def scrub(self, text: str) -> str:
        for side, root in self.trees.items():
            text = text.replace(str(root) + os.sep, "").replace(str(root.resolve()) + os.sep, "")
        return text.replace(str(self.scratch), "<scratch>")

    def classify(self, exc: BaseException, side: str, where: str) -> Failure:
        torch = self.torch
        tb, file, line = self.trimmed_tb(exc)
        text = f"{type(exc).__name__}: {exc}"
        low = text.lower()
        name = type(exc).__name__
        if isinstance(exc, MemoryError):
            return Failure("crashed", "host_oom", side, f"{where}: out of host memory", tb=tb,
                           file=file, line=line, retire=True)
        if isinstance(exc, getattr(torch, "OutOfMemoryError", ())) or "out of memory" in low:
            return Failure("runtime_error", "out_of_memory", side, f"{where}: GPU out of memory",
                           hint="use smaller INPUT_CASES or free GPU memory on the runner",
                           tb=tb, file=file, line=line, retire=True)
        if "illegal memory access" in low or "misaligned address" in low or \
                "unspecified launch failure" in low or name == "AcceleratorError" or \
                "device-side assert" in low:
            return Failure("crashed", "illegal_memory_access", side,
                           f"{where}: the GPU reported a fault ({self.scrub(str(exc)).splitlines()[0][:200]})",
                           hint="check the masks and offsets of every tl.load / tl.store", tb=tb,
                           file=file, line=line, retire=True)
        if name in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct") \
                or "triton.compiler" in type(exc).__module__:
            first = self.scrub(str(exc)).strip().splitlines()
            return Failure("compile_error", "compile_error", side,
                           f"{where}: Triton could not compile a kernel: "
                           f"{first[-1] if first else name}", tb=tb, file=file, line=line)
        if isinstance(exc, SyntaxError):
            f = self.user_path(exc.filename or "")
            return Failure("compile_error", "syntax_error", side,
                           f"{f}:{exc.lineno}: syntax error: {exc.msg}", file=f, line=exc.lineno)
        if isinstance(exc, ImportError):
            return Failure("compile_error", "import_error", side, f"{where}: {self.scrub(str(exc))}",
                           hint="install the missing package on the runner, or ship the module "
                                "with the project", tb=tb, file=file, line=line)
        if "only 0-dimensional arrays can be converted" in text:
            import numpy
            return Failure("runtime_error", "runtime_error", side,
                           f"{where}: the Triton interpreter failed on a loop with a run-time bound",
                           hint=f"numpy {numpy.__version__} breaks Triton's CPU interpreter here; install "
                                "numpy<2.4 where the runner runs (pip install 'numpy<2.4')",
                           tb=tb, file=file, line=line)
        return Failure("runtime_error", "runtime_error", side,
                       f"{where}: {name}: {self.scrub(str(exc)).strip().splitlines()[0][:300] if str(exc).strip() else ''}",
                       tb=tb, file=file, line=line)

    # ----------------------------------------------------------------- loading

    def write_trees(self) -> None:
        for side, root in self.trees.items():
            files = dict(self.req.files)
            if side == "candidate":
                files.update(self.req.candidate_files)
            for rel, text in files.items():
                p = (root / rel).resolve()
                if root.resolve() not in p.parents:
                    raise Failure("rejected", "bad_request", "harness", f"file path '{rel}' leaves the project")
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")

    def module_name(self, root: Path, rel: str) -> tuple[str, list[str]]:
        """Dotted name for ``rel`` inside ``root`` and the sys.path entries it needs."""
        parts = Path(rel).with_suffix("").parts
        pkg_depth = 0
        for i in range(len(parts) - 1, 0, -1):
            if (root.joinpath(*parts[:i]) / "__init__.py").exists():
                pkg_depth += 1
            else:
                break
        top = len(parts) - 1 - pkg_depth
        name = ".".join(parts[top:])
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        base = root.joinpath(*parts[:top])
        paths = [str(base)]
        if str(root) not in paths:
            paths.append(str(root))
        return name, paths

    def import_tree(self, side: str, rel: str, before=None):
        import importlib

        root = self.trees[side]
        name, paths = self.module_name(root, rel)
        saved_path = list(sys.path)
        before_mods = set(sys.modules)
        sys.path[:0] = paths
        try:
            if before is not None:
                before(root)
            with self.device_ctx():
                module = importlib.import_module(name)
        finally:
            sys.path[:] = saved_path
            # Take this tree's modules out of sys.modules so the other tree imports its own.
            for m in set(sys.modules) - before_mods:
                f = getattr(sys.modules[m], "__file__", None) or ""
                if f and self.is_user_file(f):
                    del sys.modules[m]
        return module

    def device_ctx(self):
        return self.guards.InterpreterDevice() if self.interp else contextlib.nullcontext()

    def resolve(self, module, symbol: str, side: str):
        if not hasattr(module, symbol):
            raise Failure("compile_error", "missing_symbol", side,
                          f"{self.req.target.path if side == 'reference' else self.cand_target.path}: "
                          f"'{symbol}' is not defined after import")
        return getattr(module, symbol)

    # ----------------------------------------------------------------- running

    def is_module_class(self, obj) -> bool:
        return isinstance(obj, type) and issubclass(obj, self.torch.nn.Module)

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

    def build(self, obj, init_call, seed: int, side: str, ref_model=None):
        """A module target is instantiated under the same seed for both sides; a candidate
        whose parameters match the reference's names and shapes gets the reference's weights."""
        if not self.is_module_class(obj):
            return obj
        from .inputs import seed_all
        call = init_call(seed) if init_call else None
        seed_all(seed)
        with self.device_ctx():
            model = obj(*(call.args if call else ()), **(call.kwargs if call else {}))
        if not self.interp:
            model = model.cuda()
        if ref_model is not None:
            rs, cs = ref_model.state_dict(), model.state_dict()
            if rs.keys() == cs.keys() and all(rs[k].shape == cs[k].shape for k in rs):
                model.load_state_dict(rs)
        return model

    def call(self, fn, call):
        args, kwargs = call.args, call.kwargs
        with self.device_ctx():
            return fn(*args, **kwargs)

    def run_side(self, side: str, fn, call, label: str, ops=None):
        """One call of one side, attributed (for crash reports) and observed (launches; with
        ``ops``, aten ops and the stream), errors classified in the user's terms."""
        send({"event": "at", "side": side, "case": label})
        threads_before = self.guards.live_threads()
        stream = None
        if ops is not None and not self.interp:
            stream = self.torch.cuda.current_stream().cuda_stream
        self.launches.side, self.launches.expected_stream = side, stream
        if ops is not None:
            ops.expected_stream = stream
        try:
            with ops if ops is not None else contextlib.nullcontext():
                out = self.call(fn, call)
            if not self.interp:
                self.torch.cuda.synchronize()
            return out
        except BaseException as e:
            symbol = self.req.target.symbol if side == "reference" else self.cand_target.symbol
            raise self.classify(e, side, f"{symbol} on case '{label}'") from None
        finally:
            self.launches.side = self.launches.expected_stream = None
            if ops is not None:
                ops.expected_stream = None
            self.note_threads(side, threads_before)

    def note_threads(self, side: str, before: set) -> None:
        """Attribute threads that appeared during a call. The reference's own (torch.compile's
        workers, say) are not held against the candidate, unless a thread the candidate started
        was still alive then (it could have started them)."""
        now = self.guards.live_threads()
        new = now - before
        if not new:
            return
        if side == "reference" and not (self.cand_threads & (before | now)):
            self.ref_threads |= new
        else:
            self.cand_threads |= new - self.ref_threads

    # ----------------------------------------------------------------- main flow

    def run(self):
        from . import schema as S
        from .compare import (bitwise_equal, clone, compare, nbytes, numel, poison, summarize,
                              tensors)
        from .inputs import InputError, discover
        from .source import static_flags

        torch = self.torch
        req, opts = self.req, self.opts
        t0 = time.monotonic()
        result = S.EvalResult(status="ok", correct=False, message="", id=req.id, device=self.device)
        try:
            self.write_trees()
            phase("import")
            # -- reference
            try:
                ref_mod = self.import_tree("reference", req.target.path)
            except Failure:
                raise
            except BaseException as e:
                raise self.classify(e, "reference", f"importing {req.target.path}") from None
            ref_obj = self.resolve(ref_mod, req.target.symbol, "reference")
            # -- inputs
            try:
                with self.device_ctx():
                    found = discover(ref_mod, req.target.symbol, self.is_module_class(ref_obj))
            except InputError as e:
                raise Failure("compile_error", "no_inputs" if "no inputs" in str(e) else "bad_inputs",
                              "reference", f"{req.target.path}: {e}", hint=e.hint,
                              file=req.target.path) from None
            except BaseException as e:
                f = self.classify(e, "reference", f"{req.target.path}: finding inputs")
                f.kind = "bad_inputs"
                raise f from None
            result.inputs_convention = found.convention
            for n in found.notes:
                result.flags.append(S.Flag("reference_note", "warning", n))
            # -- candidate
            integrity = self.guards.IntegritySnapshot()
            ctarget = self.cand_target

            def arm_tripwires(root: Path):
                # The candidate's tree has its own copy of the target file; a candidate that
                # imports it gets a tripwire in place of the reference symbol.
                if self.self_check or ctarget.path == req.target.path:
                    return
                if req.target.path in req.files:
                    name, _ = self.module_name(root, req.target.path)
                    try:
                        import importlib
                        with self.device_ctx():
                            copy = importlib.import_module(name)
                    except BaseException:
                        return
                    self._arm(copy, req.target.symbol)

            try:
                cand_mod = self.import_tree("candidate", ctarget.path, before=arm_tripwires)
            except Failure:
                raise
            except BaseException as e:
                raise self.classify(e, "candidate", f"importing {ctarget.path}") from None
            cand_obj = self.resolve(cand_mod, ctarget.symbol, "candidate")
            if not self.self_check and ctarget.symbol != req.target.symbol:
                self._arm(cand_mod, req.target.symbol)
            self.check_signatures(ref_obj, cand_obj)
            if not self.self_check:
                text = {**req.files, **req.candidate_files}.get(ctarget.path, "")
                sflags = static_flags(text, ctarget.path, ctarget.symbol, req.target.symbol)
                result.flags += sflags
            tampered = integrity.changed()
            if tampered:
                self.reject(result, "tampering", "importing the candidate replaced "
                            + ", ".join(tampered[:6]) + ": timers and library functions must not be changed")
                self.retire = True

            # -- correctness
            phase("run")
            cases = found.cases
            sel = list(range(len(cases))) if opts.cases is None else [i for i in opts.cases if 0 <= i < len(cases)]
            ref_model = cand_model = None
            ops = self.guards.OpRecorder(self.launches)
            threads_before = self.guards.live_threads()
            all_ok = True
            run_cases: list[int] = []
            probes: dict[int, Any] = {}
            bf16_upcast = False
            for idx in sel:
                case = cases[idx]
                cr = S.CaseResult(index=idx, label=case.label, shapes="")
                result.cases.append(cr)
                try:
                    with self.device_ctx():
                        probe = case.make(opts.seed + 1000 * idx)
                    probe.args, probe.kwargs = self.to_device(probe.args), self.to_device(probe.kwargs)
                except Failure:
                    raise
                except InputError as e:
                    raise Failure("compile_error", "bad_inputs", "reference", f"{req.target.path}: {e}",
                                  hint=e.hint, file=req.target.path) from None
                except BaseException as e:
                    f = self.classify(e, "reference", f"{req.target.path}: building inputs for case '{case.label}'")
                    f.kind = "bad_inputs"
                    raise f from None
                names = self.param_names(ref_obj)
                cr.shapes = summarize(list(probe.args) + list(probe.kwargs.values()), names)
                if self.interp:
                    n = numel((probe.args, probe.kwargs))
                    if n > opts.interpreter_max_elements:
                        cr.skipped = (f"{n:,} input elements: too large for the CPU interpreter "
                                      f"(limit {opts.interpreter_max_elements:,}); runs on a GPU runner")
                        continue
                    if any(t.dtype == torch.bfloat16 for t in tensors((probe.args, probe.kwargs))):
                        cr.skipped = ("bfloat16: the Triton CPU interpreter computes bf16 wrongly; "
                                      "this case runs on a GPU runner")
                        continue
                probes[idx] = probe
                run_cases.append(idx)
            if not run_cases and self.interp and any(c.skipped and "bfloat16" in c.skipped for c in result.cases):
                # Nothing else to check: upcast bf16 to float32 rather than check nothing.
                bf16_upcast = True
                for cr in result.cases:
                    if cr.skipped and "bfloat16" in cr.skipped:
                        cr.skipped = None
                        cr.detail = "bfloat16 inputs upcast to float32 (interpreter)"
                        run_cases.append(cr.index)
            if not run_cases:
                smallest = min(result.cases, key=lambda c: c.index) if result.cases else None
                raise Failure("compile_error", "no_inputs", "reference",
                              "no input case can run here: " + (smallest.skipped if smallest else "no cases"),
                              hint="add a small case to INPUT_CASES for the interpreter, or use a GPU runner",
                              file=req.target.path)

            for cr in result.cases:
                if cr.index not in run_cases:
                    continue
                case = cases[cr.index]
                for trial in range(opts.trials):
                    seed = opts.seed + 1000 * cr.index + trial
                    try:
                        with self.device_ctx():
                            call = case.make(seed) if trial or cr.index not in probes else probes.pop(cr.index)
                    except BaseException as e:
                        f = self.classify(e, "reference", f"{req.target.path}: building inputs for case '{case.label}'")
                        f.kind = "bad_inputs"
                        raise f from None
                    call.args, call.kwargs = self.to_device(call.args), self.to_device(call.kwargs)
                    if bf16_upcast:
                        call.args, call.kwargs = _upcast_bf16(call.args), _upcast_bf16(call.kwargs)
                    if ref_model is None and self.is_module_class(ref_obj):
                        ref_model = self.build(ref_obj, found.init, opts.seed, "reference")
                        cand_model = self.build(cand_obj, found.init, opts.seed, "candidate", ref_model)
                        if not self.self_check and isinstance(cand_model, torch.nn.Module):
                            for klass in type(cand_model).__mro__[1:]:
                                if klass.__name__ == req.target.symbol:
                                    self.guards.trip_class(klass, self.trip_counter)
                    ref_fn = ref_model if ref_model is not None else ref_obj
                    cand_fn = cand_model if cand_model is not None else cand_obj
                    # reference, on its own clone of the inputs
                    ref_in = clone_call(call)
                    ref_out = self.run_side("reference", ref_fn, ref_in, case.label)
                    expected, expected_post = clone(ref_out), clone_call(ref_in)
                    poison(ref_out)
                    poison((ref_in.args, ref_in.kwargs))
                    del ref_out
                    # candidate, on another clone, observed
                    cand_in = clone_call(call)
                    cand_out = self.run_side("candidate", cand_fn, cand_in, case.label, ops)
                    cmp = compare(expected, cand_out, opts.tolerance)
                    mut = self.check_mutation(call, expected_post, cand_in, compare, bitwise_equal, names)
                    cr.trials += 1
                    cr.max_abs_err = max(cr.max_abs_err or 0.0, cmp.max_abs)
                    cr.max_rel_err = max(cr.max_rel_err or 0.0, cmp.max_rel)
                    if not cmp.ok or mut:
                        cr.passed = False
                        cr.detail = (cmp.detail if not cmp.ok else mut) + f" (seed {seed})"
                        all_ok = False
                        poison(cand_out)
                        break
                    cr.passed = True
                    poison(cand_out)
                    poison((cand_in.args, cand_in.kwargs))
                    poison((call.args, call.kwargs))
                    poison((expected, expected_post.args, expected_post.kwargs))
                    del cand_out, cand_in, expected, expected_post, call

            # -- what the candidate did
            result.launches = {s: sorted({l.kernel for l in ls}) for s, ls in self.launches.launches.items()}
            result.torch_ops = {"candidate": ops.compute_ops()}
            self.anti_cheat(result, ops, integrity, threads_before)
            if result.status == "rejected":
                raise _Done()
            if not all_ok:
                bad = [c for c in result.cases if c.trials and not c.passed]
                result.status = "mismatch"
                result.message = (f"wrong result on {len(bad)} of {len(run_cases)} case(s); first: "
                                  f"{bad[0].label}: {bad[0].detail}")
                raise _Done()

            # -- ahead-of-time compile reports
            if opts.aot_arch:
                phase("compile")  # CPU work: off the device lock
                result.resources = self.aot_reports(opts.aot_arch)
                phase("run")
            # -- timing
            if self.interp:
                result.timing_unavailable = ("CPU interpreter: correctness only, no timing; connect a GPU "
                                             "runner (--runner URL or GEAK_RUNNER_URL) to measure speed")
            elif not opts.timing:
                result.timing_unavailable = "timing not requested"
            else:
                phase("timing")
                self.time_cases(result, cases, run_cases, ref_fn, cand_fn, compare, clone, nbytes, ref_mod)
            result.status = "ok"
            result.correct = True
            result.message = self.summary(result, run_cases)
        except _Done:
            pass
        except Failure as f:
            result.status = f.status
            result.correct = False
            result.error = S.ErrorInfo(kind=f.kind, side=f.side, message=f.message, hint=f.hint,
                                       traceback=f.tb, file=f.file, line=f.line)
            result.message = f.message
            self.retire = self.retire or f.retire
            if self.launches.launches:
                result.launches = {s: sorted({l.kernel for l in ls}) for s, ls in self.launches.launches.items()}
        finally:
            self.launches.side = None
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.launches.reset()
        result.duration_s = round(time.monotonic() - t0, 3)
        return result

    # ----------------------------------------------------------------- pieces

    def param_names(self, obj) -> Optional[list[str]]:
        import inspect
        try:
            target = obj.forward if self.is_module_class(obj) else obj
            names = [p for p in inspect.signature(target).parameters]
            return names[1:] if self.is_module_class(obj) else names
        except (TypeError, ValueError):
            return None

    def check_signatures(self, ref_obj, cand_obj) -> None:
        import inspect
        if self.self_check:
            return

        def sig(o):
            try:
                target = o.forward if self.is_module_class(o) else o
                params = list(inspect.signature(target).parameters.values())
                if self.is_module_class(o):
                    params = params[1:]
                return [(p.name, p.kind) for p in params]
            except (TypeError, ValueError):
                return None

        rs, cs = sig(ref_obj), sig(cand_obj)
        if rs is None or cs is None:
            return
        if [k for _, k in rs] != [k for _, k in cs] or len(rs) != len(cs):
            fmt = lambda s: "(" + ", ".join(n for n, _ in s) + ")"
            raise Failure("rejected", "signature_mismatch", "candidate",
                          f"{self.cand_target}: takes {fmt(cs)}, the reference {self.req.target.symbol} "
                          f"takes {fmt(rs)}",
                          hint="the candidate must accept the same arguments as the code it replaces",
                          file=self.cand_target.path)

    def _arm(self, module, symbol: str) -> None:
        real = getattr(module, symbol, None)
        if real is None or isinstance(real, self.guards.Tripwire):
            return
        if isinstance(real, type):
            self.guards.trip_class(real, self.trip_counter)
            return
        if callable(real):
            tw = self.guards.Tripwire(real, symbol)
            setattr(module, symbol, tw)
            self.tripwires.append(tw)

    def check_mutation(self, original, expected_post, cand_in, compare, bitwise_equal,
                       names: Optional[list[str]]) -> Optional[str]:
        """Inputs the reference changed must be changed the same way; others left alone."""
        names = list(names or [])[:len(original.args)] + list(original.kwargs)
        for i, (orig, exp, got) in enumerate(zip(_flat(original), _flat(expected_post), _flat(cand_in))):
            ref_changed = not bitwise_equal(orig, exp)
            cand_changed = not bitwise_equal(orig, got)
            label = names[i] if i < len(names) else f"argument {i}"
            if ref_changed:
                c = compare(exp, got, self.opts.tolerance, path=f"input '{label}' after the call")
                if not c.ok:
                    return c.detail + " (the reference updates this input in place)"
            elif cand_changed:
                return f"the candidate modifies its input '{label}', which the reference leaves unchanged"
        return None

    def reject(self, result, code: str, message: str) -> None:
        from .schema import Flag
        if not any(f.code == code and f.message == message for f in result.flags):
            result.flags.append(Flag(code, "reject", message))
        if result.status != "rejected":
            result.status, result.correct, result.message = "rejected", False, f"rejected: {message}"

    def anti_cheat(self, result, ops, integrity, threads_before) -> None:
        from .schema import Flag
        cand_launches = self.launches.launches["candidate"]
        if self.self_check:
            if not cand_launches:
                result.flags.append(Flag("no_triton_launch", "info",
                                         "no Triton kernel launched: the target runs on PyTorch alone"))
            return
        for f in list(result.flags):
            if f.severity == "reject":
                self.reject(result, f.code, f.message)
        if self.require_triton and not cand_launches:
            self.reject(result, "no_triton_launch",
                        "the candidate launched no Triton kernel while computing its outputs")
        if any(l.side_stream for l in cand_launches) or ops.side_stream_ops:
            self.reject(result, "side_stream", "the candidate launched work on a stream other than the "
                        "current one, where the timer cannot see it")
        tw_calls = sum(t.calls for t in self.tripwires) + self.trip_counter[0]
        if tw_calls:
            self.reject(result, "calls_reference", f"the candidate calls the reference "
                        f"{self.req.target.symbol} ({tw_calls} call(s))")
        allowed = set(self.opts.allow_torch_ops)
        compute = [o for o in ops.compute_ops() if o not in allowed and o.split(".")[-1] not in allowed]
        if compute and (self.require_triton or self.opts.allow_torch_ops):
            shown = ", ".join(f"{o} ×{ops.ops[o]}" for o in compute[:8])
            self.reject(result, "torch_compute",
                        f"the candidate computes with PyTorch ops ({shown}); only allocation, views and "
                        "copies are allowed besides Triton kernels (allow more with allow_torch_ops)")
        changed = integrity.changed()
        if changed or not self.launches.intact():
            self.retire = True
            what = changed or ["triton JITFunction.run"]
            self.reject(result, "tampering", "the candidate replaced " + ", ".join(what[:6]))
        new_threads = self.guards.live_threads() - threads_before - self.ref_threads
        if new_threads:
            self.retire = True
            self.reject(result, "background_thread",
                        f"the candidate left {len(new_threads)} thread(s) running after it returned")

    def aot_reports(self, arch: str) -> list:
        from .aot import ARCHS, compile_for, with_config
        if arch == "device":
            arch = self.device.arch or ""
        if arch not in ARCHS:
            return []
        launched = [(name, raw_fn, sig) for (side, name), (raw_fn, sigs) in self.launches.signatures.items()
                    if side == "candidate" for sig in sigs.values()]
        # (kernel, function, signature, variant): the launches seen, then the configs to screen
        # (each with the argument types of every observed launch of that kernel).
        found = [(name, raw_fn, sig, None) for name, raw_fn, sig in launched]
        seen = set()
        for i, config in enumerate(self.opts.aot_configs if self.opts.aot_kernel else []):
            for name, raw_fn, sig in launched:
                if name == self.opts.aot_kernel:
                    v = with_config(sig, config)
                    if (i, v.key()) not in seen:
                        seen.add((i, v.key()))
                        found.append((name, raw_fn, v, i))
        if not self.interp:
            out = []
            for name, raw_fn, sig, variant in found:
                r = compile_for(raw_fn, name, sig, arch)
                r.variant = variant
                out.append(r)
            return out
        # Under the interpreter, compile in a child process (see runner.aot); it imports the
        # kernel's module from the candidate tree.
        from .aot import _jsonable, compile_in_subprocess
        from .schema import KernelResources
        root = self.trees["candidate"]
        jobs, paths, out = [], [str(root)], []
        for name, raw_fn, sig, variant in found:
            file = getattr(getattr(raw_fn, "__code__", None), "co_filename", "")
            try:
                rel = Path(file).resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                continue  # a kernel from an installed package, not the candidate's
            if not all(_jsonable(v) for _, v in sig.constexprs):
                out.append(KernelResources(kernel=name, arch=arch, num_warps=0, num_stages=0, fits=False,
                                           error="a constexpr value cannot be passed to the compiler process",
                                           variant=variant))
                continue
            module, mpaths = self.module_name(root, rel)
            paths += [p for p in mpaths if p not in paths]
            jobs.append({"module": module, "kernel": name, "signature": sig.signature,
                         "constexprs": sig.constexprs, "divisible": sig.divisible,
                         "options": sig.options, "specialized": sig.specialized, "arch": arch,
                         "variant": variant})
        return out + (compile_in_subprocess(jobs, paths) if jobs else [])

    def time_cases(self, result, cases, run_cases, ref_fn, cand_fn, compare, clone, nbytes, ref_mod):
        from . import schema as S
        from .devices import l2_bytes
        from .timing import hidden_work, time_pair
        torch = self.torch
        opts = self.opts
        per = []
        notes = set()
        flops_fn = getattr(ref_mod, "get_flops", None)
        bytes_fn = getattr(ref_mod, "get_bytes", None)
        for cr in result.cases:
            if cr.index not in run_cases:
                continue
            call = cases[cr.index].make(opts.seed + 1000 * cr.index)
            call.args, call.kwargs = self.to_device(call.args), self.to_device(call.kwargs)
            ref_in, cand_in = clone_call(call), clone_call(call)
            last = {}

            def ref_call():
                return ref_fn(*ref_in.args, **ref_in.kwargs)

            def cand_call():
                last["out"] = cand_fn(*cand_in.args, **cand_in.kwargs)
                return last["out"]

            try:
                pt = time_pair(ref_call, cand_call, warmup_ms=opts.warmup_ms, rep_ms=opts.rep_ms,
                               min_reps=opts.min_reps, max_reps=opts.max_reps,
                               flush_bytes=l2_bytes(self.device), flush_l2=opts.flush_l2,
                               cuda_graph_below_us=opts.cuda_graph_below_us)
            except BaseException as e:
                raise self.classify(e, "candidate", f"timing case '{cr.label}'") from None
            if pt.note:
                notes.add(pt.note)
            # The candidate must still be right after being timed (no switch to a cached answer).
            fresh = clone_call(call)
            with torch.no_grad():
                exp = ref_fn(*fresh.args, **fresh.kwargs)
                fresh2 = clone_call(call)
                got = cand_fn(*fresh2.args, **fresh2.kwargs)
            torch.cuda.synchronize()
            c = compare(exp, got, opts.tolerance)
            if not c.ok:
                self.reject(result, "changes_when_timed",
                            f"after timing, the candidate's output on case '{cr.label}' is wrong: {c.detail}")
            hw = hidden_work(pt)
            if hw:
                result.flags.append(S.Flag("hidden_work", "warning", f"case '{cr.label}': {hw}"))
            moved = nbytes((call.args, call.kwargs)) + nbytes(exp)
            if callable(bytes_fn):  # the file knows better (a gather reads only the rows it uses)
                try:
                    moved = int(bytes_fn(*call.args, **call.kwargs))
                except Exception as e:
                    notes.add(f"get_bytes failed ({type(e).__name__}: {str(e)[:120]}); bytes counted "
                              "as inputs + outputs")
            ct = S.CaseTiming(ref_ms=pt.ref_ms, cand_ms=pt.cand_ms,
                              speedup=pt.ref_ms / pt.cand_ms if pt.cand_ms > 0 else math.inf,
                              ref_spread_pct=pt.ref_spread_pct, cand_spread_pct=pt.cand_spread_pct,
                              reps=pt.reps, method=pt.method, bytes_moved=moved)
            if self.device.peak_bandwidth_gbs and pt.cand_ms > 0:
                ct.cand_bw_pct_peak = 100.0 * moved / (pt.cand_ms * 1e-3) / (self.device.peak_bandwidth_gbs * 1e9)
            if callable(flops_fn):
                try:
                    flops = float(flops_fn(*call.args, **call.kwargs))
                    ct.cand_tflops = flops / (pt.cand_ms * 1e-3) / 1e12
                    dts = [t.dtype for t in _tensors_of(call) if t.is_floating_point()]
                    key = str(dts[0]).replace("torch.", "") if dts else "float32"
                    key = "tf32" if key == "float32" else ("float8" if "float8" in key else key)
                    peak = self.device.peak_tflops.get(key)
                    if peak:
                        ct.cand_flops_pct_peak = 100.0 * ct.cand_tflops / peak
                except Exception:
                    pass
            cr.timing = ct
            per.append(ct)

        if not per:
            result.timing_unavailable = "no case was timed"
            return
        ref_sum, cand_sum = sum(p.ref_ms for p in per), sum(p.cand_ms for p in per)
        geo = math.exp(sum(math.log(p.speedup) for p in per) / len(per))
        methods = sorted({p.method for p in per})
        result.timing = S.Timing(ref_ms=ref_sum, cand_ms=cand_sum, speedup=ref_sum / cand_sum,
                                 speedup_geomean=geo,
                                 spread_pct=max(max(p.ref_spread_pct, p.cand_spread_pct) for p in per),
                                 method="+".join(methods), cases_timed=len(per))
        for n in notes:
            result.flags.append(S.Flag("timing_note", "info", n))
        if not self.self_check and result.timing.speedup > opts.speedup_flag:
            result.flags.append(S.Flag("suspicious_speedup", "warning",
                                       f"{result.timing.speedup:.1f}x faster is above {opts.speedup_flag:g}x: "
                                       "have a person check that the candidate does all the work"))
        for p, cr in zip(per, [c for c in result.cases if c.timing]):
            if p.cand_bw_pct_peak and p.cand_bw_pct_peak > 100:
                result.flags.append(S.Flag("exceeds_peak", "warning",
                                           f"case '{cr.label}': moves its inputs and outputs at "
                                           f"{p.cand_bw_pct_peak:.0f}% of peak bandwidth, which is not "
                                           "possible if it reads everything once"))

    def summary(self, result, run_cases) -> str:
        n = len(run_cases)
        skipped = sum(1 for c in result.cases if c.skipped)
        base = ("the target runs and agrees with itself" if self.self_check else "correct") + \
               f" on {n} case(s) × {self.opts.trials} trial(s)"
        if skipped:
            base += f" ({skipped} skipped here)"
        if result.timing:
            t = result.timing
            if self.self_check:
                base += f"; {t.ref_ms:.4f} ms (Σ over {t.cases_timed} case(s))"
            else:
                base += f"; {t.speedup:.2f}x ({t.ref_ms:.4f} ms -> {t.cand_ms:.4f} ms)"
        return base


class _Done(Exception):
    pass


def clone_call(call):
    from .compare import clone
    from .inputs import Call
    return Call(clone(call.args), clone(call.kwargs))


def _flat(call):
    return list(call.args) + list(call.kwargs.values())


def _tensors_of(call):
    from .compare import tensors
    return list(tensors((call.args, call.kwargs)))


def _upcast_bf16(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype == torch.bfloat16 else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_upcast_bf16(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _upcast_bf16(v) for k, v in obj.items()}
    return obj


# --------------------------------------------------------------------------- entry point


def _sandbox_report() -> dict:
    return {"network": os.environ.get("GEAK_SANDBOX_NETWORK", "unknown"),
            "scratch": "per-request temporary directory, removed after"}


def main() -> None:
    global _PROTO
    _PROTO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever user code prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    # Scratch files (the request's trees, anything user code writes to tempfile) live in the
    # worker's own directory, which the pool deletes even when it has to kill the worker.
    tempfile.tempdir = os.getcwd()
    requested = os.environ.get("GEAK_DEVICE", "auto")
    try:
        info, launches = _setup(requested)
    except BaseException as e:
        send({"event": "fatal", "message": f"{type(e).__name__}: {e}"})
        return
    from . import schema as S
    send({"event": "hello", "device": S.to_dict(info), "pid": os.getpid()})
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("op") == "exit":
            break
        if msg.get("op") != "eval":
            continue
        try:
            req = S.from_dict(S.EvalRequest, msg["request"])
            ev = Evaluation(req, info, launches)
            result = ev.run()
            result.sandbox = _sandbox_report()
            retire = ev.retire
        except BaseException as e:  # a bug of ours: say so plainly, keep the worker honest
            result = S.EvalResult(status="crashed", correct=False, id=msg.get("request", {}).get("id", ""),
                                  message=f"internal error in the evaluator: {type(e).__name__}: {e}",
                                  error=S.ErrorInfo(kind="internal", side="harness", message=str(e),
                                                    traceback=traceback.format_exc()[-4000:]),
                                  device=info)
            retire = True
        send({"event": "result", "result": S.to_dict(result), "retire": retire})
        if retire:
            break


if __name__ == "__main__":
    main()
