"""The tuner on the CPU: knob discovery, edits, search space, verification of every config."""

import subprocess
import sys
import textwrap

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
    assert any("BLOCK is computed" in n for n in site.notes)


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
    assert {c["num_stages"] for c in search_space(mm, "hip", uses_dot=True)} == {1, 2}
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
    p.write("rowsum.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            tl.store(out_ptr + row, tl.sum(x, axis=0))

        def rowsum(x):
            out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
            rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=256, num_warps=4)
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


def test_heuristics_kernel_keeps_its_computed_block(tmp_path, runner):
    (site,) = find_launch_sites(AUTOTUNED, "copy")
    assert [k.name for k in site.knobs] == ["num_warps"]  # BLOCK comes from the heuristic
    p = Project(tmp_path).write("at.py", AUTOTUNED)
    report = tune(runner, p.request("at.py::copy"), "sm_90", max_configs=3, trials_per_case=1)
    assert report.tried == 3 and all(t.correct for t in report.trials)


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
