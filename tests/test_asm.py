"""What the compiler made of a kernel (``geak asm``, ``agent.asm``) and why a candidate is faster
in compiled terms (``geak eval --candidate --arch``): listings compiled on the CPU, for GPUs that
are not here, from the launches each target really makes."""

import ast
import json
import subprocess
import sys

import pytest

from agent import asm
from agent.render import render_compiled_diff
from conftest import ROOT
from runner.serve.local import LocalRunner
from runner.schema import EvalOptions, KernelResources
from runner.source import build_request

PAIR = ROOT / "tests" / "compiled_pair"

# Every task of the suite: elementwise, broadcast, row and column reductions, an atomic, a scan,
# norms with two outputs, a gather, quantisation, softmax, a transpose and the tasks built on
# tl.dot (scripts/asm_sweep.py does the same over any folder, TritonBench-G's included).
SUITE = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
# What each tl op must compile to on its own source line. tl.load: a global load (AMD: through
# the vector memory, or s_load through the scalar unit where the address is the same for the
# whole wavefront, as embedding's token id) or an asynchronous copy into shared memory
# (cp.async, LDGSTS, TMA), which is how a load in a pipelined loop is made. tl.store: a global store. tl.dot: tensor-core
# instructions, or an FMA chain (fp32 with input_precision="ieee"); in sm_90 SASS, ptxas gives the
# HGMMA instructions the line of the loop around the dot, and the dot's own line holds the
# warpgroup fence and wait (WARPGROUP.ARRIVE / DEPBAR) that issue them.
RULE = {"load": {"global_load", "uniform_load", "async_copy"}, "store": {"global_store"},
        "dot": {"tensor_core", "fma", "warpgroup"}}


@pytest.fixture(scope="module")
def warm_runner():
    r = LocalRunner(workers=1, device="interpreter")
    yield r
    r.close()


def tl_ops(text: str) -> dict[int, set[str]]:
    """Lines holding a ``tl.load`` / ``tl.store`` / ``tl.dot`` call, by the call's first line."""
    out: dict[int, set[str]] = {}
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in RULE and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl"):
            out.setdefault(node.lineno, set()).add(node.func.attr)
    return out


def listed(runner, spec: str, arch: str, stage: str = "default", **options):
    path = spec.split("::")[0]
    opts = EvalOptions(trials=1, timing=False, aot_arch=arch, aot_stage=stage, **options)
    req, _, _ = build_request(spec, None, opts, root=ROOT)
    res = runner.evaluate(req)
    assert res.status == "ok", res.message
    return req, res, path


@pytest.mark.parametrize("arch,stage", [("sm_90", "sass"), ("gfx942", "amdgcn")])
@pytest.mark.parametrize("task", SUITE)
def test_every_load_store_and_dot_line_has_its_instructions(warm_runner, task, arch, stage):
    req, res, rel = listed(warm_runner, f"benchmarks/{task}.py::{task}", arch, cases=[0])
    assert res.resources, "no kernel compiled"
    kinds: dict[int, set[str]] = {}
    for k in res.resources:
        assert k.error is None and k.listing_stage == stage and k.listing, (k.kernel, k.error)
        doc = asm.kernel_doc(k, req.files)
        assert doc["source_files"] == [rel] and doc["summary"]["instructions"] > 10
        for line in doc["lines"]:
            if line["file"] == rel:
                kinds.setdefault(line["line"], set()).update(x for x in asm.KINDS if asm.count(line["summary"], x))
    ops = tl_ops(req.files[rel])
    assert ops
    missing = [(n, op, sorted(kinds.get(n, ()))) for n, want in ops.items() for op in want
               if not RULE[op] & kinds.get(n, set())]
    assert not missing, missing


def test_the_dot_of_an_fp16_matmul_runs_on_tensor_cores(warm_runner):
    # Across the kernel: wgmma on sm_90 (PTX names it on the dot's line), mfma on gfx942.
    for arch, stage, op in [("sm_90", "ptx", "wgmma.mma_async"), ("sm_90", "sass", "HGMMA"),
                            ("gfx942", "amdgcn", "v_mfma")]:
        req, res, rel = listed(warm_runner, "benchmarks/matmul_bias_relu.py::matmul_bias_relu", arch, stage,
                               cases=[0])
        doc = asm.kernel_doc(res.resources[0], req.files)
        assert doc["summary"]["tensor_core"] > 0, (arch, stage)
        if stage == "ptx":
            dot = next(n for n, o in tl_ops(req.files[rel]).items() if "dot" in o)
            line = next(x for x in doc["lines"] if x["file"] == rel and x["line"] == dot)
            assert any(i.startswith(op) for i in line["instructions"])
        else:
            assert any(i.split()[0].startswith(op) for x in doc["lines"] for i in x["instructions"])


