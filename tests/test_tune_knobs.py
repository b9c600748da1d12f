"""The tuner beyond literal launch constants: computed block sizes, launches reached through an
autograd.Function or a class, and program rewrites (eviction hints, dot precision, num_ctas)."""

import ast
import textwrap

from conftest import Project
from test_tune import CostModelRunner
from agent.tune.knobs import find_launch_sites, render_config
from agent.tune.rewrites import kernel_rewrites
from agent.tune.tuner import _Tuning, search_space, tune

ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # One program per row and no loop: the block must cover the row.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x / (tl.max(tl.abs(x), axis=0) + 1.0), mask=cols < n_cols)


def row_scale(x):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(n_cols)
    row_scale_kernel[(n_rows,)](x, out, n_cols, BLOCK=BLOCK, num_warps=4)
    return out


INPUT_CASES = [{"n_cols": 100}, {"n_cols": 300}]


def get_inputs(n_cols=100):
    return [torch.randn(3, n_cols, device="cuda")]
'''

DOUBLED = "BLOCK = triton.next_power_of_2(n_cols) * 2"


def test_a_computed_block_is_scaled_per_shape_verified_and_confirmed(tmp_path, runner):
    (site,) = find_launch_sites(ROWS, "row_scale")
    (block,) = site.exprs
    assert (block.name, block.var, block.text) == ("BLOCK", "BLOCK", "triton.next_power_of_2(n_cols)")
    p = Project(tmp_path).write("rows.py", ROWS)

    def cost(case, text):  # a GPU that likes the doubled block (the CPU cannot time)
        return 0.8 if text is not None and DOUBLED in text else 1.0

    cm = CostModelRunner(runner, cost)
    report = tune(cm, p.request("rows.py::row_scale"), "sm_90", max_configs=4, trials_per_case=1, timed=True)
    by_block = {}
    for t in report.trials:
        by_block.setdefault(t.config["BLOCK"], set()).add(t.correct)
    # Halving the computed block drops half of every row: rejected on every shape.
    assert by_block.get("max(16, triton.next_power_of_2(n_cols) // 2)") == {False}
    assert by_block.get("triton.next_power_of_2(n_cols) * 2") == {True}
    assert report.improved and report.best["BLOCK"] == "triton.next_power_of_2(n_cols) * 2"
    # The edit rewrites the binding, so the block still follows the shape (256 and 1024 here),
    # and the fresh evaluation of the edited file passed every case.
    assert f"    {DOUBLED}\n" in report.source
    assert report.confirmation.correct and len(report.confirmation.cases) == 2
    assert all(c.passed for c in report.confirmation.cases)

    # --emit autotune cannot hold an expression: the same edit, said so.
    report = tune(CostModelRunner(runner, cost), p.request("rows.py::row_scale"), "sm_90", max_configs=4,
                  trials_per_case=1, timed=True, emit="autotune")
    assert report.improved and DOUBLED in report.source and "@triton.autotune" not in report.source
    assert any("autotune configs cannot hold" in n for n in report.notes)


def test_caps_inside_min_are_moved_and_names_bound_in_branches_scale_at_the_launch():
    text = ROWS.replace("BLOCK = triton.next_power_of_2(n_cols)", "BLOCK = min(1024, triton.next_power_of_2(n_cols))")
    (block,) = find_launch_sites(text, "row_scale")[0].exprs
    assert "min(2048, triton.next_power_of_2(n_cols))" in block.values
    assert "min(512, triton.next_power_of_2(n_cols))" in block.values
    branches = ROWS.replace("    BLOCK = triton.next_power_of_2(n_cols)\n",
                            "    if n_cols > 64:\n        BLOCK = 512\n    else:\n        BLOCK = 64\n")
    (site,) = find_launch_sites(branches, "row_scale")
    (block,) = site.exprs
    assert block.var is None and block.text == "BLOCK"  # the launch's keyword is what changes
    new = render_config(branches, site, {"BLOCK": "BLOCK * 2"})
    assert "BLOCK=BLOCK * 2, num_warps=4)" in new and "BLOCK = 512\n" in new
    # Flags and problem sizes computed at the launch are not knobs.
    flags = ROWS.replace("BLOCK=BLOCK, num_warps=4)", "BLOCK=BLOCK, num_warps=4, HAS_BIAS=x is None)")
    flags = flags.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr):")
    assert [e.name for e in find_launch_sites(flags, "row_scale")[0].exprs] == ["BLOCK"]


AUTOGRAD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy_fwd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _axpy_bwd(g_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dx_ptr + offs, 2.0 * tl.load(g_ptr + offs, mask=offs < n), mask=offs < n)


class Axpy(torch.autograd.Function):
    @staticmethod
    def backward(ctx, g):  # written first: the inputs never reach it
        dx = torch.empty_like(g)
        _axpy_bwd[(triton.cdiv(g.numel(), 256),)](g, dx, g.numel(), BLOCK=256)
        return dx, g

    @staticmethod
    def forward(ctx, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = min(512, triton.next_power_of_2(n))
        _axpy_fwd[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
        return out


def axpy(x, y):
    return Axpy.apply(x, y)


class AxpyModule(torch.nn.Module):
    def forward(self, x, y):
        return axpy(x, y)


def get_inputs():
    return [torch.randn(700, device="cuda"), torch.randn(700, device="cuda")]
'''


