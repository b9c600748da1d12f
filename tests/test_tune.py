"""The tuner on the CPU: knob discovery, edits, search space, verification of every config."""

import subprocess
import sys
import textwrap

import pytest

from conftest import ADD_RELU, ROOT, Project
from agent.tune.knobs import find_launch_sites, render_config
from agent.tune.tuner import Trial, choose, search_space, tune

STYLES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def keyword_literal(x):
    out = torch.empty_like(x)
    k[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128, ACT=1, num_warps=2)
    return out


def bound_name_and_grid_lambda(x):
    out = torch.empty_like(x)
    BLOCK = 512
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    k[grid](x, out, x.numel(), BLOCK=BLOCK, ACT=0)
    return out


def computed(x):
    out = torch.empty_like(x)
    b = triton.next_power_of_2(x.numel())
    k[(1,)](x, out, x.numel(), BLOCK=b, ACT=0, num_warps=4)
    return out
'''


def test_knobs_in_different_styles():
    (site,) = find_launch_sites(STYLES, "keyword_literal")
    assert {(kn.name, kn.value, kn.kind) for kn in site.knobs} == {
        ("BLOCK", 128, "constexpr"), ("ACT", 1, "constexpr"), ("num_warps", 2, "num_warps")}
    block = next(kn for kn in site.knobs if kn.name == "BLOCK")
    assert len(block.spans) == 2  # the keyword and the grid's literal 128, tied together
    (site,) = find_launch_sites(STYLES, "bound_name_and_grid_lambda")
    assert [(kn.name, kn.value) for kn in site.knobs] == [("BLOCK", 512), ("ACT", 0)]
    assert site.insert_at is not None  # num_warps can be added
    (site,) = find_launch_sites(STYLES, "computed")
    assert [kn.name for kn in site.knobs] == ["ACT", "num_warps"]
    # The computed block is a knob of its own: its expression, scaled; the grid (1,) is not tied.
    (block,) = site.exprs
    assert (block.name, block.text, block.var) == ("BLOCK", "triton.next_power_of_2(x.numel())", "b")
    assert block.values[:3] == [block.text, f"{block.text} * 2", f"max(16, {block.text} // 2)"]
    # A computed num_warps is scaled in place; the search never adds a second num_warps=.
    text = STYLES.replace("BLOCK=b, ACT=0, num_warps=4)", "BLOCK=1024, ACT=0, num_warps=b // 256)")
    (site,) = find_launch_sites(text, "computed")
    assert search_space(site) and all(c["num_warps"] in ("b // 256", "min(16, (b // 256) * 2)",
                                                         "max(1, (b // 256) // 2)") for c in search_space(site))
    for c in search_space(site):
        new = render_config(text, site, c)
        compile(new, "x.py", "exec")
        assert new.count("num_warps=") == STYLES.count("num_warps=")


def test_edits_rewrite_the_launch_and_its_grid():
    (site,) = find_launch_sites(STYLES, "keyword_literal")
    new = render_config(STYLES, site, {"BLOCK": 1024, "num_warps": 8})
    assert "k[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, ACT=1, num_warps=8)" in new
    (site,) = find_launch_sites(STYLES, "bound_name_and_grid_lambda")
    new = render_config(STYLES, site, {"BLOCK": 64, "num_warps": 1})
    assert "    BLOCK = 64\n" in new and "BLOCK=BLOCK, ACT=0, num_warps=1)" in new
    compile(new, "x.py", "exec")


def test_search_space_respects_the_hardware():
    (site,) = find_launch_sites(STYLES, "keyword_literal")
    space = search_space(site, "cuda")
    assert {c["num_warps"] for c in space} == {1, 2, 4, 8, 16}
    assert {c["BLOCK"] for c in space} == {32, 64, 128, 256, 512}
    assert all("num_stages" not in c for c in space)  # no loop in the kernel: stages do nothing
    src = (ROOT / "examples" / "matmul.py").read_text()
    (mm,) = find_launch_sites(src, "matmul")
    assert {c["num_stages"] for c in search_space(mm, "rocm", uses_dot=True)} == {1, 2}
    assert max(c["BLOCK_M"] for c in search_space(mm, "cuda", uses_dot=True)) == 256


def test_choose_needs_a_real_margin():
    def t(speedup, spread=1.0, correct=True, pruned=None):
        return Trial(config={}, status="ok" if correct else "mismatch", correct=correct, speedup=speedup,
                     spread_pct=spread, pruned=pruned)
    assert choose([t(1.005), t(0.9)]) is None  # inside the noise
    assert choose([t(1.3, correct=False), t(1.05)]).speedup == 1.05
    assert choose([t(1.5, pruned="spills"), t(1.1)]).speedup == 1.1
    assert choose([t(1.04, spread=6.0)]) is None  # spread larger than the gain


def test_every_config_is_verified_and_a_truncating_block_is_caught(tmp_path, runner):
    # One program per row, no loop: a block shorter than the row silently drops columns.
    p = Project(tmp_path)
    # (A 2-D grid keeps rows_per_program, tested in test_tune_knobs.py, out of this space.)
    p.write("rowsum.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0, cache_modifier="")
            tl.store(out_ptr + row, tl.sum(x, axis=0))

        def rowsum(x):
            out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
            rowsum_kernel[(x.shape[0], 1)](x, out, x.shape[1], BLOCK=256, num_warps=4)
            return out

        def get_inputs():
            return [torch.randn(8, 256, device="cuda")]
    """)
    req = p.request("rowsum.py::rowsum")
    report = tune(runner, req, "sm_90", max_configs=200, trials_per_case=1)
    assert report.tried == report.space_size == 5 * 5 - 1
    by_block = {}
    for trial in report.trials:
        by_block.setdefault(trial.config["BLOCK"], set()).add(trial.status)
    assert by_block[64] == {"mismatch"} and by_block[128] == {"mismatch"}
    assert by_block[512] == {"ok"} and by_block[1024] == {"ok"}
    assert not report.improved and report.source is None  # no timing on the CPU: nothing offered
    assert "no timing here" in report.message
    assert all(t.resources and t.resources[0].arch == "sm_90" for t in report.trials if t.correct)


def test_geak_optimize_on_a_cpu_machine(tmp_path):
    p = Project(tmp_path).write("k.py", ADD_RELU)
    out = tmp_path / "tuned.py"
    r = subprocess.run([sys.executable, "-m", "agent.cli", "optimize", "k.py::add_relu", "--max-configs", "4",
                        "--trials", "1", "--out", str(out), "--json"], cwd=p.root, capture_output=True,
                       text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1, r.stderr  # ran, verified configs, but nothing is verified faster
    assert "NO VERIFIED IMPROVEMENT" in r.stderr and "sm_90" in r.stderr
    import json
    doc = json.loads(r.stdout)
    assert doc["tried"] == 4 and doc["best"] is None and all(t["correct"] for t in doc["trials"])
    assert not out.exists()  # nothing unverified is ever written
    assert textwrap.dedent(ADD_RELU) == (p.root / "k.py").read_text()  # the original is untouched


AUTOTUNED = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 1024}, num_warps=8)], key=["n"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x):
    out = torch.empty_like(x)
    copy_kernel[(1,)](x, out, x.numel(), num_warps=4)
    return out


def get_inputs():
    return [torch.randn(3000, device="cuda")]
'''