@pytest.mark.parametrize("stage", ["ttir", "ttgir", "llir", "ptx", "sass"])
def test_every_stage_is_read_by_source_line(warm_runner, stage):
    req, res, rel = listed(warm_runner, "tests/compiled_pair/scale_vec.py::scale", "sm_90", stage)
    doc = asm.kernel_doc(res.resources[0], req.files)
    load = next(n for n, o in tl_ops(req.files[rel]).items() if "load" in o)
    store = next(n for n, o in tl_ops(req.files[rel]).items() if "store" in o)
    by = {x["line"]: x for x in doc["lines"] if x["file"] == rel}
    assert asm.count(by[load]["summary"], "global_load") >= 1
    assert asm.count(by[store]["summary"], "global_store") >= 1
    if stage in ("ptx", "sass"):  # 4 floats a thread: one 128-bit load and store
        assert by[load]["summary"]["global_load"]["bits"] == {"128": 1}
        assert by[store]["summary"]["global_store"]["bits"] == {"128": 1}


def test_a_listing_is_cut_with_a_mark():
    from runner.aot import bounded
    text = "".join(f"line {i}\n" for i in range(1000))
    cut = bounded(text, 100)
    assert len(cut) < 200 and cut.startswith("line 0\n") and "# [listing cut:" in cut
    assert cut.splitlines()[-1] == f"# [listing cut: {len(text) - cut.index('#')} more characters]"
    assert bounded(text) == text


def test_listings_of_one_reply_share_a_budget():
    from runner.aot import share_listings
    reports = [{"listing": "x\n" * 100}, KernelResources(kernel="k", arch="sm_90", num_warps=4, num_stages=3,
                                                          listing="y\n" * 100), {"listing": None}]
    share_listings(reports, total=250)
    assert reports[0]["listing"] == "x\n" * 100
    assert reports[1].listing.startswith("y\n" * 24) and "# [listing cut: 150 more characters]" in reports[1].listing
    assert reports[2]["listing"] is None


def test_widths_and_kinds_of_single_instructions():
    assert asm.kinds("@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ]", "ptx") == {"global_load": 128}
    assert asm.kinds("ld.global.b16 { %rs1 }, [ %rd1 + 0 ]", "ptx") == {"global_load": 16}
    assert asm.kinds("@!P0 LDG.E.128 R16, desc[UR4][R2.64]", "sass") == {"global_load": 128}
    assert asm.kinds("STG.E desc[UR4][R2.64], R5", "sass") == {"global_store": 32}
    assert asm.kinds("STL.64 [R1+0x8], R4", "sass") == {"spill_store": 64}
    assert asm.kinds("global_load_dwordx2 v[0:1], v[2:3], off", "amdgcn") == {"global_load": 64}
    assert asm.kinds("scratch_store_dword off, v3, s32", "amdgcn") == {"spill_store": 32}
    assert asm.kinds("v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]", "amdgcn") == {"tensor_core": 1}
    assert asm.kinds("IMAD.WIDE R2, R0, 0x4, R2", "sass") == {}
    assert asm.kinds("s_load_dwordx2 s[2:3], s[0:1], 0x0", "amdgcn") == {"uniform_load": 1}
    assert asm.kinds("mad.lo.s32 %r5, %r1, %r2, %r3", "ptx") == {}


