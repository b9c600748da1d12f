"""GPU checks of the runner (CUDA or ROCm). Run on a GPU box: ``pytest -m gpu -n 0``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ADD_RELU, Project, flag_codes, kernel_variant

pytestmark = pytest.mark.gpu

# Large CUDA storages cross between the workers as device memory in every test here, whatever
# the default (runner.worker.devmem.ON_BY_DEFAULT); set before any worker or fork server starts.
os.environ.setdefault("GEAK_DEVICE_HANDOVER", "1")

BIG = ADD_RELU.replace("INPUT_CASES = [dict(n=300), dict(n=2048)]",
                       "INPUT_CASES = [dict(n=1 << 26), dict(n=1 << 16)]")


@pytest.fixture(scope="module")
def gpu_runner():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU here")
    from runner.serve.local import LocalRunner
    r = LocalRunner(workers=2, device="cuda")
    yield r
    r.close()


@pytest.fixture
def gproject(tmp_path) -> Project:
    return Project(tmp_path).write("ref.py", BIG)


def test_device_is_reported(gpu_runner):
    d = gpu_runner.device_info()
    assert d.backend in ("cuda", "rocm")
    assert d.arch and (d.arch.startswith("sm_") or d.arch.startswith("gfx"))


def test_timing_of_the_target_against_itself(gproject, gpu_runner):
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu")
    assert r.status == "ok", r.message
    assert r.timing is not None and r.timing.method == "cuda_graph+events"
    assert 0.9 < r.timing.speedup < 1.1
    big, small = r.cases
    # 768 MB moved: hundreds of microseconds, timed with events; 768 KB: a few, by graph replay.
    assert big.timing.method == "events" and small.timing.method == "cuda_graph"
    for c in r.cases:
        assert c.timing.reps >= 10 and c.timing.bytes_moved == 3 * 4 * (1 << 26 if c.index == 0 else 1 << 16)
    if gpu_runner.device_info().peak_bandwidth_gbs:
        assert 50 < big.timing.cand_bw_pct_peak < 100


def test_short_kernels_are_timed_by_cuda_graph(tmp_path, gpu_runner):
    p = Project(tmp_path).write("ref.py", ADD_RELU)  # n=300 and 2048: a few microseconds
    r = p.evaluate(gpu_runner, "ref.py::add_relu")
    assert r.status == "ok", r.message
    assert r.timing.method == "cuda_graph"
    assert r.timing.ref_ms < 0.02


def test_faster_candidate_is_measured_faster(gproject, gpu_runner):
    # The reference with a 32-element block launches 32x more programs than needed.
    gproject.write("slow.py", BIG.replace("BLOCK=256", "BLOCK=32").replace("cdiv(n, 256)", "cdiv(n, 32)"))
    gproject.write("fast.py", kernel_variant(block=1024))
    r = gproject.evaluate(gpu_runner, "slow.py::add_relu", "fast.py::add_relu", speedup_flag=1.2)
    assert r.status == "ok", r.message
    assert r.timing.speedup > 1.2
    assert "suspicious_speedup" in flag_codes(r, "warning")


def test_the_reference_timed_alone_is_reused_by_the_next_candidate(gproject, gpu_runner):
    # A candidate that looks faster has the reference timed alone, in its own process. The next
    # candidate against the same reference is given that figure again (it does not depend on
    # the candidate), not a second 50 ms of timing; a candidate that slows the reference down
    # beside it is still caught (test_attacks: the timer's tampering, on the GPU too).
    # A reference of its own (another test's figure for the same file would be reused here too).
    gproject.write("slow.py", BIG.replace("BLOCK=256", "BLOCK=32").replace("cdiv(n, 256)", "cdiv(n, 32)")
                   + "\n# timed alone once\n")
    gproject.write("fast.py", kernel_variant(block=1024))
    gproject.write("fast2.py", kernel_variant(block=512))
    first = gproject.evaluate(gpu_runner, "slow.py::add_relu", "fast.py::add_relu")
    second = gproject.evaluate(gpu_runner, "slow.py::add_relu", "fast2.py::add_relu")
    for r in (first, second):
        assert r.status == "ok" and r.timing.speedup > 1.2, r.message
    assert first.phases["time_alone"] > 0.02, first.phases
    # Where the timing's own time went, step by step (EvalResult.phases, "time.*").
    steps = {k: v for k, v in first.phases.items() if k.startswith("time.")}
    assert {"time.warmup", "time.measure", "time.wall_check"} <= set(steps), first.phases
    assert set(steps) <= {"time.prepare", "time.warmup", "time.calibrate", "time.probe", "time.measure",
                          "time.wall_check", "time.work"}, first.phases
    assert sum(steps.values()) <= first.phases["timing"], first.phases
    assert first.phases.get("time_alone.warmup", 0.0) > 0, first.phases
    assert second.phases.get("time_alone", 0.0) < first.phases["time_alone"] / 4, (first.phases, second.phases)


def test_side_stream_candidate_is_rejected(gproject, gpu_runner):
    gproject.write("cand.py", kernel_variant(block=1024, pre="    s = torch.cuda.Stream()\n    ctx = torch.cuda.stream(s)\n    ctx.__enter__()",
                                             post="    ctx.__exit__(None, None, None)"))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected"
    assert "side_stream" in flag_codes(r, "reject")


def test_stale_reference_output_exploit_is_caught(gproject, gpu_runner):
    # First show the exploit is real on this allocator: a freed output's block is handed to the
    # next torch.empty of the same size, still holding the right answer.
    probe = textwrap.dedent("""
        import torch
        x = torch.randn(1 << 20, device="cuda")
        out = torch.relu(x)
        expected = out.clone()
        del out
        again = torch.empty_like(x)
        print(int(torch.equal(again, expected)))
    """)
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "1", p.stderr
    # A candidate that launches a kernel which writes nothing would pass without poisoning.
    gproject.write("cand.py", kernel_variant(store_mask="offs < 0"))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch", r.message
    assert r.cases[0].trials == 1 and "elements outside" in r.cases[0].detail


def test_illegal_memory_access_crashes_only_the_worker(gproject, gpu_runner):
    gproject.write("cand.py", kernel_variant(value="tl.maximum(x + y, 0.0)",
                                             store_mask="mask").replace(
        "tl.store(out_ptr + offs,", "tl.store(out_ptr + offs + (1 << 40),"))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "crashed", r.message
    assert r.error.kind in ("illegal_memory_access", "segfault", "worker_died")
    ok = gproject.evaluate(gpu_runner, "ref.py::add_relu")
    assert ok.status == "ok", ok.message


def test_event_timer_tampering_on_gpu(gproject, gpu_runner):
    gproject.write("cand.py", kernel_variant(block=1024, extra="""
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
    """))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "rejected" and "tampering" in flag_codes(r, "reject")
    assert r.timing is None


def test_tuner_finds_and_confirms_a_better_launch(gproject, gpu_runner):
    # A 32-element block with one warp on 64M elements: plainly mistuned for any GPU.
    from agent.tune.tuner import tune
    # 16M elements, one case: every config is checked and timed on it in a few seconds.
    gproject.write("slow.py", BIG.replace("BLOCK=256)", "BLOCK=32, num_warps=1)").replace("cdiv(n, 256)", "cdiv(n, 32)")
                   .replace("INPUT_CASES = [dict(n=1 << 26), dict(n=1 << 16)]", "INPUT_CASES = [dict(n=1 << 24)]"))
    req = gproject.request("slow.py::add_relu")
    arch = gpu_runner.device_info().arch
    report = tune(gpu_runner, req, arch, max_configs=12, trials_per_case=2, timed=True)
    assert report.improved, report.message
    assert report.best_speedup > 1.2
    conf = report.confirmation
    assert conf.status == "ok" and conf.correct and conf.timing.speedup == report.best_speedup
    assert "BLOCK=%d" % report.best["BLOCK"] in report.source
    # The autotune form: the kernel decides per shape, and the edit is confirmed the same way.
    report = tune(gpu_runner, req, arch, max_configs=12, trials_per_case=2, timed=True, emit="autotune")
    assert report.improved and "@triton.autotune(" in report.source and report.autotune_key == ["n"]


def test_compiles_leave_the_device_lock_and_a_screened_config_is_a_cache_hit(tmp_path, gpu_runner):
    """A Triton compile inside the run phase is reported as its own phase (the pool lets go of
    the device lock meanwhile), and a config compiled ahead of time for this GPU by the tuner's
    screen is found by the JIT in its cache: evaluating it compiles almost nothing."""
    import uuid
    from conftest import ROOT
    # A comment in the kernel's body makes its compile-cache key new to this machine.
    text = (ROOT / "examples" / "matmul.py").read_text().replace(
        "    pid_m = tl.program_id(axis=0)\n", f"    pid_m = tl.program_id(axis=0)  # {uuid.uuid4().hex}\n")
    p = Project(tmp_path).write("mm.py", text)

    def variant(bm, bn, bk, warps, stages):
        return text.replace("BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2",
                            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, num_warps={warps}, num_stages={stages}")

    p.write("cold.py", variant(128, 128, 32, 4, 4))
    cold = p.evaluate(gpu_runner, "mm.py::matmul", "cold.py::matmul", cases=[2], trials=1)
    assert cold.status == "ok" and cold.correct, cold.message
    assert cold.phases.get("compile", 0.0) > 0.2 and cold.phases.get("run", 0.0) > 0.0, cold.phases
    arch = gpu_runner.device_info().arch
    screen = p.evaluate(gpu_runner, "mm.py::matmul", cases=[2], trials=1, timing=False, aot_arch=arch,
                        aot_kernel="matmul_kernel",
                        aot_configs=[dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, num_warps=8, num_stages=3)])
    (res,) = [r for r in screen.resources if r.variant == 0]
    assert res.fits and res.registers, res
    p.write("warm.py", variant(128, 64, 64, 8, 3))
    warm = p.evaluate(gpu_runner, "mm.py::matmul", "warm.py::matmul", cases=[2], trials=1)
    assert warm.status == "ok" and warm.correct, warm.message
    assert warm.phases.get("compile", 0.0) < cold.phases["compile"] / 3, (warm.phases, cold.phases)


# ----------------------------------------------------------------------------- real-world shapes and attacks


def test_store_past_the_end_and_gradients_on_gpu(tmp_path, gpu_runner):
    from test_verdicts import SCALE
    # A length that is not a multiple of the block: the last program's store reaches one past
    # the end (on a multiple of the block, `offs <= n` never does, and the kernel is right).
    p = Project(tmp_path).write("ref.py", ADD_RELU.replace("INPUT_CASES = [dict(n=300), dict(n=2048)]",
                                                           "INPUT_CASES = [dict(n=(1 << 16) + 3)]"))
    p.write("oob.py", kernel_variant(store_mask="offs <= n"))
    r = p.evaluate(gpu_runner, "ref.py::add_relu", "oob.py::add_relu", trials=1)
    assert r.status == "mismatch" and "writes outside its tensors" in r.cases[0].detail, r.message
    p.write("scale.py", SCALE.format(backward_factor="2.0"))
    p.write("scale_bad.py", SCALE.format(backward_factor="3.0"))
    assert p.evaluate(gpu_runner, "scale.py::scale", timing=False).status == "ok"
    r = p.evaluate(gpu_runner, "scale.py::scale", "scale_bad.py::scale", timing=False)
    assert r.status == "mismatch" and r.cases[0].detail.startswith("gradient of 'x'"), r.message


def test_a_tritonbench_style_test_is_timed_call_by_call(tmp_path, gpu_runner):
    from test_verdicts import TWO_FUNCTIONS
    p = Project(tmp_path)
    p.write("task.py", TWO_FUNCTIONS.format(grad="2.0 * x * g").replace("500", "1 << 22"))
    r = p.evaluate(gpu_runner, "task.py::square_forward")
    assert r.status == "ok" and r.correct and r.timing is not None, r.message
    assert r.inputs_convention == "tests" and r.cases[0].timing.reps > 0


CONFIG_TASK = '''
import threading

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


class Config:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@torch.no_grad()
def scale(x, config, dtypes=tl.float16, lock=None):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), config.kwargs["BLOCK"]),)](x, out, x.numel(), BLOCK=config.kwargs["BLOCK"])
    return out


''' + "#" * 146 + '''


def test_scale():
    x = torch.randn(1 << 20, device="cuda")
    return {"y": scale(x, Config(BLOCK=1024), dtypes=tl.float8e5{lock})}


result_gold = test_scale()
'''


def test_a_decorated_wrapper_taking_a_config_object_and_a_triton_dtype_is_timed(tmp_path, gpu_runner):
    # TritonBench-G: 23 files wrap their launch in @torch.no_grad(); int_scaled_matmul passes a
    # Config object, f8_conversion_utils a tl.float8e5. None of them was timed.
    p = Project(tmp_path)
    p.write("task.py", CONFIG_TASK.replace("{lock}", ""))
    r = p.evaluate(gpu_runner, "task.py::scale")
    assert r.status == "ok" and r.correct and r.timing is not None, (r.message, r.timing_unavailable)
    assert r.cases[0].timing.reps > 0
    # What cannot cross to the timing process is named, not a bare "no case was timed".
    p.write("locked.py", CONFIG_TASK.replace("{lock}", ", lock=threading.Lock()"))
    r = p.evaluate(gpu_runner, "locked.py::scale")
    assert r.correct and r.timing is None and "scale() takes a _thread.lock" in r.timing_unavailable, \
        r.timing_unavailable


def test_escaped_processes_die_on_gpu_too(gproject, gpu_runner):
    from test_sandbox import alive_with
    gproject.write("cand.py", kernel_variant(extra='''
        import os, subprocess
        _done = []
        def _escape():
            if not _done:
                _done.append(1)
                subprocess.Popen(["sleep", "979"], start_new_session=True)
    ''', pre="    _escape()"))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu", trials=1, cases=[1])
    assert r.status == "rejected" and "background_process" in flag_codes(r, "reject"), r.message
    import time
    deadline = time.monotonic() + 5
    while alive_with("sleep 979") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive_with("sleep 979")
    assert r.sandbox["network"].startswith("isolated") and r.sandbox["capabilities"] == "none"


def test_a_candidate_graph_capture_cannot_hold_is_timed_by_events_and_not_called_wrong(tmp_path, gpu_runner):
    """A call that syncs the host (as Triton's autotuner does when it benchmarks inside the
    captured call) makes the CUDA-graph capture fail; that must leave later torch.randn on the
    GPU working, or the check after timing calls a correct candidate wrong."""
    syncs = ADD_RELU.replace("    return out\n", "    torch.cuda.synchronize()\n    return out\n", 1)
    p = Project(tmp_path).write("ref.py", ADD_RELU).write("cand.py", syncs)
    r = p.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "ok" and r.correct, r.message
    assert r.timing is not None and "events" in r.timing.method


def test_launches_from_an_autograd_function_alias_and_a_module_forward_are_timed(tmp_path, gpu_runner):
    # TritonBench-G's triton_attention (``attention = _attention.apply``) and rmsnorm_fused (an
    # nn.Module's forward) were "not timed: no case was timed", with no reason given.
    from test_verdicts import CLASS_LAUNCHES
    p = Project(tmp_path)
    p.write("task.py", CLASS_LAUNCHES.format(fn_scale="2.0", module_scale="3.0"))
    r = p.evaluate(gpu_runner, "task.py::scale")
    assert r.status == "ok" and r.correct and r.timing is not None, (r.message, r.timing_unavailable)
    assert r.cases[0].timing.reps > 0 and "scale(" in r.cases[0].shapes
    # A test that launches its kernels itself leaves nothing to time, and says so.
    own = CLASS_LAUNCHES.format(fn_scale="2.0", module_scale="3.0").replace(
        "    a = scale(x)\n    b = Scaler(300)(x)\n",
        "    a = torch.empty_like(x)\n    scale_kernel[(3,)](x, a, 300, 2.0, BLOCK=128)\n    b = a\n")
    p.write("own.py", own)
    r = p.evaluate(gpu_runner, "own.py::scale")
    assert r.correct and r.timing is None and "the test calls none of the file's own functions" in \
        (r.timing_unavailable or ""), r.timing_unavailable


def test_a_record_leaves_the_device_with_its_layout_sharing_and_device():
    # exchange.save copies large device storages into host memory written first (faster than
    # torch.save's storage.cpu()), tagged with the device they came from: the reader finds the
    # same values, strides, views of one storage as views of one storage, on the same device.
    import torch

    from runner.worker import channel
    from runner.worker.exchange import OFF_DEVICE_MIN_BYTES, load, save
    base = torch.randn(1024, 1024, device="cuda")  # 4 MB: over OFF_DEVICE_MIN_BYTES
    assert base.untyped_storage().nbytes() >= OFF_DEVICE_MIN_BYTES
    small = torch.arange(10, device="cuda")
    rec = {"t": base.t(), "row": [base[3, 100:200]], "small": small, "n": 3}
    save("r.pt", rec)
    channel.loop_back()
    try:
        got = load("r.pt")
        assert got["t"].device.type == "cuda" and got["row"][0].device.type == "cuda"
        assert torch.equal(got["t"], base.t()) and got["t"].stride() == (1, 1024)
        assert torch.equal(got["row"][0], base[3, 100:200]) and torch.equal(got["small"], small)
        assert got["t"].untyped_storage().data_ptr() == got["row"][0].untyped_storage().data_ptr()
        assert got["n"] == 3
    finally:
        channel.forget_received()


def test_a_large_record_crosses_as_device_memory_mapped_read_only_and_copied_at_once():
    # A storage of DEVICE_PART_MIN_BYTES or more crosses as GPU memory (runner.worker.devmem):
    # the sealed memfd holds only the structure; the part is an allocation of its own, exported
    # by the driver, which the pool passes on as a device part. The reader gets the same values,
    # layout and sharing in memory of its own: a later change on the writer's side reaches
    # neither the reader's copy nor what was handed.
    import os

    import torch

    from runner.judge.process import _device_part, sealed
    from runner.worker import channel, devmem
    from runner.worker.exchange import DEVICE_PART_MIN_BYTES, load, save
    assert devmem.available("cuda")
    base = torch.randn(2048, 2048, device="cuda")  # 16 MB
    assert base.untyped_storage().nbytes() >= DEVICE_PART_MIN_BYTES
    rec = {"t": base.t(), "row": [base[3, 100:200]], "n": 3}
    save("r.pt", rec)
    assert sorted(channel._outbox) == ["r.pt", "r.pt.dev0"]
    assert sealed(channel._outbox["r.pt"]) and os.fstat(channel._outbox["r.pt"]).st_size < 64 * 1024
    assert _device_part("r.pt.dev0", channel._outbox["r.pt.dev0"])
    channel.loop_back()
    try:
        got = load("r.pt")
        assert got["t"].device.type == "cuda" and got["t"].stride() == (1, 2048)
        assert torch.equal(got["t"], base.t()) and torch.equal(got["row"][0], base[3, 100:200])
        assert got["t"].untyped_storage().data_ptr() == got["row"][0].untyped_storage().data_ptr()
        assert got["t"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
        before = got["t"].clone()
        base.add_(1.0)
        assert torch.equal(got["t"], before)
    finally:
        channel.forget_received()


def test_a_kept_draw_is_exported_afresh_for_each_reader():
    # The reference hands the same draw to every candidate. A reader can map what it is handed
    # writable (the driver cannot forbid that), so each hand-over exports a fresh allocation from
    # the reference's private copy: a candidate that wrote into its part reaches no later one.
    import ctypes

    import torch

    from runner.worker import channel, devmem
    from runner.worker.exchange import hand_again, load, save
    x = torch.randn(4 << 20, device="cuda")  # 16 MB
    x0 = x.clone()
    kept = save("in-0-0.pt", {"args": [x]}, keep=True)
    assert kept.device_bytes == x.untyped_storage().nbytes()
    channel.loop_back()
    try:
        first = load("in-0-0.pt")["args"][0]
        # A writer of its own: map the handed allocation writable and change it.
        fd = channel.received("in-0-0.pt.dev0")
        h = ctypes.c_ulonglong()
        devmem._ok("import", devmem._driver().cuMemImportFromShareableHandle(
            ctypes.byref(h), ctypes.c_void_p(fd), devmem._POSIX_FD))
        size = devmem._granularity(0) * -(-x.untyped_storage().nbytes() // devmem._granularity(0))
        ptr = devmem._map(h.value, size, 0, devmem._READ_WRITE)
        devmem._bytes_at(ptr, 16, torch.device("cuda", 0)).fill_(7)
        torch.cuda.synchronize()
        devmem._unmap(ptr, size)
        devmem._driver().cuMemRelease(h)
        x.add_(1.0)  # and the reference's own tensor changes after the hand-over
        hand_again("in-0-1.pt", kept)
        channel.loop_back()
        second = load("in-0-1.pt")["args"][0]
        assert torch.equal(first, x0) and torch.equal(second, x0)
    finally:
        kept.close()
        channel.forget_received()


def test_a_one_element_error_in_a_256_mb_output_that_crossed_as_device_memory_is_caught(gproject, gpu_runner):
    # Inputs (two 256 MB tensors) and the output cross as device memory both ways; the judge
    # compares the copy it took, and one wrong element of 2^26 is found.
    gproject.write("cand.py", kernel_variant(value="tl.where(offs == n - 1, 1.5, tl.maximum(x + y, 0.0))"))
    r = gproject.evaluate(gpu_runner, "ref.py::add_relu", "cand.py::add_relu")
    assert r.status == "mismatch" and not r.correct, r.message
    assert "output[67108863]" in r.cases[0].detail, r.cases[0].detail
