"""Verdicts on the shapes real kernels take (CPU interpreter, the real runner): autograd
Functions with their backward, outputs written only in part, inputs that are strided views of
one storage, kernels that draw random numbers, tests that call several functions, tests whose
control flow depends on random values, and stores one element past the end."""

from __future__ import annotations

import pytest
from conftest import Project, flag_codes

SCALE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mul_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def _mul(x, factor):
    out = torch.empty_like(x)
    n = x.numel()
    mul_kernel[(triton.cdiv(n, 128),)](x, out, n, factor, BLOCK=128)
    return out


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _mul(x, 2.0)

    @staticmethod
    def backward(ctx, g):
        return _mul(g, {backward_factor})


def scale(x):
    return Scale.apply(x)


def get_inputs():
    return [torch.randn(300, device="cuda", requires_grad=True)]
'''


def test_autograd_function_forward_and_backward_are_both_checked(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", SCALE.format(backward_factor="2.0"))
    r = p.evaluate(runner, "ref.py::scale")
    assert r.status == "ok" and r.correct, r.message
    # The class itself can be the target too (called through apply).
    r = p.evaluate(runner, "ref.py::Scale")
    assert r.status == "ok" and r.correct, r.message
    # Right forward, wrong backward: the gradient gives it away.
    p.write("cand.py", SCALE.format(backward_factor="3.0"))
    r = p.evaluate(runner, "ref.py::scale", "cand.py::scale")
    assert r.status == "mismatch", r.message
    assert r.cases[0].detail.startswith("gradient of 'x'"), r.cases[0].detail


HALF = '''
import torch
import triton
import triton.language as tl


@triton.jit
def head_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def head(x):
    out = torch.empty_like(x)  # only the first {written} elements are ever written
    head_kernel[(triton.cdiv({written}, 64),)](x, out, {written}, BLOCK=64)
    return out


def get_inputs():
    return [torch.randn(1000, device="cuda")]
'''


def test_elements_the_original_never_writes_are_left_out_and_said_so(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", HALF.format(written="500"))
    r = p.evaluate(runner, "ref.py::head")
    assert r.status == "ok" and r.correct, r.message
    assert "500 of 1,000 element(s) left out" in r.cases[0].excluded
    assert "unwritten_output" in flag_codes(r, "info") and "not compared" in r.message
    # A candidate that writes all 1000 elements is right: the rest is no part of the answer.
    p.write("more.py", HALF.format(written="1000").replace("def head(", "def head_(").replace(
        "return out\n", "return out\n\n\ndef head(x):\n    out = head_(x)\n    return out\n"))
    r = p.evaluate(runner, "ref.py::head", "more.py::head")
    assert r.status == "ok", r.message
    # One that leaves part of the written range unwritten is wrong.
    p.write("less.py", HALF.format(written="499"))
    r = p.evaluate(runner, "ref.py::head", "less.py::head")
    assert r.status == "mismatch" and "output[499]" in r.cases[0].detail, r.cases[0].detail


VIEWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, rows, cols, sa, sb, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    a = tl.load(a_ptr + r * sa + c * 2, mask=m)   # column stride 2, as the views have
    b = tl.load(b_ptr + r * sb + c * 2, mask=m)
    tl.store(out_ptr + r * cols + c, a - b, mask=m)


def diff(a, b):
    {check}
    out = torch.empty((a.shape[0], a.shape[1]), device=a.device)
    add_kernel[(a.shape[0],)](a, b, out, a.shape[0], a.shape[1], a.stride(0), b.stride(0), BLOCK=32)
    return out


def get_inputs():
    base = torch.randn(20, 64, device="cuda")
    return [base[3:, 0::2], base[3:, 1::2]]   # an offset, a stride, one storage
'''


def test_inputs_keep_their_strides_offsets_and_shared_storage(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", VIEWS.format(check="pass"))
    r = p.evaluate(runner, "ref.py::diff")
    assert r.status == "ok" and r.correct, r.message
    # The candidate is only right if it gets the same layout the reference got.
    p.write("cand.py", VIEWS.format(check=(
        "assert a.stride() == (64, 2) and b.stride() == (64, 2) and not a.is_contiguous()\n"
        "    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()\n"
        "    assert b.storage_offset() == a.storage_offset() + 1")))
    r = p.evaluate(runner, "ref.py::diff", "cand.py::diff")
    assert r.status == "ok" and r.correct, r.message


DROPOUT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, seed, p, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, p=0.5):
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,)).item())   # drawn inside the wrapper
    out = torch.empty_like(x)
    n = x.numel()
    dropout_kernel[(triton.cdiv(n, {block}),)](x, out, n, seed, p, BLOCK={block})
    return out