def test_code_triton_inlines_from_its_library_goes_under_the_calling_line(warm_runner):
    # row_sum's tl.sum: in PTX and AMDGCN under the kernel's line (their .loc comments name the
    # call chain); SASS names the library's own line (standard.py).
    for arch, stage, under_caller in [("sm_90", "ptx", True), ("gfx942", "amdgcn", True), ("sm_90", "sass", False)]:
        req, res, rel = listed(warm_runner, "benchmarks/row_sum.py::row_sum", arch, stage, cases=[0])
        doc = asm.kernel_doc(res.resources[0], req.files)
        line = next(x for x in doc["lines"] if x["source"] and x["source"].startswith("tl.store(out_ptr + row, tl.sum"))
        library = [x for x in doc["lines"] if x["file"] and x["file"].endswith("triton/language/standard.py")
                   and x["line"]]
        assert doc["lines"][0]["file"] == rel  # the project's lines first
        if under_caller:
            assert asm.count(line["summary"], "barrier") > 0 and not library, (arch, stage)
        else:
            assert asm.count(line["summary"], "barrier") == 0 and library
            assert sum(asm.count(x["summary"], "barrier") for x in library) > 0


# --------------------------------------------------------------------------- the CLI


def geak(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_geak_asm_prints_instructions_under_their_source_lines():
    p = geak("asm", "tests/compiled_pair/scale.py::scale")
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0].startswith("== scale_kernel  sm_90 sass  num_warps=4") and "BLOCK=128" in out[0]
    at = out.index("# tests/compiled_pair/scale.py:12  x = tl.load(x_ptr + offs, mask=mask)")
    block = []
    for line in out[at + 1:]:
        if line.startswith("#"):
            break
        block.append(line)
    assert block and all(x.startswith("    ") for x in block)
    # one float a thread: a 32-bit load, and no wider one anywhere
    loads = [x for x in out if "LDG" in x]
    assert loads and all("LDG.E " in x and ".128" not in x for x in loads)