def test_launches_inside_an_autograd_function_are_found_and_the_one_that_runs_is_tuned(tmp_path, runner):
    sites = find_launch_sites(AUTOGRAD, "axpy")
    assert [(s.kernel, s.scope) for s in sites] == [("_axpy_bwd", "Axpy.backward"), ("_axpy_fwd", "Axpy.forward")]
    # Through a module's forward and a helper: two levels.
    assert [s.kernel for s in find_launch_sites(AUTOGRAD, "AxpyModule")] == ["_axpy_bwd", "_axpy_fwd"]
    p = Project(tmp_path).write("axpy.py", AUTOGRAD)
    report = tune(runner, p.request("axpy.py::axpy"), "sm_90", max_configs=3, trials_per_case=1)
    # The backward is never run by the inputs, so a config of it would be "verified" by not
    # running: the tuner asks which kernels the original launches and takes the forward.
    assert report.kernel == "_axpy_fwd" and any("Axpy.forward" in n for n in report.notes)
    assert report.original["BLOCK"] == "min(512, triton.next_power_of_2(n))"
    assert report.tried == 3 and all(t.correct for t in report.trials)  # the grid reads BLOCK: it follows


def test_eviction_hints_are_rendered_where_loads_are_reused_or_streamed_and_verified(tmp_path, runner):
    src = textwrap.dedent('''
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def center_kernel(x_ptr, b_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            mean = tl.sum(tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0), axis=0) / n_cols
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            b = tl.load(b_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
            tl.store(out_ptr + row * n_cols + cols, x - mean + b, mask=cols < n_cols)

        def center(x, b):
            out = torch.empty_like(x)
            center_kernel[(x.shape[0],)](x, b, out, x.shape[1], BLOCK=128)
            return out

        def get_inputs():
            return [torch.randn(4, 100, device="cuda"), torch.randn(100, device="cuda")]
    ''')
    kdef = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "center_kernel")
    (rw,) = kernel_rewrites(src, kdef, "cuda", "sm_90")
    # x is loaded twice (reused); b already says what it wants and is left alone.
    assert rw.name == "eviction_policy" and rw.values == ["as written", "reused: evict_last"]
    (site,) = find_launch_sites(src, "center")
    site.rewrites = [rw]
    new = render_config(src, site, {"eviction_policy": "reused: evict_last"})
    assert src.count("evict_last") == 1 and new.count('other=0.0, eviction_policy="evict_last")') == 3
    assert "evict_first" not in new
    assert render_config(src, site, {"eviction_policy": "as written"}) == src
    p = Project(tmp_path).write("c.py", src).write("hinted.py", new)
    r = p.evaluate(runner, "c.py::center", "hinted.py::center", trials=1)
    assert r.status == "ok" and r.correct, r.message
    # The tuner searches it as one more axis.
    req = p.request("c.py::center")
    t = _Tuning(runner, req, "sm_90", 1)
    assert t.find_launch(None) and t.build_space()
    assert {c["eviction_policy"] for c in t.space} == {"as written", "reused: evict_last"}