def get_inputs():
    return [torch.randn(700, device="cuda")]
'''


def test_kernels_that_draw_random_numbers_get_the_same_random_state(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", DROPOUT.format(block=128))
    r = p.evaluate(runner, "ref.py::dropout")
    assert r.status == "ok" and r.correct, r.message
    p.write("cand.py", DROPOUT.format(block=256))
    r = p.evaluate(runner, "ref.py::dropout", "cand.py::dropout")
    assert r.status == "ok" and r.correct, r.message


def test_store_one_element_past_the_end_is_not_correct(tmp_path, runner):
    from conftest import ADD_RELU, kernel_variant
    p = Project(tmp_path).write("ref.py", ADD_RELU)
    # The outputs are right; the store of element n lands outside the output tensor.
    p.write("cand.py", kernel_variant(store_mask="offs <= n"))
    r = p.evaluate(runner, "ref.py::add_relu", "cand.py::add_relu", trials=1)
    assert r.status == "mismatch" and not r.correct, r.message
    assert "writes outside its tensors" in r.cases[0].detail and "past its end" in r.cases[0].detail


TWO_FUNCTIONS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * x, mask=m)


@triton.jit
def bwd_kernel(x_ptr, g_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    g = tl.load(g_ptr + offs, mask=m)
    tl.store(dx_ptr + offs, {grad}, mask=m)


def square_forward(x):
    y = torch.empty_like(x)
    fwd_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y


def square_backward(x, g):
    dx = torch.empty_like(x)
    bwd_kernel[(triton.cdiv(x.numel(), 128),)](x, g, dx, x.numel(), BLOCK=128)
    return dx


''' + "#" * 146 + '''


def test_square():
    x = torch.randn(500, device="cuda")
    g = torch.randn(500, device="cuda")
    y = square_forward(x)
    dx = square_backward(x, g)
    return {{"y": y}}   # the test returns only the forward's result


result_gold = test_square()
'''


def test_every_call_a_test_makes_is_compared_not_only_one_symbol(tmp_path, runner):
    p = Project(tmp_path)
    p.write("task.py", TWO_FUNCTIONS.format(grad="2.0 * x * g"))
    r = p.evaluate(runner, "task.py::square_forward")
    assert r.status == "ok" and r.correct, r.message
    assert r.inputs_convention == "tests" and [c.label for c in r.cases] == ["test_square"]
    # The backward's kernel is wrong; the test returns only the forward's result, and the
    # forward is the symbol named: the call to square_backward still gives it away.
    p.write("cand.py", TWO_FUNCTIONS.format(grad="3.0 * x * g"))
    r = p.evaluate(runner, "task.py::square_forward", "cand.py::square_forward")
    assert r.status == "mismatch", r.message
    assert "call 2 (square_backward): output" in r.cases[0].detail


def test_a_decorated_function_s_calls_are_compared_too(tmp_path, runner):
    # ``@torch.no_grad()`` makes the function torch's wrapper, whose code lies in torch's files:
    # its calls were not recorded, and a wrong backward the test does not return passed.
    def deco(grad):
        return TWO_FUNCTIONS.format(grad=grad).replace("def square_backward", "@torch.no_grad()\ndef square_backward")
    p = Project(tmp_path)
    p.write("task.py", deco("2.0 * x * g")).write("cand.py", deco("3.0 * x * g"))
    assert p.evaluate(runner, "task.py::square_forward").correct
    r = p.evaluate(runner, "task.py::square_forward", "cand.py::square_forward")
    assert r.status == "mismatch", r.message
    assert "call 2 (square_backward): output" in r.cases[0].detail


def test_a_test_whose_calls_depend_on_its_random_values(tmp_path, runner):
    from conftest import ADD_RELU
    p = Project(tmp_path)
    p.write("ref.py", ADD_RELU.split("INPUT_CASES")[0] + '''

def test_add_relu():
    calls = int(torch.randint(1, 4, (1,)).item())  # 1 to 3 calls, by the seed
    for _ in range(calls):
        add_relu(torch.randn(200, device="cuda"), torch.randn(200, device="cuda"))
''')
    r = p.evaluate(runner, "ref.py::add_relu", trials=3)
    assert r.status == "ok" and r.correct, r.message
    assert r.inputs_convention == "tritonbench"