def test_autotune_configs_are_found_and_pinned_one_at_a_time():
    from agent.tune.knobs import find_autotune, render_autotune
    at, why = find_autotune(AUTOTUNED, "scale_kernel")
    assert why is None and at.configs == [{"BLOCK": 128, "num_warps": 4}, {"BLOCK": 1024, "num_warps": 8}]
    one = render_autotune(AUTOTUNED, at, {"BLOCK": 256, "num_warps": 2})
    assert "@triton.autotune(configs=[triton.Config({'BLOCK': 256}, num_warps=2)], key=[\"n\"])" in one
    computed = AUTOTUNED.replace('configs=[triton.Config({"BLOCK": 128}, num_warps=4),\n'
                                 '                          triton.Config({"BLOCK": 1024}, num_warps=8)]',
                                 "configs=make_configs()")
    at, why = find_autotune(computed, "scale_kernel")
    assert at is None and "computed" in why


def test_tuning_an_autotuned_kernel_under_the_interpreter(tmp_path, runner):
    p = Project(tmp_path).write("at.py", AUTOTUNED)
    # The original, autotuned over two configs, runs under the interpreter (no benchmarking there).
    assert runner.evaluate(p.request("at.py::scale")).status == "ok"
    report = tune(runner, p.request("at.py::scale"), "gfx942", max_configs=5, trials_per_case=1)
    assert report.tried == 5 and all(t.correct for t in report.trials)
    assert any("autotuned over 2 config(s)" in n for n in report.notes)
    assert all(t.resources[0].arch == "gfx942" for t in report.trials)


def test_a_heuristics_block_is_tuned_in_its_lambda(tmp_path, runner):
    (site,) = find_launch_sites(AUTOTUNED, "copy")
    assert [k.name for k in site.knobs] == ["num_warps"]
    (block,) = site.exprs  # BLOCK comes from the heuristic: its lambda's body is the knob
    assert (block.kind, block.text) == ("heuristic", 'triton.next_power_of_2(args["n"])')
    new = render_config(AUTOTUNED, site, {"BLOCK": block.values[1], "num_warps": 4})
    assert '{"BLOCK": lambda args: triton.next_power_of_2(args["n"]) * 2})' in new
    p = Project(tmp_path).write("at.py", AUTOTUNED)
    report = tune(runner, p.request("at.py::copy"), "sm_90", max_configs=3, trials_per_case=1)
    # One program covers the whole vector: a block halved drops the second half (caught), doubled is fine.
    assert report.tried == 3
    for t in report.trials:
        assert t.correct == ("// 2" not in t.config["BLOCK"]), (t.config, t.status)


def test_coordinate_descent_finds_the_optimum_of_a_separable_cost_with_few_evaluations():
    from agent.tune.tuner import coordinate_descent
    axes = {"BLOCK": [32, 64, 128, 256, 512, 1024], "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3, 4, 5]}
    best = {"BLOCK": 256, "num_warps": 8, "num_stages": 3}

    def cost(c):  # time per call, lowest at `best`
        return 1 + sum(abs(axes[k].index(c[k]) - axes[k].index(best[k])) for k in c) * 0.2

    start = {"BLOCK": 32, "num_warps": 1, "num_stages": 1}

    def speed(c):  # what the evaluator reports: speedup over the original (start)
        return cost(start) / cost(c)

    calls = []

    def evaluate(batch):
        calls.append(len(batch))
        return [Trial(config=c, status="ok", correct=True, speedup=speed(c), spread_pct=0.5) for c in batch]

    trials = coordinate_descent(axes, start, evaluate, budget=60)
    assert max(trials, key=lambda t: t.speedup).config == best
    assert len(trials) < 6 * 5 * 5 / 3  # far fewer than the 150 of the full grid


def test_coordinate_descent_never_follows_a_wrong_config():
    from agent.tune.tuner import coordinate_descent
    axes = {"BLOCK": [64, 128, 256]}

    def evaluate(batch):  # the "fast" config is wrong
        return [Trial(config=c, status="mismatch" if c["BLOCK"] == 256 else "ok", correct=c["BLOCK"] != 256,
                      speedup=5.0 if c["BLOCK"] == 256 else 0.9, spread_pct=0.5) for c in batch]

    trials = coordinate_descent(axes, {"BLOCK": 128}, evaluate, budget=10)
    assert choose(trials) is None


def test_the_descent_gives_every_knob_its_share_of_a_budget_too_small_for_all():
    """TritonBench-G's mixed_sparse_attention on the H200: 16 configs, 14 of them moves of
    BLOCK_M and BLOCK_N (which its results depend on), and its warps and stages never tried.
    With the budget too small for every value of every knob, each knob gets its share, its
    nearest values first."""
    from agent.tune.tuner import coordinate_descent
    axes = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256],
            "eviction_policy": ["as written", "evict_first"], "num_stages": [1, 2, 3, 4], "num_warps": [1, 2, 4, 8, 16]}
    start = {"BLOCK_M": 64, "BLOCK_N": 64, "eviction_policy": "as written", "num_stages": 2, "num_warps": 4}
    runs = []

    def evaluate(batch):
        runs.extend(batch)
        return [Trial(config=c, status="ok", correct=True, spread_pct=0.5,
                      speedup=1.3 if c["num_warps"] == 8 else 1.0) for c in batch]

    trials = coordinate_descent(axes, start, evaluate, budget=9)
    assert len(trials) == 9
    assert {name for c in runs for name in c if c[name] != start[name]} == set(axes)  # every knob moved
    assert max(trials, key=lambda t: t.speedup).config["num_warps"] == 8
    # Nearest first: BLOCK_M's two moves are its neighbours, not the ends of its range.
    assert sorted(c["BLOCK_M"] for c in runs if c["BLOCK_M"] != 64) == [32, 128]
    # With the budget for all, a round tries every value of each knob, as before.
    runs.clear()
    coordinate_descent(axes, start, evaluate, budget=100)
    assert len([c for c in runs if c["num_warps"] == 4 and c["num_stages"] == 2 and c["eviction_policy"] == "as written"
                and c["BLOCK_N"] == 64]) == 4