WRAPPED = """
import torch
import triton
import triton.language as tl


@triton.jit
def gather_kernel(out_ptr, src_ptr, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.load(idx_ptr + offs, mask=(offs < n))
    x = tl.load(
        src_ptr + rows,
        mask=((offs < n)),  # a comment, then the call's own parenthesis
    )
    tl.store(out_ptr + offs, x, mask=offs < n)


def gather(src, idx):
    out = torch.empty(idx.shape, dtype=src.dtype, device=src.device)
    gather_kernel[(triton.cdiv(idx.numel(), 64),)](out, src, idx, (idx.numel()), BLOCK=(64))
    return out


def get_inputs():
    return [torch.randn(300, device="cuda"), torch.randint(0, 300, (200,), device="cuda")]
"""


def test_a_hint_or_launch_option_after_a_parenthesized_argument_goes_after_its_parentheses(tmp_path, runner):
    # TritonBench-G's index_select_cat loads with ``mask=(indices < num_indices)``: the node ends
    # before its ")", and the eviction hint was written inside, a syntax error on every config
    # that carried it. Launch options and a keyword's span end the same way.
    kdef = next(n for n in ast.parse(WRAPPED).body if isinstance(n, ast.FunctionDef))
    (site,) = find_launch_sites(WRAPPED, "gather")
    site.rewrites = kernel_rewrites(WRAPPED, kdef, "cuda", "sm_90")
    assert [rw.values for rw in site.rewrites] == [["as written", "streamed: evict_first"]]
    new = render_config(WRAPPED, site, {"eviction_policy": "streamed: evict_first", "num_warps": 2,
                                        "num_stages": 3, "BLOCK": 128})
    tree = ast.parse(new)  # raised SyntaxError before
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "tl.load"]
    assert [kw.value.value for n in loads for kw in n.keywords if kw.arg == "eviction_policy"] == \
        ["evict_first", "evict_first"]
    (launch,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    assert {kw.arg: ast.unparse(kw.value) for kw in launch.keywords} == \
        {"BLOCK": "128", "num_warps": "2", "num_stages": "3"}
    p = Project(tmp_path).write("g.py", WRAPPED).write("tuned.py", new)
    r = p.evaluate(runner, "g.py::gather", "tuned.py::gather", trials=1)
    assert r.status == "ok" and r.correct, r.message


DOT = '''
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b, input_precision="ieee"))


def matmul(a, b, c):
    mm[(1,)](a, b, c, BLOCK=32)
'''


def test_dot_precision_and_num_ctas_only_where_the_backend_allows():
    from runner.schema import EvalRequest, Target
    kdef = next(n for n in ast.parse(DOT).body if isinstance(n, ast.FunctionDef))
    rws = {rw.name: rw for rw in kernel_rewrites(DOT, kdef, "cuda", "sm_90")}
    assert rws["input_precision"].values == ["as written", "tf32x3", "tf32"]
    assert [rw.name for rw in kernel_rewrites(DOT, kdef, "rocm", "gfx942") if rw.name == "input_precision"] == \
        ["input_precision"]
    assert not [rw for rw in kernel_rewrites(DOT, kdef, "rocm", "gfx90a") if rw.name == "input_precision"]
    plain = DOT.replace(', input_precision="ieee"', "")
    kdef = next(n for n in ast.parse(plain).body if isinstance(n, ast.FunctionDef))
    assert not [rw for rw in kernel_rewrites(plain, kdef, "cuda", "sm_90") if rw.name == "input_precision"]

    req = EvalRequest(target=Target("mm.py", "matmul"), files={"mm.py": DOT})
    axes = {}
    for arch in ("sm_90", "sm_80", "gfx942"):
        t = _Tuning(None, req, arch, 1)  # static steps only: nothing runs
        assert t.find_launch(None) and t.build_space()
        axes[arch] = {n for c in t.space for n in c}
        if arch == "sm_90":
            new = render_config(DOT, t.site, {"input_precision": "tf32", "num_ctas": 2})
            assert 'tl.dot(a, b, input_precision="tf32")' in new and "BLOCK=32, num_ctas=2)" in new
            assert render_config(DOT, t.site, {"num_ctas": 1}) == DOT
    assert "num_ctas" in axes["sm_90"] and "num_ctas" not in axes["sm_80"] and "num_ctas" not in axes["gfx942"]
    assert "input_precision" in axes["sm_90"] and "input_precision" in axes["gfx942"]
    assert all("num_ctas" not in c or c["num_ctas"] in (1, 2) for c in search_space(t.site))


def test_what_the_compile_screen_and_an_autotune_config_can_hold():
    from agent.tune.tuner import screen_part
    original = {"BLOCK": "triton.next_power_of_2(n)", "eviction_policy": "as written", "num_warps": 4}
    same = {"BLOCK": "triton.next_power_of_2(n)", "eviction_policy": "as written", "num_warps": 8}
    assert screen_part(same, original) == {"num_warps": 8}
    hinted = {**same, "eviction_policy": "reused: evict_last"}
    assert screen_part(hinted, original) is None  # an autotune config cannot hold a hint
    assert screen_part(hinted, original, hints=("eviction_policy",)) == {"num_warps": 8}  # the screen can
    scaled_block = {**same, "BLOCK": "triton.next_power_of_2(n) * 2"}
    assert screen_part(scaled_block, original, hints=("eviction_policy",)) is None


SOFTMAX_ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)