def test_requests_that_share_one_options_record_are_each_resolved_alone(tmp_path, runner):
    # Bench tasks share one EvalOptions: resolving one request's unit must not change the next's.
    from conftest import ADD_RELU
    from runner.schema import EvalOptions
    from runner.source import build_request
    p = Project(tmp_path)
    p.write("task.py", TWO_FUNCTIONS.format(grad="2.0 * x * g")).write("ref.py", ADD_RELU)
    opts = EvalOptions(trials=1)
    first, _, _ = build_request("task.py::square_forward", None, opts, root=tmp_path, cwd=tmp_path)
    second, _, _ = build_request("ref.py::add_relu", None, opts, root=tmp_path, cwd=tmp_path)
    a, b = runner.evaluate(first), runner.evaluate(second)
    assert a.inputs_convention == "tests" and b.inputs_convention == "cases", (a.message, b.message)
    assert a.correct and b.correct and opts.unit == "auto"


RACY = '''
import time

import torch
import triton
import triton.language as tl


@triton.jit
def twice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {factor}, mask=mask)


def twice(x):
    out = torch.empty_like(x)
    twice_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    out[:{racy}] = float(time.perf_counter_ns() % 1000003)  # a race: what lands here changes each run
    return out


def get_inputs():
    return [torch.randn(1000, device="cuda")]
'''


def test_elements_the_original_gives_other_values_on_each_run_are_left_out_and_said_so(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", RACY.format(factor="2.0", racy="3"))
    r = p.evaluate(runner, "ref.py::twice")
    assert r.status == "ok" and r.correct, r.message
    assert "3 of 1,000 element(s) left out (the original gives them other values on another run)" \
        in r.cases[0].excluded, r.cases[0].excluded
    assert "nondeterministic_original" in flag_codes(r, "warning") and "not compared" in r.message
    # Everything else is still checked.
    p.write("wrong.py", RACY.format(factor="2.001", racy="3"))
    r = p.evaluate(runner, "ref.py::twice", "wrong.py::twice")
    assert r.status == "mismatch" and "output[3]" in r.cases[0].detail, r.cases[0].detail


def test_an_original_that_differs_from_itself_almost_everywhere_cannot_be_checked_against(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", RACY.format(factor="2.0", racy="600"))
    r = p.evaluate(runner, "ref.py::twice")
    # Not a wrong answer of the candidate's: nothing can be checked, and the verdict says whose it is.
    assert r.status == "runtime_error" and not r.correct, r.message
    assert r.error.kind == "original_varies" and r.error.side == "reference", r.error
    assert "cannot be checked" in r.message and "output: 600 of 1,000" in r.message, r.message
    assert "the original's own results differ between runs on the same inputs: output: 600 of 1,000" \
        in r.cases[0].detail, r.cases[0].detail
    p.write("copy_of_ref.py", RACY.format(factor="2.0", racy="600"))
    r = p.evaluate(runner, "ref.py::twice", "copy_of_ref.py::twice")
    assert r.status == "runtime_error" and r.error.kind == "original_varies", (r.status, r.message)


# An autotuned kernel whose configs give different answers, and a process-dependent pruning
# standing in for timing noise: the reference's process keeps the first config, the candidate's
# process (which imports the code more than once: the reference's copy and the candidate's) the
# second.
AUTOTUNED = '''
import builtins

import torch
import triton
import triton.language as tl

builtins._geak_imports = getattr(builtins, "_geak_imports", 0) + 1


def _prune(configs, named_args, **kwargs):
    return [configs[min(builtins._geak_imports - 1, 1)]]


@triton.autotune(configs=[triton.Config({{"SCALE": 1}}), triton.Config({{"SCALE": 2}})], key=["n"],
                 prune_configs_by={{"early_config_prune": _prune}})
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * SCALE{extra}, mask=m)


def scaled(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out


def get_inputs():
    return [torch.randn(300, device="cuda")]
'''


def test_autotuned_kernels_are_checked_with_the_config_the_original_chose(tmp_path, runner):
    p = Project(tmp_path)
    p.write("ref.py", AUTOTUNED.format(extra=""))
    r = p.evaluate(runner, "ref.py::scaled")
    assert r.status == "ok" and r.correct, r.message
    assert "autotune_pinned" in flag_codes(r, "info") and "scale_kernel" in str(r.flags)
    # The original's check times (on a GPU) with that config too: a plain run autotunes once.
    assert "(and timed with it)" in next(f.message for f in r.flags if f.code == "autotune_pinned")
    # Still a real check: a kernel that computes something else under that config is wrong.
    p.write("wrong.py", AUTOTUNED.format(extra=" + 0.5"))
    r = p.evaluate(runner, "ref.py::scaled", "wrong.py::scaled")
    assert r.status == "mismatch", r.message
    # A candidate with other configs autotunes by itself (here: to the other config).
    p.write("other.py", AUTOTUNED.format(extra="").replace('triton.Config({"SCALE": 2})',
                                                           'triton.Config({"SCALE": 2}, num_warps=2)'))
    r = p.evaluate(runner, "ref.py::scaled", "other.py::scaled")
    assert r.status == "mismatch" and "other.py::scale_kernel" not in str(r.flags), r.message


HALF_WRITTEN_NORM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def copy(x):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv({written}, 128),)](x, out, {written}, BLOCK=128)
    return out