def test_values_seen_to_change_results_are_not_tried_again(tmp_path):
    """Every block size but the original's changes the kernel's results (as the block tables of a
    block-sparse attention are laid out per block); a faster launch option exists. The search
    learns each wrong value from a config that differs from the original in that knob alone
    among those that can change results, replaces sampled configs that hold one, and descends
    over what is left."""
    from agent.tune.tuner import RESULT_NEUTRAL, changes_results
    from test_tune_budget import FakeGpu, H200  # noqa: F401
    req = Project(tmp_path).write("k.py", ADD_RELU).request("k.py::add_relu")

    def cost(block, warps):
        return 1.0 if warps != 8 else 0.8

    gpu = FakeGpu(cost, wrong=(64, 128, 512, 1024))
    report = tune(gpu, req, "sm_90", max_configs=16, trials_per_case=1, timed=True)
    assert report.improved and report.best["num_warps"] == 8 and report.best["BLOCK"] == 256
    wrong = [t for t in report.trials if t.status == "mismatch"]
    # Without learning: about 8 of the 16 (a random sample of the 50 holds a wrong block four
    # times in five, and the descent then tries each wrong block once more).
    assert len(wrong) <= 6, [t.config for t in report.trials]
    assert {k for k, _ in changes_results(report.trials, report.original)} == {"BLOCK"}
    assert "values seen to change the kernel's results were not tried again: BLOCK=" in " ".join(report.notes)
    # Attribution is by one knob that can change results: launch options and hints never do.
    base = {"BLOCK": 256, "num_warps": 4}
    two = [Trial(config={"BLOCK": 64, "num_warps": 8}, status="mismatch", correct=False)]
    assert changes_results(two, base) == {("BLOCK", 64)} and "num_warps" in RESULT_NEUTRAL
    both = [Trial(config={"BLOCK": 64, "OTHER": 2, "num_warps": 4}, status="mismatch", correct=False)]
    assert changes_results(both, {**base, "OTHER": 1}) == set()  # two suspects: neither is blamed
    cleared = both + [Trial(config={"BLOCK": 64, "OTHER": 1, "num_warps": 4}, status="ok", correct=True)]
    assert changes_results(cleared, {**base, "OTHER": 1}) == {("OTHER", 2)}  # BLOCK=64 verified once


TWO_BLOCKS = ADD_RELU.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, BLOCK_N: tl.constexpr):").replace(
    "BLOCK=256)", "BLOCK=256, BLOCK_N=64)")


def test_a_sample_whose_configs_mostly_fail_turns_to_one_move_at_a_time(tmp_path):
    """Two block sizes the results depend on, a faster warp count: random configs move both
    blocks and fail without saying which was wrong. Once more sampled configs have failed than
    passed, the rest of the sample moves one such knob at a time, each failure names its
    value, and the budget goes to what is left."""
    from agent.tune.tuner import changes_results
    from test_tune_budget import H200, FakeGpu
    from runner.schema import EvalResult

    class TwoBlocks(FakeGpu):
        def one(self, req):
            text = req.candidate_files.get(req.target.path) if req.candidate is not None else None
            if req.options.aot_configs or text is None:
                return super().one(req)
            call = text.split("def add_relu(")[1]
            blocks = (re.search(r"BLOCK=(\d+)", call).group(1), re.search(r"BLOCK_N=(\d+)", call).group(1))
            if blocks != ("256", "64"):
                return EvalResult(status="mismatch", correct=False, message="wrong", device=H200)
            return super().one(req)

    import re
    req = Project(tmp_path).write("k.py", TWO_BLOCKS).request("k.py::add_relu")
    gpu = TwoBlocks(lambda block, warps: 0.8 if warps == 8 else 1.0)
    report = tune(gpu, req, "sm_90", max_configs=16, trials_per_case=1, timed=True)
    assert report.space_size > 100 and report.tried == 16
    assert report.improved and report.best["num_warps"] == 8, [(t.config, t.status) for t in report.trials]
    learned = changes_results(report.trials, report.original)
    assert {k for k, _ in learned} == {"BLOCK", "BLOCK_N"}
    # (Without it all 16 fail, and the warps are never tried: 14 of 16 failed so on the H200.)
    assert sum(t.status == "mismatch" for t in report.trials) <= 11


# --------------------------------------------------------------------------- per-shape and autotune edits