def softmax(x):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return out


INPUT_CASES = [dict(m=37, n=100), dict(m=8, n=64)]


def get_inputs(m=37, n=100):
    return [torch.randn(m, n, device="cuda")]
'''


def test_rows_per_program_runs_each_row_as_its_own_program_did_and_is_verified(tmp_path, runner):
    """R consecutive program indices per program, in a loop guarded by the original grid's size
    (37 rows: the last program's extra indices run nothing), composed with the other rewrites
    and launch options."""
    from agent.tune.rewrites import rows_rewrite
    kdef = next(n for n in ast.parse(SOFTMAX_ROWS).body if isinstance(n, ast.FunctionDef))
    (site,) = find_launch_sites(SOFTMAX_ROWS, "softmax")
    rw = rows_rewrite(SOFTMAX_ROWS, kdef, site)
    assert rw is not None and rw.values == ["as written", "2 per program", "4 per program", "8 per program"]
    site.rewrites = kernel_rewrites(SOFTMAX_ROWS, kdef, "cuda", "sm_90") + [rw]
    p = Project(tmp_path).write("s.py", SOFTMAX_ROWS)
    for r in ("2", "8"):
        new = render_config(SOFTMAX_ROWS, site, {"rows_per_program": f"{r} per program", "num_warps": 2,
                                                 "eviction_policy": "streamed: evict_first"})
        assert f"softmax_kernel[(triton.cdiv(n_rows, {r}),)](" in new
        assert f"GEAK_ROWS_N=(n_rows), ROWS_PER_PROGRAM={r}, num_warps=2)" in new
        assert "row = (_geak_first + _geak_r)" in new and 'eviction_policy="evict_first"' in new
        p.write(f"r{r}.py", new)
        res = p.evaluate(runner, "s.py::softmax", f"r{r}.py::softmax", trials=1)
        assert res.status == "ok" and res.correct, res.message
    assert render_config(SOFTMAX_ROWS, site, {"rows_per_program": "as written"}) == SOFTMAX_ROWS
    # A guard that ran every index regardless would write past the last row: caught, not kept.
    broken = render_config(SOFTMAX_ROWS, site, {"rows_per_program": "4 per program"}).replace(
        "if _geak_first + _geak_r < GEAK_ROWS_N:", "if _geak_first + _geak_r >= 0:")
    p.write("broken.py", broken)
    assert not p.evaluate(runner, "s.py::softmax", "broken.py::softmax", trials=1).correct
    # The tuner searches it as one more axis.
    t = _Tuning(runner, p.request("s.py::softmax"), "sm_90", 1)
    assert t.find_launch(None) and t.build_space()
    assert {c["rows_per_program"] for c in t.space} == set(rw.values)


def test_rows_per_program_restarts_pointers_the_body_advances(tmp_path, runner):
    """``in_ptr += row * stride`` (most TritonBench-G norms): each index must start from the
    parameter's value, or the second row of a program reads from twice as far."""
    from agent.tune.rewrites import rows_rewrite
    src = SOFTMAX_ROWS.replace("    offs = tl.arange(0, BLOCK)\n",
                               "    in_ptr += row * stride\n    out_ptr += row * stride\n    offs = tl.arange(0, BLOCK)\n"
                               ).replace("in_ptr + row * stride + offs", "in_ptr + offs").replace(
                                   "out_ptr + row * stride + offs", "out_ptr + offs")
    kdef = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef))
    (site,) = find_launch_sites(src, "softmax")
    site.rewrites = [rows_rewrite(src, kdef, site)]
    new = render_config(src, site, {"rows_per_program": "4 per program"})
    assert "_geak_saved_in_ptr = in_ptr" in new and "            in_ptr = _geak_saved_in_ptr" in new
    p = Project(tmp_path).write("s.py", src).write("r4.py", new)
    r = p.evaluate(runner, "s.py::softmax", "r4.py::softmax", trials=1)
    assert r.status == "ok" and r.correct, r.message
    p.write("drifts.py", new.replace("            in_ptr = _geak_saved_in_ptr\n", ""))
    assert not p.evaluate(runner, "s.py::softmax", "drifts.py::softmax", trials=1).correct


def test_rows_per_program_is_left_out_where_it_would_not_be_the_same_program():
    from agent.tune.rewrites import rows_rewrite

    def rows(src):
        kdef = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef))
        return rows_rewrite(src, kdef, find_launch_sites(src, "softmax")[0])

    assert rows(SOFTMAX_ROWS) is not None
    # a grid that follows a tuned block (E would differ between configs), a 2-D grid, an early
    # return, a lock, a second use of the program id, a second launch of the kernel
    tied = SOFTMAX_ROWS.replace("[(n_rows,)]", "[(triton.cdiv(n_rows * n_cols, 256),)]").replace(
        "BLOCK=triton.next_power_of_2(n_cols))", "BLOCK=256)")
    assert rows(tied) is None
    assert rows(SOFTMAX_ROWS.replace("[(n_rows,)]", "[(n_rows, 1)]")) is None
    assert rows(SOFTMAX_ROWS.replace("    x = x - tl.max", "    if n_cols == 0:\n        return\n    x = x - tl.max")) is None
    assert rows(SOFTMAX_ROWS.replace("    num = tl.exp(x)", "    tl.atomic_cas(out_ptr, 0.0, 1.0)\n    num = tl.exp(x)")) is None
    assert rows(SOFTMAX_ROWS.replace("offs = tl.arange(0, BLOCK)", "offs = tl.arange(0, BLOCK) + tl.program_id(0) * 0")) is None
    assert rows(SOFTMAX_ROWS.replace("    return out\n", "    softmax_kernel[(n_rows,)](out, x, x.stride(0), n_cols, BLOCK=128)\n    return out\n", 1)) is None


TIED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def attn_kernel(q_ptr, o_ptr, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DMODEL: tl.constexpr):
    pass


def attn(q, o):
    BLOCK = 128
    Lq, Lk = q.shape[-1], q.shape[-1]
    grid = (triton.cdiv(q.shape[0], BLOCK),)
    attn_kernel[grid](q, o, q.shape[0], BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_DMODEL=Lk, num_warps=4)
    return o
'''