''' + "#" * 146 + '''


def test_norm():
    x = torch.randn(256, device="cuda")
    return {{"norm": copy(x).norm().item()}}   # a plain float, as TritonBench tests return
'''


def test_a_number_the_original_gives_other_values_on_each_run_is_said_so_not_a_bare_mismatch(tmp_path, runner):
    # The original leaves half of its output unwritten and the test returns a float computed
    # from all of it: the float depends on memory nobody wrote. A float cannot be left out in part.
    p = Project(tmp_path)
    p.write("task.py", HALF_WRITTEN_NORM.format(written="x.numel() // 2"))
    p.write("cand.py", HALF_WRITTEN_NORM.format(written="x.numel()"))
    r = p.evaluate(runner, "task.py::copy", "cand.py::copy", trials=1)
    assert r.status == "runtime_error" and not r.correct and r.error.kind == "original_varies", r.message
    assert "the original's own results differ between runs on the same inputs: test result['norm']: nan, then" \
        in r.cases[0].detail, r.cases[0].detail


GRAD_WITH_INPUT_STRIDES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mul_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask) * 2.0, mask=mask)


def _mul(x, stride):
    out = torch.empty(x.shape, device=x.device)
    mul_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), stride, BLOCK=128)
    return out


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.stride = x.stride(0)
        return _mul(x, x.stride(0))

    @staticmethod
    def backward(ctx, g):
        # The gradient read with the input's strides: the gradient of .sum() is one element
        # expanded (stride 0), so this reads far past its end.
        return _mul(g, ctx.stride)


def double(x):
    return Double.apply(x)


''' + "#" * 146 + '''


def test_double():
    x = torch.randn(300, device="cuda", requires_grad=True)
    double(x).sum().backward()
    return {"grad": x.grad}
'''


def test_an_original_that_reads_outside_its_tensors_is_said_so(tmp_path, runner):
    # TritonBench's chunk_linear_attn and parallel_attention read the gradient of .sum() (one
    # element, expanded) with another tensor's strides; chunk_gated_attention reads k past its
    # end. What they compute from there changes with the memory around the tensors.
    p = Project(tmp_path)
    p.write("task.py", GRAD_WITH_INPUT_STRIDES)
    r = p.evaluate(runner, "task.py::double", trials=1)
    notes = [f.message for f in r.flags if f.code == "reference_note"]
    assert any("the original reads outside its tensors (mul_kernel reads 299 element(s) outside the tensors "
               "it is given, up to 1,196 bytes past the end of one)" in n for n in notes), (r.message, notes)
    # Its byte-identical copy is never called wrong: where the two processes' memory around the
    # tensors differs, the verdict is that nothing can be checked there.
    p.write("copy_of_task.py", GRAD_WITH_INPUT_STRIDES)
    for _ in range(3):
        c = p.evaluate(runner, "task.py::double", "copy_of_task.py::double", trials=1)
        assert c.correct or (c.status == "runtime_error" and c.error.kind == "original_varies"
                             and c.error.side == "reference"), (c.status, c.message)
    # A wrong candidate is never verified against it: here the whole gradient is computed from
    # memory outside the tensors (it changes with the bytes the reruns put in the guard bands),
    # so nothing can be checked, and the verdict says so.
    p.write("triple.py", GRAD_WITH_INPUT_STRIDES.replace("* 2.0", "* 3.0"))
    c = p.evaluate(runner, "task.py::double", "triple.py::double", trials=1)
    assert not c.correct and c.status == "runtime_error" and c.error.kind == "original_varies", (c.status, c.message)
    # A kernel that reads only its own elements is not flagged.
    p.write("task.py", GRAD_WITH_INPUT_STRIDES.replace("return _mul(g, ctx.stride)",
                                                       "return _mul(g.contiguous(), 1)"))
    r = p.evaluate(runner, "task.py::double", trials=1)
    assert r.correct and not [f for f in r.flags if f.code == "reference_note"], (r.message, r.flags)