def test_autotune_edit_imports_and_passes_the_originals_checks(tmp_path, runner):
    from agent.tune.knobs import render_autotune_launch
    (site,) = find_launch_sites(ADD_RELU, "add_relu")
    configs = [{"BLOCK": 512, "num_warps": 8}, {"BLOCK": 64, "num_warps": 2}]
    p = Project(tmp_path).write("k.py", ADD_RELU)
    for order in (configs, configs[::-1]):  # under the interpreter the first config runs
        new = render_autotune_launch(ADD_RELU, site, order, ["n"])
        assert "@triton.autotune(" in new and "key=['n']" in new
        assert "add_relu_kernel[lambda META: (triton.cdiv(n, META['BLOCK']),)](x, y, out, n)" in new
        p.write("tuned.py", new)
        r = p.evaluate(runner, "k.py::add_relu", "tuned.py::add_relu", trials=1)
        assert r.status == "ok" and r.correct, r.message
    # A grid that does not follow the block (a fixed 256-wide tiling) is caught when it runs.
    broken = ADD_RELU.replace("(triton.cdiv(n, 256),)", "(triton.cdiv(n, 128 + 128),)")
    (site,) = find_launch_sites(broken, "add_relu")
    p.write("bad.py", render_autotune_launch(broken, site, [{"BLOCK": 64}], ["n"]))
    r = p.evaluate(runner, "k.py::add_relu", "bad.py::add_relu", trials=1)
    assert r.status == "mismatch" and not r.correct


def test_an_autotune_edit_takes_launch_options_out_of_the_launch(tmp_path, runner):
    """Triton's Config always passes num_warps/num_stages: a launch that still passes one raises
    "multiple values for keyword argument" (seen on TritonBench-G flash attention kernels)."""
    from agent.tune.knobs import render_autotune_launch
    src = ADD_RELU.replace("BLOCK=256)", "BLOCK=256, num_warps=4)")
    (site,) = find_launch_sites(src, "add_relu")
    new = render_autotune_launch(src, site, [{"BLOCK": 64}, {"BLOCK": 512}], ["n"])
    assert "num_warps=4)" not in new.split("def add_relu(")[1]
    assert new.count("num_warps=4") == 2  # the launch's value, in each config
    p = Project(tmp_path).write("k.py", src).write("tuned.py", new)
    r = p.evaluate(runner, "k.py::add_relu", "tuned.py::add_relu", trials=1)
    assert r.status == "ok" and r.correct, r.message
    # A computed option cannot be a Config's literal: no edit rather than one that raises.
    computed = src.replace("num_warps=4)", "num_warps=4 if n > 1024 else 2)")
    (site,) = find_launch_sites(computed, "add_relu")
    with pytest.raises(ValueError, match="computes num_warps"):
        render_autotune_launch(computed, site, [{"BLOCK": 64}], ["n"])


def test_an_autotune_edit_restores_what_the_kernel_updates_in_place(tmp_path, runner):
    """@triton.autotune runs the kernel once per config while it benchmarks: a kernel that
    updates a tensor in place (or atomically) would compute on its own leftovers unless
    ``restore_value`` names it (three TritonBench-G kernels came back wrong that way)."""
    from agent.tune.knobs import render_autotune_launch, updated_in_place
    inplace = (ADD_RELU.replace("tl.store(out_ptr + offs", "tl.store(x_ptr + offs")
               .replace("    return out\n", "    return x\n", 1))
    assert updated_in_place(inplace, "add_relu_kernel") == ["x_ptr"]
    assert updated_in_place(ADD_RELU, "add_relu_kernel") == []  # out is written, never read
    atomic = ADD_RELU.replace("tl.store(out_ptr + offs, ", "tl.atomic_add(out_ptr + offs * 1, ")
    assert updated_in_place(atomic, "add_relu_kernel") == ["out_ptr"]
    (site,) = find_launch_sites(inplace, "add_relu")
    new = render_autotune_launch(inplace, site, [{"BLOCK": 64}, {"BLOCK": 512}], ["n"])
    assert "restore_value=['x_ptr']" in new
    p = Project(tmp_path).write("k.py", inplace).write("tuned.py", new)
    r = p.evaluate(runner, "k.py::add_relu", "tuned.py::add_relu", trials=1)
    assert r.status == "ok" and r.correct, r.message
    (site,) = find_launch_sites(ADD_RELU, "add_relu")
    assert "restore_value" not in render_autotune_launch(ADD_RELU, site, [{"BLOCK": 64}], ["n"])


def test_matmul_autotune_edit_keeps_its_lambda_grid_and_compiles():
    from agent.tune.knobs import render_autotune_launch
    src = (ROOT / "examples" / "matmul.py").read_text()
    (site,) = find_launch_sites(src, "matmul")
    new = render_autotune_launch(src, site, [{"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 8,
                                              "num_stages": 3}], ["M", "N", "K"])
    assert 'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))' in new
    assert "BLOCK_M=" not in new.split("def matmul(")[1]  # autotune decides, not the launch
    compile(new, "matmul.py", "exec")


def _trial(cfg, speedup, cases, correct=True):
    return Trial(config=cfg, status="ok" if correct else "mismatch", correct=correct, speedup=speedup,
                 spread_pct=0.5, case_speedups=cases)


def test_per_shape_winners_become_the_autotune_configs():
    from agent.tune.tuner import autotune_configs, per_shape
    small, big = {"BLOCK": 64, "num_warps": 1}, {"BLOCK": 1024, "num_warps": 8}
    trials = [_trial(small, 1.02, {"n=300": 1.30, "n=1M": 0.80}),
              _trial(big, 1.40, {"n=300": 0.70, "n=1M": 1.50}),
              _trial({"BLOCK": 4096, "num_warps": 16}, 3.0, {"n=300": 3.0, "n=1M": 3.0}, correct=False)]
    choices = per_shape(trials)
    assert [(c.case, c.config) for c in choices] == [("n=300", small), ("n=1M", big)]
    original = {"BLOCK": 256, "num_warps": 4}
    assert autotune_configs(choices, original, trials) == [big, small]  # ties: faster overall first
    # Where nothing beats the original on a shape, the original's config stays in the list.
    trials = [_trial(big, 1.2, {"n=300": 1.004, "n=1M": 1.5})]
    choices = per_shape(trials)
    assert choices[0].config is None and choices[0].speedup == 1.0
    assert autotune_configs(choices, original, trials) == [big, original] or \
        autotune_configs(choices, original, trials) == [original, big]