def test_keywords_passed_one_name_are_one_knob_and_a_tensor_extent_is_not_a_knob():
    # TritonBench-G's attention_llama: ``BLOCK = 64`` passed as BLOCK_M and BLOCK_N. Searched as
    # two knobs, both wrote the one ``BLOCK = ...``: "1.45x faster with BLOCK_M=16, BLOCK_N=64"
    # ran 16 for both. And ``BLOCK_DMODEL=Lk`` (the head size, read from q.shape) halved or
    # doubled is another problem: such kernels had most of their configs fail their check
    # (context_attn_mistral: 10 of 11).
    from agent.tune.knobs import render_autotune_launch
    (site,) = find_launch_sites(TIED, "attn")
    assert [k.name for k in site.knobs] == ["BLOCK_M", "num_warps"] and site.exprs == []
    (block, _) = site.knobs
    assert [f for f, _ in block.followers] == ["BLOCK_N"]
    assert any("BLOCK_N is passed the same name (BLOCK) as BLOCK_M" in n for n in site.notes)
    assert any("BLOCK_DMODEL is the tensor extent Lk as it is" in n for n in site.notes)
    assert "    BLOCK = 32\n" in render_config(TIED, site, {"BLOCK_M": 32})
    # As an @triton.autotune, both keywords leave the launch and each config sets both.
    auto = render_autotune_launch(TIED, site, [{"BLOCK_M": 64}, {"BLOCK_M": 32}], ["n"])
    assert "triton.Config({'BLOCK_M': 64, 'BLOCK_N': 64}, num_warps=4)" in auto, auto
    assert "BLOCK_M=BLOCK" not in auto and "BLOCK_N=BLOCK" not in auto and "BLOCK_DMODEL=Lk" in auto
    ast.parse(auto)
    # A rounded extent is a block around it, and is still searched.
    rounded = TIED.replace("BLOCK_DMODEL=Lk", "BLOCK_DMODEL=triton.next_power_of_2(Lk)")
    assert [e.name for e in find_launch_sites(rounded, "attn")[0].exprs] == ["BLOCK_DMODEL"]
    # What the report says the edit is names both keywords.
    t = _Tuning.__new__(_Tuning)
    t.site = site
    assert t.label({"BLOCK_M": 32, "num_warps": 8}) == "BLOCK_M=BLOCK_N=32, num_warps=8"