def test_a_candidate_that_differs_after_timing_is_rejected(tmp_path):
    # On a GPU a candidate's last run after timing is compared again (the original's check has
    # no such run: the original against itself on one draw, its other draws made when a
    # candidate is judged on them).
    from runner.schema import EvalOptions
    from runner.source import build_request
    from runner.judge.verdict import Verdict
    p = Project(tmp_path)
    p.write("ref.py", SCALE.format(backward_factor="2.0")).write("cand.py", SCALE.format(backward_factor="2.0"))
    req, _, _ = build_request("ref.py::scale", "cand.py::scale", EvalOptions(trials=1), root=tmp_path, cwd=tmp_path)
    v = Verdict(req, None)
    v.loaded_reference({"cases": [{"index": 0, "label": "case 0"}], "convention": "cases"})
    v.judged(0, 0, {"passed": True}, 0)
    v.changed_when_timed(0, "output[3]: 1.5, expected 2")
    r = v.finish()
    assert r.status == "rejected" and "changes_when_timed" in flag_codes(r, "reject"), r.message
    assert "after timing, the candidate's output on case 'case 0' is wrong" in r.message


PEEK = '''
import torch
import triton
import triton.language as tl


@triton.jit
def peek_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs + 1, mask={read_mask}, other=1.0)
    tl.store(out_ptr + offs, {value}, mask=m)


def peek(x):
    out = torch.empty_like(x)
    n = x.numel()
    peek_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    return out


INPUT_CASES = [dict(n=100)]


def get_inputs(n=100):
    return [torch.rand(n, device="cuda") + 1.0]
'''


def test_what_the_original_computes_from_outside_its_tensors_is_left_out(tmp_path, runner):
    # The original's last element is 1 / (the element after x's end): a value of the memory
    # around x, not of x (TritonBench's chunk_delta_fwd and chunk_gated_attention read rows past
    # their tensors). Its rerun on a mismatch puts another byte around the tensors: what changes
    # with it has no one right value and is left out; everything else is still checked.
    p = Project(tmp_path)
    p.write("ref.py", PEEK.format(read_mask="m", value="1.0 / v"))
    assert p.evaluate(runner, "ref.py::peek", trials=1).correct
    p.write("good.py", PEEK.format(read_mask="offs + 1 < n", value="1.0 / v"))
    r = p.evaluate(runner, "ref.py::peek", "good.py::peek", trials=1)
    assert r.status == "ok" and r.correct, r.message
    assert "nondeterministic_original" in flag_codes(r, "warning"), r.flags
    p.write("bad.py", PEEK.format(read_mask="offs + 1 < n", value="1.0 / v + (offs == 0).to(tl.float32)"))
    r = p.evaluate(runner, "ref.py::peek", "bad.py::peek", trials=1)
    assert r.status == "mismatch" and not r.correct and "output[0]" in r.message, r.message


LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def fill_kernel(x_ptr, c_ptr, out_ptr, n, LAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(c_ptr + offs, tl.load(c_ptr + offs, mask=offs < 4) * 2.0, mask=offs <= LAST)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


def fill(x):
    c = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)  # made from data, not by a factory
    out = torch.empty_like(x)
    fill_kernel[(1,)](x, c, out, x.numel(), LAST={last}, BLOCK=64)
    return out + c.sum()


INPUT_CASES = [dict(n=40)]


def get_inputs(n=40):
    return [torch.randn(n, device="cuda")]