class CostModelRunner:
    """The real runner for correctness (every candidate really runs), with the timing a GPU
    would give replaced by a cost model of the config: the CPU cannot time kernels. Only the
    tuner's decisions are under test here; GPU timing itself is tested on the GPU."""

    def __init__(self, runner, case_cost, noise_on_confirm=1.0):
        self.runner, self.case_cost, self.noise = runner, case_cost, noise_on_confirm
        self.requests = []
        self.device, self.parallelism = runner.device, runner.parallelism

    def evaluate(self, req):
        return self.evaluate_many([req])[0]

    def evaluate_many(self, reqs):
        from runner.schema import CaseTiming, Timing
        from agent.tune.knobs import find_launch_sites as sites
        out = []
        for req, r in zip(reqs, self.runner.evaluate_many(reqs)):
            self.requests.append(req)
            if req.candidate is None:  # the tuner's compile screen (an untimed run of the original)
                out.append(r)
                continue
            text = req.candidate_files[req.target.path]
            confirm = req.options.trials >= 3
            if r.correct:
                ref_total = cand_total = 0.0
                for c in r.cases:
                    ref = self.case_cost(c.label, None)
                    cand = self.case_cost(c.label, text) * (self.noise if confirm else 1.0)
                    c.timing = CaseTiming(ref_ms=ref, cand_ms=cand, speedup=ref / cand, ref_spread_pct=0.5,
                                          cand_spread_pct=0.5, reps=10, method="events")
                    ref_total, cand_total = ref_total + ref, cand_total + cand
                r.timing = Timing(ref_ms=ref_total, cand_ms=cand_total, speedup=ref_total / cand_total,
                                  speedup_geomean=ref_total / cand_total, spread_pct=0.5, method="events",
                                  cases_timed=len(r.cases))
            out.append(r)
        return out


def _block_of(text):
    import re
    if text is None:
        return 256, None
    m = re.search(r"BLOCK=(\d+)", text.split("def add_relu(")[1])
    return (int(m.group(1)) if m else None), text


def test_tune_picks_per_shape_writes_autotune_and_confirms(tmp_path, runner):
    p = Project(tmp_path).write("k.py", ADD_RELU)
    req = p.request("k.py::add_relu")

    def cost(case, text):  # n=300 likes BLOCK 64, n=2048 likes BLOCK 1024; autotune gets each its best
        block, _ = _block_of(text)
        weight = 1.0 if "300" in case else 3.0
        if block is None:  # the autotune edit: Triton picks the best listed config per shape
            return weight
        best = 64 if "300" in case else 1024
        return weight * (1.0 + abs(block.bit_length() - best.bit_length()) * 0.1)

    cm = CostModelRunner(runner, cost)
    # 24 configs; a budget of 10 makes it search (block first, then warps) instead of trying all.
    report = tune(cm, req, "sm_90", max_configs=10, trials_per_case=1, timed=True, emit="autotune")
    assert report.tried <= 10
    assert [(c.case, c.config["BLOCK"]) for c in report.per_shape] == [("n=300", 64), ("n=2048", 1024)]
    assert {c["BLOCK"] for c in report.autotune_configs} == {64, 1024}
    assert report.autotune_key == ["n"] and report.improved
    assert report.best_speedup == pytest.approx(4.8 / 4.0)  # the confirmation's number, not the search's
    assert "@triton.autotune(" in report.source
    last = cm.requests[-1]
    assert last.candidate_files["k.py"] == report.source and last.options.trials >= 3

    # Constants: one config for all shapes; the confirmation decides what is offered.
    # (The descent gives each knob its share of a budget too small for all: 10 holds two rounds.)
    report = tune(CostModelRunner(runner, cost), req, "sm_90", max_configs=10, trials_per_case=1, timed=True)
    assert report.improved and report.best["BLOCK"] == 1024  # (num_warps and the eviction hint cost nothing here)
    assert "BLOCK=1024" in report.source and report.best_speedup == pytest.approx(4.8 / 4.4)
    # A gain that does not survive a fresh measurement is not offered.
    report = tune(CostModelRunner(runner, cost, noise_on_confirm=1.5), req, "sm_90", max_configs=10,
                  trials_per_case=1, timed=True)
    assert not report.improved and report.source is None and "on confirmation" in report.message


def test_autotune_edit_is_refused_when_the_kernel_has_other_launches(tmp_path, runner):
    two = ADD_RELU + '''

def add_relu_small(x, y):
    out = torch.empty_like(x)
    add_relu_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
    return out
'''
    p = Project(tmp_path).write("k.py", two)
    cm = CostModelRunner(runner, lambda case, text: 1.0 if text is None or "BLOCK=256" in text else 0.8)
    report = tune(cm, p.request("k.py::add_relu"), "sm_90", max_configs=3, trials_per_case=1, timed=True,
                  emit="autotune")
    assert not report.improved and "more than one place" in report.message
    with pytest.raises(ValueError, match="not a .*argument of add_relu_kernel"):
        tune(cm, p.request("k.py::add_relu"), "sm_90", emit="autotune", key=["numel"])