TIED_COPY = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy2d_kernel(x_ptr, y_ptr, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    offs = rows[:, None] * n + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def copy2d(x):
    BLOCK = 32
    m, n = x.shape
    y = torch.empty_like(x)
    copy2d_kernel[(triton.cdiv(m, BLOCK), triton.cdiv(n, BLOCK))](x, y, m, n, BLOCK_M=BLOCK, BLOCK_N=BLOCK)
    return y


INPUT_CASES = [dict(m=40, n=72)]


def get_inputs(m=40, n=72):
    return [torch.randn(m, n, device="cuda")]
'''


def test_a_knob_s_followers_are_compiled_run_and_named_with_it(tmp_path, runner):
    req = Project(tmp_path).write("k.py", TIED_COPY).request("k.py::copy2d")

    def cost(label, text):  # BLOCK = 64 is the fastest
        block = 32 if text is None else int(text.split("BLOCK = ")[1].split("\n")[0])
        return {16: 1.4, 32: 1.0, 64: 0.6, 128: 0.9}.get(block, 1.2)

    gpu = CostModelRunner(runner, cost)
    report = tune(gpu, req, "sm_90", max_configs=6, trials_per_case=1, timed=True)
    screened = [c for r in gpu.requests for c in (r.options.aot_configs or []) if "BLOCK_M" in c]
    assert screened and all(c.get("BLOCK_N") == c["BLOCK_M"] for c in screened), screened
    assert report.improved and report.best["BLOCK_M"] == 64 and "BLOCK_N" not in report.best
    assert "BLOCK_M=BLOCK_N=64" in report.message, report.message
    assert "    BLOCK = 64\n" in report.source