def test_geak_asm_json_for_gfx942():
    p = geak("asm", "tests/compiled_pair/scale_vec.py::scale", "--arch", "gfx942", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["arch"] == "gfx942" and doc["stage"] == "amdgcn" and doc["status"] == "ok"
    (k,) = doc["kernels"]
    assert k["kernel"] == "scale_kernel" and k["constexprs"] == {"BLOCK": "512"} and not k["cut"]
    assert k["source_files"] == ["tests/compiled_pair/scale_vec.py"]
    load = next(x for x in k["lines"] if x["source"] and x["source"].startswith("x = tl.load"))
    assert load["line"] == 13 and load["file"] == "tests/compiled_pair/scale_vec.py"
    assert any(i.startswith("global_load_dwordx") for i in load["instructions"])
    total = sum(x["summary"]["instructions"] for x in k["lines"])
    assert total == k["summary"]["instructions"]


def test_geak_asm_refuses_a_stage_of_the_other_vendor():
    p = geak("asm", "tests/compiled_pair/scale.py::scale", "--arch", "gfx942", "--stage", "sass")
    assert p.returncode == 2 and "no compile stage 'sass' for gfx942: one of ttir, ttgir, llir, amdgcn" in p.stderr
    assert not p.stdout


# --------------------------------------------------------------------------- the compiled difference


def test_eval_shows_the_candidate_vectorizes_its_loads():
    p = geak("eval", "tests/compiled_pair/scale.py::scale", "--candidate", "tests/compiled_pair/scale_vec.py::scale",
             "--arch", "sm_90")
    assert p.returncode == 0, p.stderr
    text = p.stdout[p.stdout.index("compiled difference on sm_90 (sass)"):]
    rows = {r.strip().split("  ")[0]: r.split() for r in text.splitlines()[2:]}
    assert "BLOCK=128, warps=4, stages=3 -> BLOCK=512, warps=4, stages=3" in text.splitlines()[1]
    assert rows["global loads, vector"][-4:] == ["0", "->", "1", "changed"]
    assert rows["global loads, scalar"][-4:] == ["1", "->", "0", "changed"]
    assert rows["global stores, vector"][-4:] == ["0", "->", "1", "changed"]


def test_the_compiled_difference_shows_spills_removed(warm_runner):
    _, orig, _ = listed(warm_runner, "tests/compiled_pair/rowsoftmax.py::softmax", "sm_90")
    _, cand, _ = listed(warm_runner, "tests/compiled_pair/rowsoftmax_warps.py::softmax", "sm_90")
    o, c = orig.resources[0], cand.resources[0]
    assert o.spill_bytes > 0 and c.spill_bytes == 0
    to, tc = asm.compiled_terms(o), asm.compiled_terms(c)
    assert to["spill_load"] > 0 and to["spill_store"] > 0 and tc["spill_load"] == tc["spill_store"] == 0
    text = render_compiled_diff(orig.resources, cand.resources)
    assert "warps=1" in text and "warps=8" in text
    row = next(r for r in text.splitlines() if r.strip().startswith("spills (bytes)")).split()
    assert row[2:] == [str(o.spill_bytes), "->", "0", "changed"]
    assert any(r.strip().startswith("spill stores") and r.split()[-2] == "0" for r in text.splitlines())


def test_pairs_follow_kernel_names_then_order():
    def r(name):
        return KernelResources(kernel=name, arch="sm_90", num_warps=4, num_stages=3)
    got = asm.pairs([r("a"), r("b")], [r("b2"), r("a")])
    assert [(x.kernel, y.kernel) for x, y in got] == [("a", "a"), ("b", "b2")]
    got = asm.pairs([r("a")], [r("a"), r("c")])
    assert [(x and x.kernel, y and y.kernel) for x, y in got] == [("a", "a"), (None, "c")]


def test_nothing_compiles_for_a_wrong_stage_name(warm_runner):
    opts = EvalOptions(trials=1, timing=False, aot_arch="sm_90", aot_stage="hsaco")
    req, _, _ = build_request("tests/compiled_pair/scale.py::scale", None, opts, root=ROOT)
    res = warm_runner.evaluate(req)
    assert res.status == "rejected" and "no compile stage 'hsaco'" in res.message


def test_geak_asm_on_a_target_that_launches_no_triton_kernel(tmp_path):
    from conftest import Project
    Project(tmp_path).write("plain.py", """
        import torch

        def double(x):
            return x * 2

        def get_inputs():
            return [torch.randn(64, device="cuda")]
    """)
    p = geak("asm", "plain.py::double", cwd=tmp_path)
    assert p.returncode == 1 and "nothing to show: the target launched no Triton kernel" in p.stderr
    assert not p.stdout


def test_a_report_without_a_listing_says_so():
    from agent.render import render_listing
    k = KernelResources(kernel="k", arch="sm_90", num_warps=4, num_stages=3, registers=20, spill_bytes=0,
                        shared_bytes=0, occupancy_pct=100.0)
    text = render_listing([k], {})
    assert text.splitlines()[0].startswith("== k  sm_90") and "no listing came back" in text


def test_the_compiled_difference_shows_each_different_compile_once():
    """Launches that compile to the same figures are one entry; two that share a config but not
    their figures are told apart (here by their argument types)."""
    def res(types, regs):
        return KernelResources(kernel="k", arch="sm_90", num_warps=4, num_stages=3, constexprs={"BLOCK": "256"},
                               arg_types=types, registers=regs, spill_bytes=0, shared_bytes=0)
    d = asm.compiled_difference([res("*fp32, i32", 16), res("*fp32, i32", 16), res("*fp16, i32", 20)],
                                [res("*fp32, i32", 18), res("*fp32, i32", 18), res("*fp16, i32", 20)])
    assert [k["config"] for k in d["kernels"]] == ["BLOCK=256, warps=4, stages=3; *fp32, i32",
                                                   "BLOCK=256, warps=4, stages=3; *fp16, i32"]
    assert d["kernels"][0]["rows"][0] == ["registers", "16", "18", True]
    same = asm.compiled_difference([res("*fp32, i32", 16), res("*fp32, i32", 12)], [res("*fp32, i32", 16)] * 2)
    assert [k["config"].split("; ")[1] for k in same["kernels"]] == ["launch 1 of 2, specialised differently",
                                                                    "launch 2 of 2, specialised differently"]


def test_a_dtype_constexpr_reaches_the_compiler(warm_runner):
    """Under the interpreter the compile runs in the pool's compile worker: a constexpr that is a
    Triton dtype crosses to it (it was "a constexpr value cannot be passed to the compiler process")."""
    req, res, rel = listed(warm_runner, "tests/compiled_pair/cast_to.py::cast_to", "sm_90")
    k = res.resources[0]
    assert k.error is None and k.constexprs["OUT_DTYPE"].endswith("float16") and k.listing, k.error
    lines = asm.kernel_doc(k, req.files)["lines"]
    store = next(x for x in lines if x["source"] and x["source"].startswith("tl.store("))
    assert asm.count(store["summary"], "global_store") > 0