'''


def test_a_store_past_a_tensor_made_from_data_is_caught(tmp_path, runner):
    # torch.tensor([...]) makes its tensor from data (no factory op): it sits between guard
    # bands like any other allocation, so a store one past its end is seen.
    p = Project(tmp_path).write("ref.py", LITERAL.format(last=3)).write("oob.py", LITERAL.format(last=4))
    assert p.evaluate(runner, "ref.py::fill", trials=1).correct
    r = p.evaluate(runner, "ref.py::fill", "oob.py::fill", trials=1)
    assert r.status == "mismatch" and "writes outside its tensors" in r.cases[0].detail, r.message


def test_a_share_of_peak_over_100_percent_is_unknown_and_said_so(tmp_path):
    # TritonBench-G's destindex_copy: a copy of one head of the twelve its tensors hold, whose
    # tensors' sizes at its time came to 209% of an H200's bandwidth. No share is shown or used
    # (the tuner stops near the roofline) where the count is known to be too large.
    from agent.roofline import pct_text, roofline
    from runner.schema import DeviceInfo, EvalOptions
    from runner.source import build_request
    from runner.judge.verdict import Verdict
    p = Project(tmp_path)
    p.write("ref.py", SCALE.format(backward_factor="2.0")).write("cand.py", SCALE.format(backward_factor="2.0"))
    req, _, _ = build_request("ref.py::scale", "cand.py::scale", EvalOptions(trials=1), root=tmp_path, cwd=tmp_path)
    h200 = DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90", peak_bandwidth_gbs=4800.0,
                      peak_tflops={"float16": 989.0})

    def timed(**work):
        v = Verdict(req, h200)
        v.loaded_reference({"cases": [{"index": 0, "label": "case 0"}], "convention": "cases"})
        v.judged(0, 0, {"passed": True}, 0)
        v.timed(0, {"ref_ms": 0.0209, "cand_ms": 0.0209, "reps": 100, "method": "events", **work}, None, 5.0)
        return v.finish()

    # 210 MB in 20.9 µs: 209% of 4.8 TB/s.
    r = timed(bytes_moved=210_000_000, bytes_basis="tensors")
    (c,) = r.cases
    assert r.correct and c.timing is not None and c.timing.cand_bw_pct_peak is None
    assert roofline(r) is None and pct_text(roofline(r)) == "unknown"
    (f,) = [f for f in r.flags if f.code == "exceeds_peak"]
    assert "209% of the GPU's peak bandwidth" in f.message and "touches part of its tensors" in f.message, f.message
    # A file's get_bytes that counts too much is named as the count at fault.
    r = timed(bytes_moved=210_000_000, bytes_basis="get_bytes")
    (f,) = [f for f in r.flags if f.code == "exceeds_peak"]
    assert "the file's get_bytes" in f.message and r.cases[0].timing.cand_bw_pct_peak is None
    # So is a get_flops beyond the GPU's peak FLOP/s; the measured TFLOP/s stay.
    r = timed(bytes_moved=1_000_000, bytes_basis="tensors", flops=1e11, dtype="float16")
    t = r.cases[0].timing
    assert t.cand_flops_pct_peak is None and t.cand_tflops == pytest.approx(1e11 / 0.0209e-3 / 1e12)
    assert any("get_flops" in f.message for f in r.flags if f.code == "exceeds_peak")
    assert t.cand_bw_pct_peak == pytest.approx(100 * 1e6 / 0.0209e-3 / 4.8e12)
    # Within the peak, nothing changes.
    r = timed(bytes_moved=50_000_000, bytes_basis="tensors")
    assert r.cases[0].timing.cand_bw_pct_peak == pytest.approx(49.8, abs=0.1)
    assert not [f for f in r.flags if f.code == "exceeds_peak"] and roofline(r).pct == pytest.approx(49.8, abs=0.1)


def test_a_reference_slowed_beside_the_candidate_is_not_trusted_and_a_kept_figure_is_no_more_lenient(tmp_path):
    # The reference timed alone (in its own process) against the reference timed beside the
    # candidate (in the candidate's): more than 1.25x slower there, plus both spreads, and no
    # speedup is claimed. The pool asks the reference's worker for a figure it measured for an
    # earlier candidate first, and times it anew only when that one disagrees.
    from runner.judge.verdict import Verdict, reference_slowed
    from runner.schema import EvalOptions
    from runner.source import build_request
    p = Project(tmp_path)
    p.write("ref.py", SCALE.format(backward_factor="2.0")).write("cand.py", SCALE.format(backward_factor="2.0"))
    req, _, _ = build_request("ref.py::scale", "cand.py::scale", EvalOptions(trials=1), root=tmp_path, cwd=tmp_path)
    beside = {"ref_ms": 0.40, "cand_ms": 0.20, "reps": 100, "method": "events", "ref_spread_pct": 2.0}
    assert reference_slowed(beside, {"ref_ms": 0.39, "spread_pct": 1.0}) is None
    assert reference_slowed(beside, {"ref_ms": 0.33, "spread_pct": 1.0}) is None  # 1.21x: within 1.25x + 3%
    why = reference_slowed(beside, {"ref_ms": 0.30, "spread_pct": 1.0})
    assert why and "1.33x slower beside the candidate" in why
    assert reference_slowed(beside, None) is None and reference_slowed(beside, {"ref_ms": None}) is None
    # Microseconds of difference are noise, whatever the ratio.
    assert reference_slowed({"ref_ms": 0.006, "cand_ms": 0.003}, {"ref_ms": 0.003}) is None

    def verdict(alone):
        v = Verdict(req, None)
        v.loaded_reference({"cases": [{"index": 0, "label": "case 0"}], "convention": "cases"})
        v.judged(0, 0, {"passed": True}, 0)
        v.timed(0, beside, alone, 5.0)
        return v.finish()

    r = verdict({"ref_ms": 0.39, "spread_pct": 1.0, "reused_s": 4.2})
    assert r.correct and r.cases[0].timing is not None and r.cases[0].timing.speedup == pytest.approx(2.0)
    r = verdict({"ref_ms": 0.30, "spread_pct": 1.0})
    assert r.cases[0].timing is None and any(f.code == "timing_untrusted" for f in r.flags), r.flags



def test_a_case_of_several_calls_is_held_to_the_device_time_of_each_call_s_reps(tmp_path):
    # The pool's clock bounds what a timing reports: the reps cannot take longer than the op.
    # A case's figures are sums over its calls and so is its reps count; each call's own reps
    # by its own times is what ran (TritonBench-G's triton_argmax: a 3 µs call timed 392 times
    # in CUDA graphs and a 0.7 ms call 20 times were called untrusted on an H100 by all reps by
    # the summed times).
    from runner.judge.verdict import Verdict, reported_busy_s
    from runner.schema import EvalOptions
    from runner.source import build_request
    p = Project(tmp_path)
    p.write("ref.py", SCALE.format(backward_factor="2.0")).write("cand.py", SCALE.format(backward_factor="2.0"))
    req, _, _ = build_request("ref.py::scale", "cand.py::scale", EvalOptions(trials=1), root=tmp_path, cwd=tmp_path)
    calls = [[400, 0.003, 0.003], [20, 0.70, 0.70]]  # 2.4 ms + 28 ms of device time
    t = {"ref_ms": 0.703, "cand_ms": 0.703, "reps": 420, "method": "cuda_graph+events", "per_call": calls}
    assert reported_busy_s(t, 420, 0.703, 0.703) == pytest.approx(0.0304)
    # per_call that does not add up to the case's figures is not used: the stricter bound.
    assert reported_busy_s({**t, "per_call": [[400, 0.003, 0.003], [19, 0.70, 0.70]]}, 420, 0.703, 0.703) \
        == pytest.approx(420 * 1.406 / 1000)
    assert reported_busy_s({**t, "per_call": [[400, 0.001, 0.003], [20, 0.70, 0.70]]}, 420, 0.703, 0.703) \
        == pytest.approx(420 * 1.406 / 1000)
    assert reported_busy_s({**t, "per_call": "x"}, 420, 0.703, 0.703) == pytest.approx(420 * 1.406 / 1000)

    def verdict(timing, wall):
        v = Verdict(req, None)
        v.loaded_reference({"cases": [{"index": 0, "label": "case 0"}], "convention": "cases"})
        v.judged(0, 0, {"passed": True}, 0)
        v.timed(0, timing, None, wall)
        return v.finish()

    r = verdict(t, 0.4)  # 0.59 s by the summed bound, 0.03 s by the calls' own reps
    assert r.cases[0].timing is not None and r.cases[0].timing.speedup == pytest.approx(1.0), r.flags
    r = verdict({k: v for k, v in t.items() if k != "per_call"}, 0.4)
    assert r.cases[0].timing is None and any(f.code == "timing_untrusted" for f in r.flags)
    r = verdict(t, 0.01)  # the calls' own reps took longer than the op: not trusted
    assert r.cases[0].timing is None and any("add up to more than the 0.010 s" in f.message for f in r.flags)

CLASS_LAUNCHES = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * s, mask=m)


def _launch(x, s):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), s, BLOCK=128)
    return y


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _launch(x, {fn_scale})

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


scale = _Scale.apply


class Scaler(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, device="cuda"))
        self.eps = 1e-6

    def forward(self, x):
        return _launch(x, {module_scale}) * self.weight


''' + "#" * 146 + '''


def test_class_launches():
    x = torch.randn(300, device="cuda")
    a = scale(x)
    b = Scaler(300)(x)
    return {{"finite": bool(torch.isfinite(a).all() and torch.isfinite(b).all())}}   # not the outputs


result_gold = test_class_launches()
'''