def test_matmul_tiles_that_cannot_fit_are_pruned_before_running():
    from agent.tune.tuner import dot_blocks, static_limit
    b = dot_blocks(["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP"])
    assert b == {"M": "BLOCK_SIZE_M", "N": "BLOCK_SIZE_N", "K": "BLOCK_SIZE_K"}
    cfg = {"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "num_warps": 8, "num_stages": 4}
    # (256 + 256) * 64 * 2 bytes * 4 stages = 256 KiB > sm_90's 227 KiB per block
    assert "shared memory" in static_limit(cfg, b, "sm_90", 2, {})
    assert static_limit({**cfg, "num_stages": 3, "num_warps": 16}, b, "sm_90", 2, {}) is None  # 192 KiB fits
    # ... but a 256 x 256 fp32 accumulator over 8 warps is 256 registers per thread: over 255
    assert "registers" in static_limit({**cfg, "num_stages": 3}, b, "sm_90", 2, {})
    # On gfx942 (64 KiB LDS; the stream pipeliner keeps stages - 1 buffers) a 64 KiB tile pair
    # fits with 2 stages (one buffer), not with 3 (two buffers).
    assert static_limit({**cfg, "num_stages": 2}, b, "gfx942", 2, {}) is None
    assert "shared memory" in static_limit({**cfg, "num_stages": 3}, b, "gfx942", 2, {})
    # 256 x 256 fp32 accumulator over 1 warp: 2048 registers per thread
    assert "registers" in static_limit({**cfg, "BLOCK_SIZE_K": 16, "num_warps": 1, "num_stages": 1}, b, "sm_90", 2, {})


def test_tuning_matmul_prunes_then_verifies_under_the_interpreter(tmp_path, runner):
    p = Project(tmp_path).write("mm.py", (ROOT / "examples" / "matmul.py").read_text())
    report = tune(runner, p.request("mm.py::matmul", cases=[0]), "sm_80", max_configs=3, trials_per_case=1)
    assert report.pruned_before > 0 and any("before running anything" in n for n in report.notes)
    assert report.original_resources and report.original_resources[0].arch == "sm_80"
    # Three configs were chosen (the first known-good tiles); those that spill on sm_80 were
    # pruned by their compile report before running, the rest ran and are verified.
    assert report.tried + len(report.screened) == 3 and report.seeds > 0
    assert report.trials and all(t.correct for t in report.trials)
    assert all("spills" in t.pruned for t in report.screened)
    from agent.tune.tuner import dot_blocks, static_limit
    b = dot_blocks(["BLOCK_M", "BLOCK_N", "BLOCK_K"])
    # case 0 is fp16: no evaluated config breaks the limits for 2-byte elements
    assert all(static_limit({**report.original, **t.config}, b, "sm_80", 2, {}) is None for t in report.trials)


def test_configs_that_spill_on_the_target_are_pruned_before_running(tmp_path, runner, monkeypatch):
    # One 12,000-wide row in a 16,384 block: over one warp that is 512 fp32 values per thread.
    # Only num_warps varies here (the computed block and the eviction hint stay as written), so
    # that the four configs are the four other warp counts.
    from agent.tune import tuner
    every_axis = tuner.search_axes
    monkeypatch.setattr(tuner, "search_axes", lambda *a, **k: {
        n: (v if n == "num_warps" else v[:1]) for n, v in every_axis(*a, **k).items()})
    p = Project(tmp_path).write("sm.py", (ROOT / "examples" / "softmax.py").read_text())
    seen = CostModelRunner(runner, lambda case, text: 1.0)
    report = tune(seen, p.request("sm.py::softmax", cases=[2]), "sm_90", max_configs=4, trials_per_case=1)
    pruned = {t.config["num_warps"]: t for t in report.screened}
    assert 1 in pruned and "spills" in pruned[1].pruned and pruned[1].status == "pruned"
    assert pruned[1].resources and pruned[1].resources[0].spill_bytes > 0
    ran = {t.config["num_warps"]: t for t in report.trials}
    assert 1 not in ran and ran[16].correct and not ran[16].pruned
    assert all(r.arch == "sm_90" and r.registers for r in ran[16].resources)  # the screen's report
    # Nothing pruned was ever run: every candidate request is for a config that passed the screen.
    assert not any("num_warps=1)" in (r.candidate_files.get("sm.py") or "") for r in seen.requests if r.candidate)
    screens = [r for r in seen.requests if r.candidate is None]
    assert screens and all(r.options.aot_kernel == "softmax_kernel" and r.options.aot_configs for r in screens)
    assert sum(len(r.options.aot_configs) for r in screens) == 4  # every config compiled once
    assert "pruned before running" in report.message


def test_the_screen_prunes_nothing_when_the_original_does_not_compile():
    from agent.tune.tuner import Screen
    from runner.schema import EvalRequest, EvalResult, KernelResources, Target

    class Fake:
        def evaluate_many(self, reqs):
            out = []
            for r in reqs:
                res = [KernelResources(kernel="k", arch="sm_90", num_warps=4, num_stages=3, fits=False,
                                       error="CompilationError: unsupported")]
                res += [KernelResources(kernel="k", arch="sm_90", num_warps=4, num_stages=3, fits=False,
                                        error="CompilationError: unsupported", variant=i)
                        for i in range(len(r.options.aot_configs))]
                out.append(EvalResult(status="ok", correct=True, message="", resources=res))
            return out

    req = EvalRequest(target=Target("k.py", "f"), files={"k.py": ""})
    s = Screen(Fake(), req, "k", "sm_90", 2)
    assert s.check([{"BLOCK": 64}, {"BLOCK": 128}]) == {}
    assert "did not compile" in s.unavailable


def test_search_samples_then_descends_where_knobs_interact():
    """A tile whose best needs two knobs changed together: one-knob moves from the original
    see no gain, the seeded sample finds the region, descent finishes the job."""
    from agent.tune.tuner import coordinate_descent
    import random as _r
    axes = {"BM": [16, 32, 64, 128, 256], "BN": [16, 32, 64, 128, 256], "W": [1, 2, 4, 8, 16]}
    start = {"BM": 16, "BN": 16, "W": 1}

    def cost(c):  # square tiles near 128 x 128 are fast; any move of BM or BN alone leaves the square
        dist = abs(c["BM"].bit_length() - 8) + abs(c["BN"].bit_length() - 8)
        return 1.0 + 0.1 * dist + (0.5 if c["BM"] != c["BN"] else 0) + 0.01 * abs(c["W"].bit_length() - 3)

    def evaluate(batch):
        return [Trial(config=c, status="ok", correct=True, speedup=cost(start) / cost(c), spread_pct=0.5) for c in batch]

    only_descent = coordinate_descent(axes, start, evaluate, budget=20)
    space = [dict(BM=a, BN=b, W=w) for a in axes["BM"] for b in axes["BN"] for w in axes["W"]]
    explored = evaluate(_r.Random(0).sample([c for c in space if c != start], 10))
    best0 = choose(explored)
    hybrid = explored + coordinate_descent(axes, dict(best0.config), evaluate, budget=20, prior=tuple(explored),
                                           start_speed=best0.speedup)
    assert max(t.speedup for t in only_descent) < 1.05  # stuck: only the warps moved
    assert max(t.speedup for t in hybrid) > 1.2
    assert len({tuple(sorted(t.config.items())) for t in hybrid}) <= 20


def test_dot_seeds_are_known_tiles_inside_the_space():
    from agent.tune.tuner import DOT_SEEDS, dot_blocks, dot_seeds, search_axes
    src = (ROOT / "examples" / "matmul.py").read_text()
    (mm,) = find_launch_sites(src, "matmul")
    blocks = dot_blocks(k.name for k in mm.knobs)
    start = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    for backend in ("cuda", "rocm"):
        axes = search_axes(mm, backend, uses_dot=True)
        seeds = dot_seeds(axes, blocks, start, backend)
        assert seeds and all(set(c) == set(start) and all(c[k] in axes[k] for k in c) for c in seeds)
        tiles = {(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"]) for c in seeds}
        assert tiles <= set(DOT_SEEDS[backend])
    # AMD: num_stages 1-2 only, so every HIP seed is in the space; 128 x 256 x 64 (8 warps,
    # 3 stages) is a CUDA seed and not a HIP one.
    assert (128, 256, 64, 8, 3) in {(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"])
                                    for c in dot_seeds(search_axes(mm, "cuda", True), blocks, start, "cuda")}
    # A knob the seeds do not name (GROUP_M) keeps the original's value.
    axes = {**search_axes(mm, "cuda", True), "GROUP_M": [4, 8, 16]}
    assert all(c["GROUP_M"] == 8 for c in dot_seeds(axes, blocks, {**start, "GROUP_M": 8}, "cuda"))


def test_a_timed_matmul_search_starts_from_the_seeds_and_times_lightly(tmp_path, runner):
    from agent.tune.tuner import SEARCH_TIMING, dot_seeds, dot_blocks, search_axes
    p = Project(tmp_path).write("mm.py", (ROOT / "examples" / "matmul.py").read_text())
    best_tile = "BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4"

    def cost(case, text):  # the 128 x 128 x 32 seed is 1.5x faster; everything else as the original
        return 1.0 if text is None or best_tile not in text else 1.0 / 1.5

    cm = CostModelRunner(runner, cost)
    report = tune(cm, p.request("mm.py::matmul", cases=[0]), "sm_90", max_configs=6, trials_per_case=1,
                  timed=True)
    (mm,) = find_launch_sites((tmp_path / "mm.py").read_text(), "matmul")
    seeds = dot_seeds(search_axes(mm, "cuda", True), dot_blocks(k.name for k in mm.knobs),
                      {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}, "cuda")
    assert report.seeds == len(seeds) >= 6
    runs = [r for r in cm.requests if r.candidate is not None]
    search, confirm = runs[:-1], runs[-1]
    # The budget goes to the seeds first (the eviction hint and num_ctas stay as the original's).
    tiles = [{k: c[k] for k in seeds[0]} for c in [t.config for t in report.trials][:6]]
    assert tiles == seeds[:6]
    assert all(t.config["num_ctas"] == 1 and t.config["eviction_policy"] == "as written" for t in report.trials[:6])
    assert report.improved and report.best == {**dict(seeds[2]), "num_ctas": 1, "eviction_policy": "as written"}
    assert report.best_speedup == pytest.approx(1.5)
    assert all(r.options.rep_ms == SEARCH_TIMING["rep_ms"] for r in search)
    assert confirm.options.rep_ms == 100.0 and confirm.options.trials >= 3  # the full budget


def test_on_a_gpu_runner_with_no_verified_config_the_verdict_says_so(tmp_path, runner):
    # Every other block size changes the result, and the launch passes its options as **OPTIONS
    # (none can be added): no config can be right, so nothing is timed; the report must not
    # claim that timing needs a GPU.
    p = Project(tmp_path).write("k.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, eviction_policy="evict_last")  # no rewrite: it says
            tl.store(out_ptr + offs, x * BLOCK / 256, mask=offs < n)

        OPTIONS = {"num_warps": 4}

        def scale(x):
            out = torch.empty_like(x)
            scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256, **OPTIONS)
            return out

        def get_inputs():
            return [torch.randn(1000, device="cuda")]
    """)
    report = tune(CostModelRunner(runner, lambda case, text: 1.0), p.request("k.py::scale"), "sm_90",
                  max_configs=8, trials_per_case=1, timed=True)
    assert report.tried == 4 and not any(t.correct for t in report.trials)
    assert not report.improved and "0 of 4 configs verified correct" in report.message
    assert "needs a GPU" not in report.message and "mismatch" in report.message


def test_an_original_untimed_on_a_gpu_is_said_so_not_blamed_on_the_cpu():
    from agent.tune.tuner import _untimed_why
    from runner.schema import DeviceInfo, EvalResult
    gpu = DeviceInfo(name="NVIDIA H200", backend="cuda", arch="sm_90", torch="2", triton="3")
    r = EvalResult(status="ok", correct=True, message="", device=gpu,
                   timing_unavailable="the test's calls could not be replayed")
    assert _untimed_why(r) == ("the original itself could not be timed there "
                               "(the test's calls could not be replayed)")
    cpu = DeviceInfo(name="CPU (Triton interpreter)", backend="interpreter", arch=None, torch="2", triton="3")
    assert _untimed_why(EvalResult(status="ok", correct=True, message="", device=cpu)) == ""
    assert _untimed_why(None) == ""


def test_a_launch_inside_torch_cuda_device_is_tuned_under_the_interpreter(tmp_path, runner):
    """`with torch.cuda.device(x.device):` around a launch (30 of TritonBench-G's files, FlagGems'
    style) runs on a CPU build: the kernel launches and every config is verified. A test that
    raises before any kernel runs gives nothing to tune, and the tuner says so instead of
    rejecting every config for launching nothing."""
    p = Project(tmp_path)
    wrapped = ADD_RELU.split("INPUT_CASES")[0].replace(
        "    add_relu_kernel[", "    with torch.cuda.device(x.device):\n        add_relu_kernel[")
    assert "torch.cuda.device(x.device)" in wrapped
    test = """
def test_add_relu():
    x = torch.randn(700, device="cuda")
    return {"a": add_relu(x, torch.randn(700, device="cuda"))}
"""
    p.write("tb.py", wrapped + test)
    base = p.evaluate(runner, "tb.py::add_relu", trials=1, timing=False)
    assert base.correct and base.launches["reference"] == ["add_relu_kernel"], base.message
    report = tune(runner, p.request("tb.py::add_relu"), "sm_90", max_configs=4, trials_per_case=1, original=base)
    assert report.tried == 4 and all(t.correct for t in report.trials), [t.message for t in report.trials]
    p.write("tb2.py", wrapped.replace("    with torch.cuda.device(x.device):",
                                      "    raise RuntimeError('needs another GPU')\n    with torch.cuda.device(x.device):")
            + test)
    base = p.evaluate(runner, "tb2.py::add_relu", trials=1, timing=False, unit="tests")
    assert base.correct and not base.launches.get("reference")  # the original agrees with itself: it raises
    report = tune(runner, p.request("tb2.py::add_relu", unit="tests"), "sm_90", max_configs=4, trials_per_case=1, original=base)
    assert report.tried == 0 and "launched no Triton kernel" in report.message, report.message


def test_an_autotuned_kernel_with_computed_configs_gets_no_launch_options(tmp_path, runner):
    """Autotune configs built by a comprehension cannot be read, and the autotuner owns the launch
    options (Triton refuses a ``num_warps`` passed at its launch): only program rewrites are
    tried, and they pass."""
    p = Project(tmp_path)
    p.write("at.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128) for w in (2, 4)],
                         key=["n"])
        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

        def scale(x):
            out = torch.empty_like(x)
            scale_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
            return out

        def get_inputs():
            return [torch.randn(1000, device="cuda")]
    """)
    report = tune(runner, p.request("at.py::scale"), "sm_90", max_configs=8,
                  trials_per_case=1)
    assert any("only program rewrites" in n for n in report.notes), report.notes
    assert report.trials and all(set(t.config) <= {"eviction_policy"} for t in report.trials), report.trials
    assert all(t.correct for t in report.trials), [t.message for t in report.trials]


TRANSPOSE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def kernel(M, Out, matrix_stridex, matrix_stridey, out_stridex, out_stridey, SIZE_M: tl.constexpr,
           D_HEAD: tl.constexpr):
    size_m_arange = tl.arange(0, SIZE_M)
    d_head_arange = tl.arange(0, D_HEAD)
    matrix = tl.load(M + d_head_arange[None, :] * matrix_stridey + size_m_arange[:, None] * matrix_stridex)
    tl.store(Out + d_head_arange[None, :] * out_stridex + size_m_arange[:, None] * out_stridey, matrix)


@triton.jit
def rows_kernel(X, Y, N, n_rows, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < N * n_rows), mask=offs < N * n_rows)


def wrapper(size_m, d_head):
    matrix = torch.randn((size_m, d_head), dtype=torch.float16, device="cuda")
    out = torch.zeros((d_head, size_m), dtype=torch.float16, device="cuda")
    kernel[(1,)](matrix, out, *matrix.stride(), *out.stride(), size_m, d_head)
    return out


def rows(x, y):
    rows_kernel[(8,)](x, y, x.shape[1], x.shape[0], BLOCK=128)
'''


def test_an_autotune_key_holds_sizes_never_pointers():
    # TritonBench-G's matrix_transpose: pointers named M and Out, two strides specialised to
    # constexpr (equal to 1), so the types seen do not line up with the parameters by position.
    # Keyed on M, Triton's autotune ran its whole search again at every call (1,115 ms a call).
    from runner.schema import KernelResources
    from agent.tune.tuner import shape_key
    site = find_launch_sites(TRANSPOSE, "wrapper")[0]
    seen = KernelResources(kernel="kernel", arch="sm_90", num_warps=4, num_stages=3,
                           arg_types="*fp16, *fp16, i32, i32", arg_names="M, Out, matrix_stridex, out_stridex")
    assert shape_key(TRANSPOSE, site, [Trial(config={}, status="ok", correct=True, resources=[seen])]) == []
    unnamed = KernelResources(kernel="kernel", arch="sm_90", num_warps=4, num_stages=3,
                              arg_types="*fp16, *fp16, i32, i32")  # a result from a runner without names
    assert shape_key(TRANSPOSE, site, [Trial(config={}, status="ok", correct=True, resources=[unnamed])]) == []
    assert shape_key(TRANSPOSE, site, []) == []
    rows = find_launch_sites(TRANSPOSE, "rows")[0]
    assert shape_key(TRANSPOSE, rows, []) == ["N", "n_rows"]
    named = KernelResources(kernel="rows_kernel", arch="sm_90", num_warps=4, num_stages=3,
                            arg_types="*fp32, *fp32, i32", arg_names="X, Y, N")  # n_rows == 1: specialised
    assert shape_key(TRANSPOSE, rows, [Trial(config={}, status="ok", correct=True, resources=[named])]) == ["N", "n_rows"]
