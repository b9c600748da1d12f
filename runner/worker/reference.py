"""The reference's worker: the user's code, the inputs, and the judgment (inside the worker).

It imports only the reference tree; no candidate code ever runs in this process, so its
judgment cannot be changed by a candidate. Per op (``runner.worker.channel``):

* ``load``: import the target, find the input cases (``runner.worker.inputs``), say which run here;
* ``reference`` (case, trial): build the trial's inputs under its own seed, write them to the
  exchange directory for the candidate (layout kept), run the reference on its own copy, and
  keep the record. Where the reference's outputs hold the allocation pattern, run it again
  under a second pattern: elements that hold each pattern were never written, and are left out
  of the comparison (and said so);
* ``judge`` (case, trial): load what the candidate's worker wrote (tensors and plain values
  only) and compare it with the kept record: outputs, the inputs' state after the call (the
  candidate must update in place exactly what the reference updates), gradients; for a test,
  what it returned and every call it made into the code. When they differ, the reference runs
  once more on the same inputs: elements where it disagrees with itself have no one right
  value; they are left out (and said so), unless they are most of a tensor, which then cannot
  be checked at all;
* ``attach``: the next evaluation of the same reference (``pool.reference_digest``), with its
  own options. What the reference computed for a case and trial (its inputs, record and
  masks: the draws depend only on the seed) is kept for the next evaluations (``Memo``), so
  that a tuner's many configs each cost one run of the candidate, not one of each side;
* ``time_inputs`` (case): write the inputs to time on; ``time_alone`` (case): time the
  reference by itself, a figure the candidate's process cannot touch (the pool checks the
  reference's time beside the candidate against it); ``time_self`` (case): the original's
  check, the original timed against itself here.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from . import autotune_pin, channel
from .compare import Comparison, bitwise_equal, compare, numel, summarize, tensors
from .errors import Failure
from .exchange import (PATTERN_A, PATTERN_B, RERUN_CANARIES, TooLarge, any_pattern, clone_layout, float_canary,
                       hand_again, is_same_as_given, Kept, NotTransferable, guard_inputs, leave_out, leaves, load, merge_masks,
                       refill_bands, save,
                       to_transfer, unwritten, varying, varying_numbers)
from .inputs import Call, InputError, discover, unit_tests
from .side import Side, clone_call, lookup
from ..units import separator_line


RERUNS = 3
"""How many more runs of the reference, at most, look for elements that vary on a mismatch (on a
GPU; one under the interpreter)."""
MEMO_BYTES = 256 << 20
"""The most tensor memory the reference keeps of its past runs for the next evaluations."""
REST_SLACK_BYTES = 1 << 20
"""Device memory above what the reference held at its first rest that makes the next rest collect
garbage before giving memory back."""


class ReferenceSide(Side):
    role = "reference"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.expected: dict[tuple[int, int], tuple[dict, dict, Optional[Call]]] = {}
        self.timed_calls: dict[int, list] = {}
        self.model = None
        self.bf16_upcast = False
        self.ops = self.guards.OpRecorder(self.launches)
        self.rest_bytes: Optional[int] = None  # device memory held at rest after a full collection
        self.memo = Memo(MEMO_BYTES)
        self.memo_kernels: set[str] = set()  # kernels of runs given from the memo in this evaluation
        self.alone: dict[tuple, tuple[float, dict]] = {}
        """The reference timed alone, per case and timing options: (when, the fastest figure
        measured in the last ``ALONE_REUSE_S``), for ``time_alone(reuse=True)``."""

    def handle(self, op: str, msg: dict) -> dict:
        if op == "load":
            return self.load(msg.get("described"))
        if op == "attach":  # the next evaluation of the same reference, with its own options
            from pathlib import Path

            from .. import schema
            self.xdir = Path(msg["exchange"])
            self.retarget(schema.from_dict(schema.EvalRequest, msg["request"]))
            self.expected.clear()
            self.ops.ops.clear()
            self.launches.reset()
            self.memo_kernels = set()
            return {}
        if op == "rest":  # between evaluations: hold no records, and no device memory it can give back
            return self.rest()
        case, trial = int(msg.get("case", 0)), int(msg.get("trial", 0))
        if op == "reference":
            return self.run(case, trial)
        if op == "judge":
            return self.judge(case, trial)
        if op == "time_inputs":
            return self.time_inputs(case)
        if op == "time_alone":
            return self.time_alone(case, bool(msg.get("reuse")))
        if op == "time_self":
            return self.time_self(case)
        raise RuntimeError(f"unknown op '{op}'")

    def retarget(self, req) -> None:
        """The next evaluation's request: the same reference tree, target and input cases (the
        pool matched them), its own options and candidate."""
        self.req, self.opts = req, req.options
        self.self_check = req.candidate is None
        self.cand_target = req.candidate or req.target

    def rest(self) -> dict:
        """Between evaluations: drop the records, and give back the device memory they held.
        A full garbage collection (a quarter of a second in a process holding torch) runs only
        when memory is still held after that (tensors kept alive in reference cycles)."""
        import gc
        self.expected.clear()
        self.timed_calls.clear()
        if self.interp:
            gc.collect(1)
            return {}
        cuda = self.torch.cuda
        held = cuda.memory_allocated() - self.memo.device_bytes
        if self.rest_bytes is None or held > self.rest_bytes + REST_SLACK_BYTES:
            gc.collect()
        cuda.empty_cache()  # an idle worker holds no cached blocks others could use
        if self.rest_bytes is None:
            self.rest_bytes = cuda.memory_allocated() - self.memo.device_bytes  # what the reference's own code keeps
        return {}

    # ----------------------------------------------------------------- load

    def load(self, described: Optional[list] = None) -> dict:
        """Import the reference and find its input cases. ``described``: the cases as an earlier
        reference worker of the same digest (reference tree, target, seed, cases, device, unit)
        described them, from the pool: then no case is drawn just to be described (under the
        interpreter, a 64M-element case took a second to draw only to be found too large)."""
        req = self.req
        channel.at("reference", "import")
        self.module = self.import_side("reference", req.target.path)
        self.obj = self.resolve(self.module, req.target.symbol, "reference", req.target.path)
        if self.unit == "tests":
            return self.load_tests()
        try:
            with self.trees.device_ctx():
                found = discover(self.module, req.target.symbol, self.is_module_class(self.obj))
        except InputError as e:
            raise Failure("compile_error", "no_inputs" if "no inputs" in str(e) else "bad_inputs", "reference",
                          f"{req.target.path}: {e}", hint=e.hint, file=req.target.path) from None
        except BaseException as e:
            f = self.failure(e, "reference", f"{req.target.path}: finding inputs")
            f.kind = "bad_inputs"
            raise f from None
        self.found = found
        if described is not None and [c.get("index") for c in described] == self.selected(len(found.cases)):
            self.bf16_upcast = any("bfloat16 inputs upcast" in (c.get("detail") or "") for c in described)
            return {"cases": [dict(c) for c in described], "convention": found.convention,
                    "notes": list(found.notes)}
        cases = [self.describe_case(i) for i in self.selected(len(found.cases))]
        if not any(c["skipped"] is None for c in cases) and self.interp and \
                any("bfloat16" in (c["skipped"] or "") for c in cases):
            # Nothing else to check: upcast bf16 to float32 rather than check nothing.
            self.bf16_upcast = True
            for c in cases:
                if "bfloat16" in (c["skipped"] or ""):
                    c["skipped"], c["detail"] = None, "bfloat16 inputs upcast to float32 (interpreter)"
        return {"cases": cases, "convention": found.convention, "notes": list(found.notes)}

    def load_tests(self) -> dict:
        path = self.req.target.path
        sep = separator_line(self.req.files.get(path, "")) or 0
        self.tests, notes = unit_tests(self.module, sep)
        if not self.tests:
            raise Failure("compile_error", "no_inputs", "reference",
                          f"{path}: no test_*() function below the separator to run",
                          hint="the tests below the line of 146 '#' call the code above it", file=path)
        cases = [{"index": i, "label": t.label, "shapes": "", "skipped": None, "detail": None}
                 for i, t in enumerate(self.tests) if i in set(self.selected(len(self.tests)))]
        return {"cases": cases, "convention": "tests", "notes": notes,
                "autotuned": bool(autotune_pin.autotuners(self.trees.loaded.get("reference", []),
                                                          self.trees.roots["reference"]))}

    def selected(self, n: int) -> list[int]:
        if self.opts.cases is None:
            return list(range(n))
        bad = [i for i in self.opts.cases if not 0 <= i < n]
        if bad:
            raise Failure("rejected", "bad_request", "harness",
                          f"case {bad[0]} does not exist: {self.req.target.path} has {n} input case(s), "
                          f"numbered 0 to {n - 1}", hint=f"pass --cases with numbers from 0 to {n - 1}")
        return list(self.opts.cases)

    def describe_case(self, i: int) -> dict:
        case = self.found.cases[i]
        out = {"index": i, "label": case.label, "shapes": "", "skipped": None, "detail": None}
        probe = self.inputs(i, self.seed(i, 0))
        out["shapes"] = summarize(list(probe.args) + list(probe.kwargs.values()), self.param_names(self.obj))
        if self.interp:
            n = numel((probe.args, probe.kwargs))
            if n > self.opts.interpreter_max_elements:
                out["skipped"] = (f"{n:,} input elements: too large for the CPU interpreter "
                                  f"(limit {self.opts.interpreter_max_elements:,}); runs on a GPU runner")
            elif any(t.dtype == self.torch.bfloat16 for t in tensors((probe.args, probe.kwargs))):
                out["skipped"] = ("bfloat16: the Triton CPU interpreter computes bf16 wrongly; this case "
                                  "runs on a GPU runner")
        return out

    # ----------------------------------------------------------------- inputs

    def seed(self, case: int, trial: int) -> int:
        return self.opts.seed + 1000 * case + (trial if trial >= 0 else 997)

    def inputs(self, case: int, seed: int) -> Call:
        label = self.found.cases[case].label
        try:
            with self.trees.device_ctx():
                call = self.found.cases[case].make(seed)
        except InputError as e:
            raise Failure("compile_error", "bad_inputs", "reference", f"{self.req.target.path}: {e}",
                          hint=e.hint, file=self.req.target.path) from None
        except BaseException as e:
            f = self.failure(e, "reference", f"{self.req.target.path}: building inputs for case '{label}'")
            f.kind = "bad_inputs"
            raise f from None
        call.args, call.kwargs = self.to_device(call.args), self.to_device(call.kwargs)
        if self.bf16_upcast:
            call.args, call.kwargs = _upcast_bf16(call.args), _upcast_bf16(call.kwargs)
        return call

    def function(self):
        if self.is_module_class(self.obj):
            if self.model is None:
                self.model = self.build_model(self.obj, self.found.init, self.opts.seed)
            return self.model
        return self.callable_of(self.obj)

    # ----------------------------------------------------------------- running

    def run(self, case: int, trial: int) -> dict:
        seed = self.seed(case, trial)
        self.launches.side = "reference"
        try:
            if self.unit == "tests":
                return self.run_test(case, trial, seed)
            return self.run_call(case, trial, seed)
        finally:
            self.launches.side = None

    def run_call(self, case: int, trial: int, seed: int) -> dict:
        label = self.found.cases[case].label
        kept = self.memo.get((case, seed, False))
        if kept is not None:
            return self.from_memo(case, trial, kept)
        call = self.inputs(case, seed)
        call.args, call.kwargs = guard_inputs((tuple(call.args), dict(call.kwargs)))
        handed = self.hand_inputs(f"in-{case}-{trial}.pt", call, label, keep=True)
        fn = self.function()
        channel.at("reference", label)
        ops0, kernels0 = dict(self.ops.ops), len(self.launches.launches["reference"])
        try:
            rec = self.record_call(fn, clone_call(call), seed, PATTERN_A, self.ops)
            masks = {}
            if any_pattern(rec):
                again = self.record_call(fn, clone_call(call), seed, PATTERN_B)
                masks = {k: unwritten(rec[k], again[k]) for k in rec}
        except Failure:
            raise
        except BaseException as e:
            raise self.failure(e, "reference", f"{self.req.target.symbol} on case '{label}'") from None
        self.expected[(case, trial)] = (rec, masks, call)
        self.save_autotune_choices()
        reply = {"ops": self.ops.compute_counts(), "launches": self.kernels(), "oob": rec.get("oob"),
                 "reads_outside": rec.get("reads_outside")}
        entry = self.memo_entry(ops0, kernels0, reply, rec, masks, call, None)
        entry["handed"] = handed
        self.memo.put((case, seed, False), entry)
        return reply

    def memo_entry(self, ops0: dict, kernels0: int, reply: dict, rec, masks, call, timed) -> dict:
        """What a later evaluation needs of this run: the record, masks and inputs (copies, so
        that what the judge changes in its own is not kept), the run's own op counts and
        kernels, and its reply."""
        ops = {k: n - ops0.get(k, 0) for k, n in self.ops.ops.items() if n - ops0.get(k, 0)}
        kernels = {x.kernel for x in self.launches.launches["reference"][kernels0:]}
        # The judge leaves masked elements out of its record in place (``leave_out``): with
        # masks, the memo keeps a copy of its own.
        return {"rec": clone_layout(rec) if masks else rec, "masks": masks, "call": call, "timed": timed, "ops": ops,
                "kernels": kernels, "reply": {k: v for k, v in reply.items() if k not in ("ops", "launches")}}

    def from_memo(self, case: int, trial: int, kept: dict) -> dict:
        """A run of an earlier evaluation on the same draw, as if it ran now: the candidate gets
        the same inputs, the judge a copy of the same record; the counts go on as if it ran."""
        call = kept["call"]
        if kept.get("handed") is not None:  # the same draw's inputs, as handed the first time
            hand_again(f"in-{case}-{trial}.pt", kept["handed"])
        elif call is not None:
            self.hand_inputs(f"in-{case}-{trial}.pt", call, self.found.cases[case].label)
        for k, n in kept["ops"].items():
            self.ops.ops[k] = self.ops.ops.get(k, 0) + n
        self.memo_kernels |= kept["kernels"]
        if kept["timed"] is not None:
            self.timed_calls[case] = kept["timed"]
        rec = clone_layout(kept["rec"]) if kept["masks"] else kept["rec"]
        self.expected[(case, trial)] = (rec, kept["masks"], call)
        self.save_autotune_choices()
        return {**kept["reply"], "ops": self.ops.compute_counts(), "launches": self.kernels(), "memo": True}

    def run_test(self, case: int, trial: int, seed: int) -> dict:
        test = self.tests[case]
        capture = trial == 0 and not self.interp and self.opts.timing
        kept = self.memo.get((case, seed, capture))
        if kept is not None:
            return self.from_memo(case, trial, kept)
        channel.at("reference", test.label)
        timed: list = []
        ops0, kernels0 = dict(self.ops.ops), len(self.launches.launches["reference"])
        try:
            rec, timed = self.record_test(self.module, self.req.target.path, test, seed, PATTERN_A,
                                          self.ops, capture)
            masks = {}
            if any_pattern(rec):
                again, _ = self.record_test(self.module, self.req.target.path, test, seed, PATTERN_B)
                masks = {k: unwritten(rec[k], again[k]) for k in rec}
        except TooLarge as e:
            return {"skipped": f"{test.label} {e}; runs on a GPU runner"}
        except Failure:
            raise
        except BaseException as e:
            f = self.failure(e, "reference", f"{test.label}")
            if f.retire or f.kind != "runtime_error":
                raise f from None
            # The test fails on the original code (its own assertion, usually): what it did up to
            # there is still compared, and the candidate must fail the same way.
            rec, masks = {"return": None, "calls": [], "raised": type(e).__name__, "message": f.message}, {}
        if capture:
            self.timed_calls[case] = timed
        self.expected[(case, trial)] = (rec, masks, None)
        self.save_autotune_choices()
        first = rec["calls"][0] if rec.get("calls") else None
        shapes = ""
        if timed:
            shapes = summarize(list(timed[0]["args"]) + list(timed[0]["kwargs"].values()))
            shapes = f"{timed[0]['fn']}({shapes})"
        elif first is not None:
            shapes = f"{first['fn']}(...)"
        reply = {"ops": self.ops.compute_counts(), "launches": self.kernels(), "shapes": shapes,
                 "raised": rec.get("message"), "oob": rec.get("oob"), "reads_outside": rec.get("reads_outside")}
        self.memo.put((case, seed, capture),
                      self.memo_entry(ops0, kernels0, reply, rec, masks, None, timed if capture else None))
        return reply

    def save_autotune_choices(self) -> None:
        """What the original's autotuners chose, for the candidate's process (``autotune_pin``)."""
        autotune_pin.save(self.xdir, self.trees.loaded.get("reference", []), self.trees.roots["reference"])

    def kernels(self) -> list[str]:
        return sorted({launch.kernel for launch in self.launches.launches["reference"]} | self.memo_kernels)

    # ----------------------------------------------------------------- judging

    def judge(self, case: int, trial: int) -> dict:
        rec, masks, call = self.expected.pop((case, trial))
        out = str(self.xdir / f"out-{case}-{trial}.pt")
        try:
            with channel.step("load"):
                got = load(out)  # tensors stay where they were
        except Exception as e:
            return {"passed": False, "detail": f"no outputs to compare: {e}", "max_abs": None, "max_rel": None}
        if not isinstance(got, dict) or (self.unit != "tests" and "output" not in got):
            return {"passed": False, "detail": "the candidate's outputs are not a record", "max_abs": None,
                    "max_rel": None}
        oob = got.get("oob")
        if oob and not rec.get("oob"):
            return {"passed": False, "max_abs": None, "max_rel": None, "left_out": [],
                    "detail": "writes outside its tensors: " + "; ".join(map(str, oob[:3]))}
        notes: list[str] = []
        with channel.step("compare"):
            c = self.compare_record(rec, got, masks, call, notes)
        varied = False
        if not c.ok and not c.structure:
            with channel.step("recheck"):
                c, notes, varied = self.recheck(case, trial, rec, masks, call, out, c, notes)
        detail = c.detail if c.ok else _with_reads(c.detail, rec, got)
        # A value that still differs where the original reads memory outside its tensors may
        # have no one right value: it mixes in what lies there, which another process lays out
        # otherwise. A number cannot be left out in part: it has none. Tensor elements that
        # change with the bytes beside the tensors are left out by the reruns above, and what
        # differs beyond them is checked; but where the reruns saw nothing vary at all, the
        # reads landed beyond the guard bands, on memory that is the same in every rerun of
        # this process (TritonBench-G's parallel_retention_attention: a byte-identical copy
        # was called wrong, "expected 2.03994e+26"), and nothing tells which elements they
        # reach: nothing can be checked, and the verdict says so instead of blaming the candidate.
        no_answer = c.no_answer or (not c.ok and bool(rec.get("reads_outside"))
                                    and (c.number or (not c.structure and not varied)))
        return {"passed": c.ok, "detail": detail, "max_abs": _finite(c.max_abs), "max_rel": _finite(c.max_rel),
                "left_out": notes, "no_answer": no_answer}

    def recheck(self, case: int, trial: int, rec: dict, masks: dict, call: Optional[Call], out: str,
                c: Comparison, notes: list) -> tuple[Comparison, list, bool]:
        """A mismatch: the reference runs again on the same inputs, up to ``RERUNS`` times, until
        the elements where it disagrees with itself explain the mismatch (they are left out) or
        more than half a tensor varies (nothing can be checked there). Otherwise the mismatch
        stands, described without the elements that vary. Also returns whether any rerun
        differed from the record at all."""
        varies: dict = {}
        varied = False  # whether any rerun differed from the record anywhere
        rec = clone_layout(rec)  # what varies is left out of this copy, not of the memo's record
        # The interpreter runs a kernel's programs one after another, the same way every time:
        # one more run shows what varies there; on a GPU a race may show only now and then.
        for k in range(1 if self.interp else RERUNS):
            again = self.rerun(case, trial, call, RERUN_CANARIES[k % len(RERUN_CANARIES)])
            if not again:
                break
            grew = False
            for k in rec:
                if k not in again:
                    continue
                numbers = varying_numbers(rec[k], again[k], self.opts.tolerance)
                if numbers:  # a number that varies is all of it: nothing there can be checked
                    path, a, b = numbers[0]
                    more = f" (and {len(numbers) - 1} more number(s))" if len(numbers) > 1 else ""
                    c = Comparison(no_answer=True)
                    return c.fail(
                        f"the original's own results differ between runs on the same inputs: {_key_label(k)}{path}: "
                        f"{a!r}, then {b!r}{more}; there is no one right answer to check against (a race, "
                        "atomics, or a read of memory the original never wrote or that lies outside its "
                        "tensors?)"), notes, True
                for p, m in varying(rec[k], again[k], self.opts.tolerance).items():
                    if p in masks.get(k, {}):
                        m = m & ~masks[k][p].to(m.device)  # unwritten already: left out anyway
                    old = varies.setdefault(k, {}).get(p)
                    new = m if old is None else (old | m.to(old.device))
                    grew = grew or old is None or bool((new != old).any())
                    varies[k][p] = new
            varies = {k: v for k, v in varies.items() if v}
            varied = varied or bool(varies)
            if not varies or not grew:
                continue
            most = _mostly(rec, varies)
            if most:
                c = Comparison(no_answer=True)
                return c.fail(f"the original's own results differ between runs on the same inputs: {most}; "
                              "there is no one right answer to check against (a race, atomics, or a read "
                              "of memory the original never wrote or that lies outside its tensors?)"), notes, True
            again_notes: list[str] = []
            retry = self.compare_record(rec, load(out), merge_masks(masks, varies), call, again_notes)
            c, notes = retry, again_notes  # what is wrong beyond what varies
            if retry.ok:
                break
        return c, notes, varied

    def compare_record(self, rec: dict, got: dict, masks: dict, call: Optional[Call], notes: list) -> Comparison:
        if self.unit == "tests":
            return self.judge_test(rec, got, masks, notes)
        return self.judge_call(rec, got, masks, call, notes)

    def rerun(self, case: int, trial: int, call: Optional[Call], canary: int) -> dict:
        """The reference once more on the trial's inputs (under the second allocation pattern,
        and another byte in the guard bands beside floating-point tensors): what it gives when
        nothing but the run, and the memory outside its tensors, changes. {} when it cannot run
        again."""
        seed = self.seed(case, trial)
        # Every candidate of a target that mismatches on this draw asks for the same reruns: the
        # first one's are kept, so a search pays for them once per draw, and every config is
        # judged against the same record of what varies.
        key = ("rerun", case, seed, canary)
        kept = self.memo.get(key)
        if kept is not None:
            return kept["again"]
        fn = self.function() if self.unit != "tests" else None
        try:
            with float_canary(canary):
                if self.unit == "tests":
                    again, _ = self.record_test(self.module, self.req.target.path, self.tests[case], seed,
                                                PATTERN_B)
                else:
                    c = clone_call(call)
                    refill_bands((tuple(c.args), dict(c.kwargs)))
                    again = self.record_call(fn, c, seed, PATTERN_B)
        except Failure:
            raise
        except BaseException:
            return {}
        self.memo.put(key, {"again": again})
        return again

    def judge_call(self, rec: dict, got: dict, masks: dict, call: Call, notes: list) -> Comparison:
        tol = self.opts.tolerance
        c = Comparison()
        notes += leave_out(rec["output"], got.get("output"), masks.get("output", {}), "output")
        c.merge(compare(rec["output"], got.get("output"), tol))
        if not c.ok:
            return c
        mutation = self.mutation(call, rec.get("inputs_after"), got.get("inputs_after"),
                                 masks.get("inputs_after", {}))
        if mutation:
            return c.fail(mutation)
        exp_g, got_g = rec.get("grads"), got.get("grads")
        if exp_g is None and got_g is None:
            return c
        if not isinstance(exp_g, dict) or not isinstance(got_g, dict) or set(exp_g) != set(got_g):
            return c.structural("gradients: the candidate's backward pass gives gradients for other inputs "
                                "than the reference's" if exp_g is not None else
                                "gradients: the candidate's outputs carry gradients the reference's do not")
        names = list(self.param_names(self.obj) or [])[:len(call.args)] + list(call.kwargs)
        for k in sorted(exp_g, key=int):
            label = names[int(k)] if int(k) < len(names) else f"argument {k}"
            notes += leave_out(exp_g[k], got_g[k], _sub_masks(masks.get("grads", {}), f"[{k!r}]"),
                               f"gradient of '{label}'")
            c.merge(compare(exp_g[k], got_g[k], tol, path=f"gradient of '{label}'"))
            if not c.ok:
                break
        return c

    def mutation(self, original: Call, expected: Any, actual: Any, masks: dict) -> Optional[str]:
        """Inputs the reference changed must be changed the same way; others left alone."""
        flat = list(original.args) + list(original.kwargs.values())
        if not isinstance(actual, list) or not isinstance(expected, list) or len(actual) != len(flat):
            return "the candidate's record of its inputs after the call is missing or malformed"
        names = list(self.param_names(self.obj) or [])[:len(original.args)] + list(original.kwargs)
        for i, (orig, exp, got) in enumerate(zip(flat, expected, actual)):
            label = names[i] if i < len(names) else f"argument {i}"
            same = is_same_as_given(got)  # left as handed: the inputs handed are ``original``
            if not bitwise_equal(orig, exp):
                if same:
                    got = clone_layout(orig)  # compared (and masked) in a copy, never the memo's
                leave_out(exp, got, _sub_masks(masks, f"[{i}]"))
                c = compare(exp, got, self.opts.tolerance, path=f"input '{label}' after the call")
                if not c.ok:
                    return c.detail + " (the reference updates this input in place)"
            elif not same and not bitwise_equal(orig, got):
                return f"the candidate modifies its input '{label}', which the reference leaves unchanged"
        return None

    def judge_test(self, rec: dict, got: dict, masks: dict, notes: list) -> Comparison:
        tol = self.opts.tolerance
        c = Comparison()
        if rec.get("raised") or got.get("raised"):
            if rec.get("raised") != got.get("raised"):
                what = f"raises {got.get('raised')}" if got.get("raised") else "completes"
                return c.fail(f"the test {what}, where on the original code it raises "
                              f"{rec.get('raised')}" if rec.get("raised") else
                              f"the test raises {got.get('raised')} ({got.get('message', '')})")
        exp_calls, got_calls = rec.get("calls") or [], got.get("calls")
        if not isinstance(got_calls, list):
            return c.fail("the candidate's record of the test's calls is missing")
        # The calls are paired in the order they were made, not by name: a candidate that
        # renamed a helper its test reaches (an autograd.Function's forward calling a function
        # of the file) makes the same calls with the same values, and is the same computation.
        # Another number of calls, or a call that is not a function's, is another computation.
        if len(got_calls) != len(exp_calls) or not all(isinstance(x, dict) and x.get("fn") for x in got_calls):
            want = ", ".join(x["fn"] for x in exp_calls[:6]) or "none"
            return c.fail(f"the test calls {', '.join(str(x.get('fn')) for x in got_calls[:6] if isinstance(x, dict)) or 'nothing'}"
                          f" in the candidate, and {want} in the original")
        for k, (e, a) in enumerate(zip(exp_calls, got_calls)):
            name = e["fn"] if a["fn"] == e["fn"] else f"{e['fn']}; in the candidate {a['fn']}"
            for part, label in (("output", "output"), ("inputs_after", "inputs after the call")):
                where = f"call {k + 1} ({name}): {label}"
                sub = _sub_masks(masks.get("calls", {}), f"[{k}][{part!r}]")
                notes += leave_out(e[part], a.get(part), sub, where)
                c.merge(compare(e[part], a.get(part), tol, path=where))
                if not c.ok:
                    return c
        notes += leave_out(rec.get("return"), got.get("return"), masks.get("return", {}), "test result")
        c.merge(compare(rec.get("return"), got.get("return"), tol, path="test result"))
        return c

    # ----------------------------------------------------------------- timing (GPU)

    def time_inputs(self, case: int) -> dict:
        """The inputs of a case's timing, handed to the candidate's process: written once per
        draw (kept with the draw's run in the memo, as a sealed memfd) and handed again to every
        later candidate (TritonBench-G's context_attn_llama: 2.7 s of writing each time)."""
        path = str(self.xdir / f"time-{case}.pt")
        key = (case, self.seed(case, 0), self.unit == "tests")
        kept = self.memo.get(key)
        if kept is not None and kept.get("time_handed") is not None:
            hand_again(path, kept["time_handed"])
            return dict(kept["time_reply"])
        reply, handed = self.write_time_inputs(case, path)
        if handed is not None:
            if self.memo.attach(key, "time_handed", handed):  # only onto the entry found above
                kept["time_reply"] = dict(reply)
            else:
                handed.close()
        return reply

    def write_time_inputs(self, case: int, path: str) -> tuple[dict, Optional[Kept]]:
        if self.unit == "tests":
            # Calls whose arguments cannot be handed to the candidate's process (exchange.
            # to_transfer says which can) are not timed, and the verdict says why.
            calls, left = [], []
            if not self.timed_calls.get(case):
                save(path, calls)
                return {"calls": 0, "not_timed": [], "none": (
                    "the test calls none of the file's own functions above its separator (plain functions, "
                    "names bound to an autograd.Function's apply, nn.Module forwards), so there is no call to time")}, None
            for c in self.timed_calls.get(case, []):
                try:
                    calls.append({"fn": c["fn"], "args": to_transfer(list(c["args"]), self.module.__name__),
                                  "kwargs": to_transfer(dict(c["kwargs"]), self.module.__name__)})
                except NotTransferable as e:
                    left.append(f"{c['fn']}() takes a {e}")
            return {"calls": len(calls), "not_timed": sorted(set(left))}, save(path, calls, keep=True)
        call = self.inputs(case, self.seed(case, 0))
        return {"calls": 1}, self.hand_inputs(path, call, self.found.cases[case].label, keep=True)

    def hand_inputs(self, name: str, call: Call, label: str, keep: bool = False) -> Optional[Kept]:
        """A call's inputs to the candidate's process: tensors as they are (layout kept), a
        Triton dtype by name, an object of the file's own classes (a config, an ``nn.Module``)
        by what it holds, rebuilt there from the candidate's class of that name
        (``exchange.to_transfer``)."""
        home = self.module.__name__
        try:
            data = {"args": to_transfer(list(call.args), home), "kwargs": to_transfer(dict(call.kwargs), home)}
        except NotTransferable as e:
            raise Failure("compile_error", "bad_inputs", "reference",
                          f"{self.req.target.path}: case '{label}' passes a {e}, which cannot be handed to the "
                          "candidate's process (tensors, numbers, strings, lists, tuples and dicts of them, Triton "
                          "dtypes, nn.Modules and objects of the file's own classes can)",
                          hint="build such an argument inside the function, or pass what it holds instead",
                          file=self.req.target.path) from None
        return save(str(self.xdir / name), data, keep=keep)

    def own_pairs(self, case: int) -> tuple[list, list, list[str], Any]:
        """The case's calls to time in this process, each as a pair of calls on two copies of
        its arguments: (pairs, the calls, why calls were left out, the target or None for unit
        ``tests``). In unit ``tests`` the calls a candidate's timing could not be handed
        (``to_transfer``) are left out, so that a figure made here is over the same calls as
        the candidate's."""
        pairs, calls, left = [], [], []
        if self.unit != "tests":
            call = self.inputs(case, self.seed(case, 0))
            fn = self.function()
            a, b = clone_call(call), clone_call(call)
            return [(lambda: fn(*a.args, **a.kwargs), lambda: fn(*b.args, **b.kwargs))], [call], [], fn
        for c in self.timed_calls.get(case, []):
            try:
                to_transfer([list(c["args"]), dict(c["kwargs"])], self.module.__name__)
            except NotTransferable as e:
                left.append(f"{c['fn']}() takes a {e}, which cannot be handed to the timing process")
                continue
            fn = lookup(self.module, c["fn"])
            if fn is None:
                continue
            a, b = clone_layout((c["args"], c["kwargs"])), clone_layout((c["args"], c["kwargs"]))
            pairs.append((lambda fn=fn, a=a: fn(*a[0], **a[1]), lambda fn=fn, b=b: fn(*b[0], **b[1])))
            calls.append(Call(tuple(c["args"]), dict(c["kwargs"])))
        return pairs, calls, sorted(set(left)), None

    def time_self(self, case: int) -> dict:
        """The original's check (no candidate): the original timed against itself here, in its
        own process, on the inputs its run made, the way the candidate's process times a pair
        (``time_pairs``, the whole budget). Nothing is handed over (TritonBench-G's
        context_attn_llama: 2.7 s writing 550 MB of arguments for the candidate's process on the
        H200), and an autotuner times with the choices it made in the run (masked_select: 18 s
        autotuning both copies again there)."""
        if self.unit == "tests" and not self.timed_calls.get(case):
            return {"none": "the test calls none of the file's own functions above its separator (plain "
                            "functions, names bound to an autograd.Function's apply, nn.Module forwards), so "
                            "there is no call to time"}
        pairs, calls, left, fn = self.own_pairs(case)
        if not pairs:
            return {"timing": None, "not_timed": left}
        try:
            with self.torch.no_grad():
                t = self.time_pairs(pairs, self.opts.rep_ms, self.opts.min_reps)
            t.update(self.work(calls, self.module, fn))
        except BaseException as e:
            raise self.failure(e, "reference", f"timing case {case}") from None
        return {"timing": t, "not_timed": left}

    def time_alone(self, case: int, reuse: bool = False) -> dict:
        """The reference by itself, timed the way the candidate's process times it (half the
        budget): what a candidate cannot slow down or speed up.

        With ``reuse``, a figure measured for the same case and timing options in the last
        ``ALONE_REUSE_S`` is given again (``reused_s``: its age) instead of timing anew: the
        reference alone does not depend on the candidate, and a tuner's configs or a loop's
        candidates ask for it one after another. The figure kept is the fastest of those
        measured in that window, so a reused one is never more lenient than a fresh one would
        likely be; the pool asks again without ``reuse`` when a reused figure disagrees with
        the reference timed beside the candidate."""
        import time
        o = self.opts
        key = (case, self.seed(case, 0), o.warmup_ms, o.rep_ms, o.min_reps, o.max_reps, o.flush_l2,
               o.cuda_graph_below_us, o.unit, tuple(o.cases or ()))
        now = time.monotonic()
        kept = self.alone.get(key)
        if kept is not None and now - kept[0] > ALONE_REUSE_S:
            kept = None
        if reuse and kept is not None:
            return {**kept[1], "reused_s": round(now - kept[0], 3)}
        pairs = self.own_pairs(case)[0]  # the calls the candidate's process times beside it
        if not pairs:
            return {"ref_ms": None}
        try:
            with self.torch.no_grad():
                t = self.time_pairs(pairs, self.opts.rep_ms / 2, max(5, self.opts.min_reps // 2))
        except BaseException as e:
            raise self.failure(e, "reference", f"timing case {case} alone") from None
        got = {"ref_ms": (t["ref_ms"] + t["cand_ms"]) / 2, "spread_pct": max(t["ref_spread_pct"],
                                                                             t["cand_spread_pct"])}
        if _finite(got["ref_ms"]) is not None and (kept is None or got["ref_ms"] < kept[1]["ref_ms"]):
            self.alone[key] = (time.monotonic(), got)
        return got


ALONE_REUSE_S = 60.0
"""How long a figure of the reference timed alone may be given again (``time_alone``)."""


def _finite(x) -> Optional[float]:
    import math
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _mostly(rec: dict, varies: dict) -> str:
    """The first tensor of which more than half the elements vary between runs, described; ''."""
    for key, masks in varies.items():
        for path, t in leaves(rec.get(key)):
            m = masks.get(path)
            if m is not None and t.numel() and int(m.sum()) * 2 > t.numel():
                return f"{key}{path}: {int(m.sum()):,} of {t.numel():,} elements"
    return ""


def _with_reads(detail: str, rec: dict, got: dict) -> str:
    """A mismatch's detail, with the reads outside their tensors that may explain it (CPU
    interpreter): what lies there is no tensor's data, and changes with the process's memory."""
    ref, cand = rec.get("reads_outside") or [], got.get("reads_outside") or []
    if ref:
        return (f"{detail}; the original reads outside its tensors ({'; '.join(map(str, ref[:2]))}): its "
                "results depend on memory that holds no tensor's data, so they have no one right value")
    if cand and isinstance(cand, list):
        return f"{detail}; the candidate reads outside its tensors ({'; '.join(map(str, cand[:2]))})"
    return detail


def _key_label(key: str) -> str:
    """How a record's part is named in a message."""
    return {"return": "test result", "output": "output", "grads": "gradients", "calls": "calls",
            "inputs_after": "inputs after the call"}.get(key, key)


def _sub_masks(masks: dict, prefix: str) -> dict:
    """The masks below one element of a structure, with paths relative to it."""
    return {p[len(prefix):]: m for p, m in masks.items()
            if p == prefix or (p.startswith(prefix) and p[len(prefix)] == "[")}


def _upcast_bf16(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype == torch.bfloat16 else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_upcast_bf16(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _upcast_bf16(v) for k, v in obj.items()}
    return obj


class Memo:
    """The reference's past runs by (case, seed, captured for timing), kept while their tensors
    fit in ``limit`` bytes (the oldest dropped first). Only runs that returned are kept: a
    failure ends the worker."""

    def __init__(self, limit: int):
        import collections
        self.limit = limit
        self.entries: "collections.OrderedDict[tuple, tuple[dict, int, int]]" = collections.OrderedDict()
        self.bytes = self.device_bytes = 0

    def get(self, key: tuple) -> Optional[dict]:
        got = self.entries.get(key)
        if got is None:
            return None
        self.entries.move_to_end(key)
        return got[0]

    def put(self, key: tuple, entry: dict) -> None:
        size, on_device = _nbytes(entry)
        handed = entry.get("handed")
        if handed is not None:  # the inputs handed over (exchange.Kept): host memory, and device memory
            try:
                size += handed.host_bytes + handed.device_bytes
                on_device += handed.device_bytes
            except OSError:
                handed.close()
                entry["handed"] = None
        if size > self.limit:
            _close(entry)
            return
        self.drop(key)
        self.entries[key] = (entry, size, on_device)
        self.bytes += size
        self.device_bytes += on_device
        while self.bytes > self.limit:
            self.drop(next(iter(self.entries)))

    def attach(self, key: tuple, field: str, kept: "Kept") -> bool:
        """Keep what was handed over (``kept``) with the entry of ``key`` as ``field`` (its bytes
        counted, closed when the entry goes). False when there is no such entry or it does not fit."""
        got = self.entries.get(key)
        if got is None or got[0].get(field) is not None:
            return False
        try:
            size = kept.host_bytes + kept.device_bytes
        except OSError:
            return False
        if got[1] + size > self.limit:
            return False
        got[0][field] = kept
        self.entries[key] = (got[0], got[1] + size, got[2] + kept.device_bytes)
        self.device_bytes += kept.device_bytes
        self.bytes += size
        while self.bytes > self.limit and len(self.entries) > 1:
            oldest = next(iter(self.entries))
            self.drop(oldest if oldest != key else list(self.entries)[1])
        return True

    def drop(self, key: tuple) -> None:
        got = self.entries.pop(key, None)
        if got is not None:
            self.bytes -= got[1]
            self.device_bytes -= got[2]
            _close(got[0])


def _close(entry: dict) -> None:
    """Let go of what was kept with a memo entry to be handed again (``exchange.Kept``)."""
    for field in ("handed", "time_handed"):
        kept = entry.get(field)
        entry[field] = None
        if kept is not None:
            kept.close()


def _nbytes(obj: Any) -> tuple[int, int]:
    """Bytes of the distinct storages under ``obj`` (records, masks, calls), and of those on a GPU."""
    import torch
    seen: dict = {}

    def walk(o):
        if isinstance(o, torch.Tensor):
            try:
                st = o.untyped_storage()
                seen[(st.data_ptr(), o.device)] = (st.nbytes(), o.device.type != "cpu")
            except Exception:
                seen[id(o)] = (o.numel() * o.element_size(), o.device.type != "cpu")
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple, set)):
            for v in o:
                walk(v)
        elif isinstance(o, Call):
            walk(o.args)
            walk(o.kwargs)
    walk(obj)
    return sum(n for n, _ in seen.values()), sum(n for n, d in seen.values() if d)