@pytest.mark.parametrize("wrong", ["fn_scale", "module_scale"])
def test_launches_from_an_autograd_function_alias_or_a_module_s_forward_are_compared(tmp_path, runner, wrong):
    # TritonBench-G's triton_attention (``attention = _attention.apply``) and rmsnorm_fused (an
    # nn.Module) launch from neither a plain function nor the test: their calls were not recorded,
    # so a wrong kernel whose test returns no output passed, and nothing could be timed.
    right = {"fn_scale": "2.0", "module_scale": "3.0"}
    p = Project(tmp_path)
    p.write("task.py", CLASS_LAUNCHES.format(**right))
    r = p.evaluate(runner, "task.py::scale")
    assert r.correct, r.message
    p.write("cand.py", CLASS_LAUNCHES.format(**{**right, wrong: "2.5"}))
    r = p.evaluate(runner, "task.py::scale", "cand.py::scale")
    assert r.status == "mismatch", r.message
    call = "call 1 (scale)" if wrong == "fn_scale" else "call 2 (Scaler.forward)"
    assert f"{call}: output" in r.cases[0].detail, r.cases[0].detail


def test_a_module_crosses_to_the_timing_process_with_its_weights_and_attributes(tmp_path):
    # The timed call of a forward passes the module itself; one of torch.nn (fast_layernorm's
    # nn.LayerNorm) or of the file's own class is built again there from plain data.
    import sys
    import types

    import torch
    from runner.worker.exchange import NotTransferable, from_transfer, load, save, to_transfer
    home = types.ModuleType("task_home")

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.LayerNorm(8)
            self.weight = torch.nn.Parameter(torch.randn(8))
            self.register_buffer("scale", torch.full((8,), 3.0))
            self.register_buffer("cache", torch.zeros(2), persistent=False)
            self.bias = None
            self.eps, self.name = 1e-5, "n"

        def forward(self, x):
            return self.inner(x) * self.weight * self.scale + self.eps

    Norm.__module__, Norm.__qualname__ = "task_home", "Norm"
    home.Norm = Norm
    sys.modules["task_home"] = home
    try:
        m = Norm().eval()
        with torch.no_grad():
            m.inner.weight.mul_(2.0)
        f = tmp_path / "t.pt"
        save(str(f), to_transfer([m, torch.ones(2, 8)], "task_home"))
        from runner.worker import channel
        channel.loop_back()  # as the pool hands it to the other side
        m2, x = from_transfer(load(str(f)), home)
        assert type(m2) is Norm and isinstance(m2.inner, torch.nn.LayerNorm) and not m2.training
        assert m2.eps == 1e-5 and m2.name == "n" and m2.bias is None
        assert isinstance(m2.weight, torch.nn.Parameter) and m2.weight.requires_grad
        assert "cache" not in m2.state_dict() and "scale" in m2.state_dict()
        assert torch.equal(m2(x), m(x))
        # A module of another package, or one holding what cannot cross, is named, not guessed.

        class Other(torch.nn.Module):
            pass
        with pytest.raises(NotTransferable, match="Other"):
            to_transfer(Other(), "task_home")
        m.hook = object()
        with pytest.raises(NotTransferable, match="holds a builtins.object"):
            to_transfer(m, "task_home")
    finally:
        del sys.modules["task_home"]


