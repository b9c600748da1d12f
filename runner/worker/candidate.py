"""The candidate's worker: runs the candidate, reports what it saw, times (inside the worker).

This process imports candidate code, so everything it says is a claim: its outputs go to the
reference's worker to be judged, and the pool decides the verdict (``runner.judge.verdict``). What it
observes (Triton launches, PyTorch compute, streams, threads, replaced library functions, calls
into the reference) can only make a verdict worse. Per op (``runner.worker.channel``):

* ``load``: import the reference tree (to time it) and the candidate tree, with tripwires where
  a candidate could reach the reference symbol; check the signature;
* ``candidate`` (case, trial): run the candidate on the inputs the reference's worker wrote (or
  run the test, unit ``tests``), observed, and write its record for the judge;
* ``observe``: what the candidate did over all its calls;
* ``aot``: ahead-of-time compile reports of its launches (and of ``aot_configs``), or under
  the interpreter what the pool's compile worker is to compile;
* ``time`` (case): reference and candidate interleaved on the same inputs (``runner.worker.timing``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from . import autotune_pin, channel
from .errors import Failure
from .exchange import PATTERN_A, clone_layout, from_transfer, load, save
from .inputs import Call, unit_tests
from .side import Side, clone_call, lookup
from ..units import separator_line


MAX_VARIANTS = 4  # sets of input dtypes Inductor is asked to write for


class CandidateSide(Side):
    role = "candidate"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.tripwires: list = []
        self.trip_counter = [0]
        self.ops = self.guards.OpRecorder(self.launches)
        self.models: dict[str, Any] = {}
        self.ref_threads: set = set()
        self.pins = autotune_pin.Pins()
        self.calls_by_dtype: dict[tuple, Call] = {}  # the first case run of each set of input dtypes

    def handle(self, op: str, msg: dict) -> dict:
        case, trial = int(msg.get("case", 0)), int(msg.get("trial", 0))
        if op == "load":
            return self.load()
        if op == "candidate":
            return self.run(case, trial)
        if op == "observe":
            return self.observe()
        if op == "aot":
            resources, compiles = self.aot_reports(self.opts.aot_arch or "")
            return {"resources": resources, "compile": compiles}
        if op == "time":
            return self.time(case)
        if op == "inductor":
            return {"generated": self.inductor()}
        raise RuntimeError(f"unknown op '{op}'")

    # ----------------------------------------------------------------- load

    def load(self) -> dict:
        req, ct = self.req, self.cand_target
        channel.at("reference", "import")
        self.ref_module = self.import_side("reference", req.target.path)
        self.ref_obj = self.resolve(self.ref_module, req.target.symbol, "reference", req.target.path)
        self.threads_before = self.guards.live_threads()
        self.integrity = self.guards.IntegritySnapshot()
        channel.at("candidate", "import")
        self.cand_module = self.import_side("candidate", ct.path, before=self.arm_tripwires)
        self.cand_obj = self.resolve(self.cand_module, ct.symbol, "candidate", ct.path)
        if not self.self_check and ct.symbol != req.target.symbol and self.unit == "symbol":
            self._arm(self.cand_module, req.target.symbol)
        if self.unit == "tests":
            text = {**req.files, **req.candidate_files}.get(ct.path, "")
            self.tests, _ = unit_tests(self.cand_module, separator_line(text) or 0)
        elif not self.self_check:
            self.check_signatures()
        # The static flags of the candidate's files are the pool's own (source.candidate_flags):
        # this process imported the candidate, so it reports only what it saw change.
        return {"tampered": self.integrity.changed()}

    def arm_tripwires(self, root: Path) -> None:
        """The candidate's tree has its own copy of the target file; a candidate that imports it
        gets a tripwire in place of the reference symbol."""
        req = self.req
        if self.self_check or self.unit == "tests" or self.cand_target.path == req.target.path:
            return
        if req.target.path in req.files:
            import importlib
            name, _ = self.trees.module_name(root, req.target.path)
            try:
                with self.trees.device_ctx():
                    copy = importlib.import_module(name)
            except BaseException:
                return
            self._arm(copy, req.target.symbol)

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

    def check_signatures(self) -> None:
        import inspect

        def sig(o):
            try:
                target = o.forward if self.is_module_class(o) else self.callable_of(o)
                params = list(inspect.signature(target).parameters.values())
                if self.is_module_class(o):
                    params = params[1:]
                return [(p.name, p.kind) for p in params]
            except (TypeError, ValueError):
                return None

        rs, cs = sig(self.ref_obj), sig(self.cand_obj)
        if rs is None or cs is None:
            return
        if [k for _, k in rs] != [k for _, k in cs] or len(rs) != len(cs):
            def fmt(s):
                return "(" + ", ".join(n for n, _ in s) + ")"
            raise Failure("rejected", "signature_mismatch", "candidate",
                          f"{self.cand_target}: takes {fmt(cs)}, the reference {self.req.target.symbol} "
                          f"takes {fmt(rs)}",
                          hint="the candidate must accept the same arguments as the code it replaces",
                          file=self.cand_target.path)

    # ----------------------------------------------------------------- what runs

    def function(self, side: str):
        obj = self.ref_obj if side == "reference" else self.cand_obj
        if self.is_module_class(obj):
            if side not in self.models:
                init = getattr(self, "init", None)
                if init is None:
                    from .inputs import discover
                    with self.trees.device_ctx():
                        found = discover(self.ref_module, self.req.target.symbol, True)
                    self.init = init = found.init
                ref = self.function("reference") if side == "candidate" else None
                self.models[side] = self.build_model(obj, init, self.opts.seed, ref)
                if side == "candidate" and not self.self_check:
                    for klass in type(self.models[side]).__mro__[1:]:
                        if klass.__name__ == self.req.target.symbol:
                            self.guards.trip_class(klass, self.trip_counter)
            return self.models[side]
        return self.callable_of(obj)

    def run(self, case: int, trial: int) -> dict:
        seed = self.opts.seed + 1000 * case + (trial if trial >= 0 else 997)
        before = self.guards.live_threads()
        stream = None if self.interp else self.torch.cuda.current_stream().cuda_stream
        self.launches.side, self.launches.expected_stream = "candidate", stream
        self.ops.expected_stream = stream
        n0 = len(self.launches.launches["candidate"])
        self.pins.apply(self.xdir, self.trees.loaded.get("candidate", []), self.trees.roots["candidate"])
        try:
            if self.unit == "tests":
                test = self.tests[case]
                channel.at("candidate", test.label)
                try:
                    with channel.step("call"):
                        rec, _ = self.record_test(self.cand_module, self.cand_target.path, test, seed, PATTERN_A,
                                                  self.ops)
                except Failure:
                    raise
                except BaseException as e:
                    f = self.failure(e, "candidate", test.label)
                    if f.retire or f.kind != "runtime_error":
                        raise f from None
                    rec = {"return": None, "calls": [], "raised": type(e).__name__, "message": f.message}
            else:
                with channel.step("inputs"):
                    d = load(str(self.xdir / f"in-{case}-{trial}.pt"))
                    mine = (self.cand_module, self.ref_module)  # an object: this side's class of its name
                    call = Call(tuple(from_transfer(d["args"], *mine)), dict(from_transfer(d["kwargs"], *mine)))
                fn = self.function("candidate")
                if self.opts.inductor:
                    from .inductor import dtype_key
                    key = dtype_key(call.args, call.kwargs)
                    if key not in self.calls_by_dtype and len(self.calls_by_dtype) < MAX_VARIANTS:
                        self.calls_by_dtype[key] = Call(tuple(from_transfer(d["args"], *mine)),
                                                        dict(from_transfer(d["kwargs"], *mine)))
                channel.at("candidate", f"case {case}")
                try:
                    with channel.step("call"):
                        rec = self.record_call(fn, call, seed, PATTERN_A, self.ops, given=True)
                except Failure:
                    raise
                except BaseException as e:
                    raise self.failure(e, "candidate", f"{self.cand_target.symbol} on case {case}") from None
        finally:
            self.launches.side = self.launches.expected_stream = self.ops.expected_stream = None
            self.note_threads(before)
        with channel.step("save"):
            save(str(self.xdir / f"out-{case}-{trial}.pt"), rec)
        return {"launches": sorted({x.kernel for x in self.launches.launches["candidate"][n0:]}),
                "pinned": sorted(self.pins.kernels)}

    def note_threads(self, before: set) -> None:
        self.new_threads = getattr(self, "new_threads", set()) | (self.guards.live_threads() - before)

    # ----------------------------------------------------------------- observations

    def observe(self) -> dict:
        launches = self.launches.launches["candidate"]
        left = self.guards.live_threads() - self.threads_before
        # This process holds the original's tree (imported to time it); a kernel of that tree
        # launched while the candidate ran was reached through it (the heap, a module lookup):
        # the candidate's own copy of a file lives in its own tree.
        ref_root = str(self.trees.roots["reference"]).rstrip("/") + "/"
        from_reference = sum(1 for x in launches if x.file.startswith(ref_root))
        return {
            "launches": sorted({x.kernel for x in launches}),
            "side_stream": any(x.side_stream for x in launches) or bool(self.ops.side_stream_ops),
            "ops": self.ops.compute_counts(),
            "reference_calls": sum(t.calls for t in self.tripwires) + self.trip_counter[0] + from_reference,
            "tampered": self.integrity.changed() + ([] if self.launches.intact() else ["triton JITFunction.run"]),
            "threads_left": len(left),
        }

    def aot_reports(self, arch: str) -> tuple[list, Optional[dict]]:
        """The compile reports made here, and the compiles this process cannot make (under the
        interpreter; ``runner.aot.compile_request``) for the pool's compile worker."""
        from ..aot import ARCHS, compile_for, compile_request, constexprs_to_wire, default_stage, share_listings, with_config
        from ..schema import KernelResources, to_dict
        if arch == "device":
            arch = self.device.arch or ""
        if arch not in ARCHS:
            return [], None
        stage = self.opts.aot_stage
        if stage == "default":
            stage = default_stage(arch)
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
        channel.phase("compile")  # CPU work: off the device lock
        try:
            if not self.interp:
                out = []
                for name, raw_fn, sig, variant in found:
                    r = compile_for(raw_fn, name, sig, arch, stage if variant is None else None)
                    r.variant = variant
                    out.append(r)
                share_listings(out)
                return [to_dict(r) for r in out], None
            # Under the interpreter, the pool's compile worker compiles (see runner.aot); it
            # imports the kernel's module from a copy of the candidate tree.
            root = self.trees.roots["candidate"]
            jobs, out = [], []
            for name, raw_fn, sig, variant in found:
                file = getattr(getattr(raw_fn, "__code__", None), "co_filename", "")
                try:
                    rel = Path(file).resolve().relative_to(root.resolve()).as_posix()
                except ValueError:
                    continue  # a kernel from an installed package, not the candidate's
                wire = constexprs_to_wire(sig.constexprs)
                if wire is None:
                    out.append(KernelResources(kernel=name, arch=arch, num_warps=0, num_stages=0, fits=False,
                                               error="a constexpr value cannot be passed to the compiler process",
                                               variant=variant))
                    continue
                jobs.append({"rel": rel, "kernel": name, "signature": sig.signature,
                             "constexprs": wire, "divisible": sig.divisible,
                             "options": sig.options, "specialized": sig.specialized, "arch": arch,
                             "variant": variant, "stage": stage if variant is None else None})
            files = {**self.trees.files, **self.trees.candidate_files}
            return [to_dict(r) for r in out], (compile_request(files, jobs) if jobs else None)
        finally:
            channel.phase("run")

    def inductor(self) -> dict:
        """What PyTorch's compiler writes for the target on the first case's inputs
        (``runner.worker.inductor``); never compiled or run here."""
        from .inductor import generate_all
        if self.unit == "tests":
            return {"error": "PyTorch's compiler is given a function and its inputs: this file's "
                             "code is checked through its tests, which give none"}
        if not self.calls_by_dtype:
            return {"error": "no case ran, so there were no inputs to give PyTorch's compiler"}
        fn = self.function("candidate")
        channel.phase("compile")
        try:
            return generate_all(fn, [(c.args, c.kwargs) for c in self.calls_by_dtype.values()],
                                {Path(self.cand_target.path).name})
        except BaseException as e:
            return {"error": f"PyTorch's compiler failed: {type(e).__name__}: {str(e)[:300]}"}
        finally:
            channel.phase("run")

    # ----------------------------------------------------------------- timing (GPU)

    def time(self, case: int) -> dict:
        self.pins.lift()  # each side's autotuner picks its own config for timing
        with channel.step("prepare"):
            data = load(str(self.xdir / f"time-{case}.pt"))
            pairs, calls = [], []
            if self.unit == "tests":
                for c in data:
                    ref_fn, cand_fn = lookup(self.ref_module, c["fn"]), lookup(self.cand_module, c["fn"])
                    if ref_fn is None or cand_fn is None:
                        continue
                    # Each side's arguments made apart: an object the call passes is an instance of
                    # that side's own class of its name (the reference's where the candidate has none).
                    calls.append(Call(tuple(from_transfer(c["args"], self.ref_module)),
                                      dict(from_transfer(c["kwargs"], self.ref_module))))
                    mine = (self.cand_module, self.ref_module)
                    cand_call = Call(tuple(from_transfer(clone_layout(c["args"]), *mine)),
                                     dict(from_transfer(clone_layout(c["kwargs"]), *mine)))
                    pairs.append(self._pair(ref_fn, cand_fn, calls[-1], cand_call))
            else:
                calls.append(Call(tuple(from_transfer(data["args"], self.ref_module)),
                                  dict(from_transfer(data["kwargs"], self.ref_module))))
                mine = (self.cand_module, self.ref_module)
                cand_call = Call(tuple(from_transfer(clone_layout(data["args"]), *mine)),
                                 dict(from_transfer(clone_layout(data["kwargs"]), *mine)))
                pairs.append(self._pair(self.function("reference"), self.function("candidate"), calls[0], cand_call))
        if not pairs:
            return {"timing": None}
        try:
            t = self.time_pairs(pairs, self.opts.rep_ms, self.opts.min_reps)
        except BaseException as e:
            raise self.failure(e, "candidate", f"timing case {case}") from None
        with channel.step("work"):
            t.update(self.work(calls, self.ref_module, self.function("reference") if self.unit == "symbol" else None))
        return {"timing": t}

    def _pair(self, ref_fn, cand_fn, call: Call, cand_call: Call | None = None):
        ref_in, cand_in = clone_call(call), clone_call(cand_call or call)
        return (lambda: ref_fn(*ref_in.args, **ref_in.kwargs),
                lambda: cand_fn(*cand_in.args, **cand_in.kwargs))