SLOW_TEST = '''
import time
import torch
import triton
import triton.language as tl


{decorator}
@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=m), mask=m)


def double(x):
    y = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(){block})
    return y


''' + "#" * 146 + '''


def test_double():
    time.sleep({sleep})  # what a test's own setup costs (TritonBench-G files build 100 MB inputs)
    x = torch.randn(300, device="cuda")
    return {{"y": double(x)}}
'''


def test_a_test_s_first_run_is_not_made_to_wait_for_the_reference_s(tmp_path, runner):
    # A test makes its own inputs, so the candidate's first run goes at the same time as the
    # reference's: the original's check (one trial: the original against itself) costs one run
    # of the test, not two in a row.
    sleep = 1.0
    p = Project(tmp_path)
    p.write("task.py", SLOW_TEST.format(decorator="", block=", BLOCK=128", sleep=sleep))
    r = p.evaluate(runner, "task.py::double")
    assert r.status == "ok" and r.correct, r.message
    assert sleep <= r.phases["run"] < 2 * sleep - 0.1, r.phases
    # An original with an autotuner: the candidate starts from the reference's choices, so it
    # waits for them (two runs in a row).
    auto = "@triton.autotune(configs=[triton.Config({'BLOCK': 128})], key=['n'])"
    p.write("auto.py", SLOW_TEST.format(decorator=auto, block="", sleep=sleep))
    r = p.evaluate(runner, "auto.py::double")
    assert r.status == "ok" and r.correct, r.message
    assert r.phases["run"] >= 2 * sleep, r.phases
    # A candidate: its first trial with the reference's, the later ones in the pipeline.
    p.write("cand.py", SLOW_TEST.format(decorator="", block=", BLOCK=64", sleep=sleep).replace(
        "triton.cdiv(x.numel(), 128)", "triton.cdiv(x.numel(), 64)"))
    r = p.evaluate(runner, "task.py::double", "cand.py::double", trials=2)
    assert r.status == "ok" and r.correct and all(c.trials == 2 for c in r.cases), r.message


def test_a_reference_that_dies_does_not_wait_for_a_candidate_run_beside_it(tmp_path, runner):
    # The candidate's first run goes beside the reference's: when the reference's process dies
    # the evaluation ends then, with the candidate's run stopped, not waited for.
    import time
    p = Project(tmp_path)
    p.write("task.py", SLOW_TEST.format(decorator="", block=", BLOCK=128", sleep=0).replace(
        "time.sleep(0)", "import os; os._exit(3)"))
    p.write("cand.py", SLOW_TEST.format(decorator="", block=", BLOCK=128", sleep=60))
    t0 = time.monotonic()
    r = p.evaluate(runner, "task.py::double", "cand.py::double")
    assert time.monotonic() - t0 < 30, r.phases
    assert r.status == "crashed" and r.error.side == "reference", r.message
