"""Ahead-of-time compilation for GPUs that are not here (NVIDIA and AMD targets, on the CPU)."""

import pytest

from conftest import Project
from runner.aot import ARCHS, occupancy
from runner.schema import Tolerance


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_eval_reports_resources_of_launched_kernels(project, runner, arch):
    r = project.evaluate(runner, "ref.py::add_relu", aot_arch=arch)
    assert r.status == "ok", r.message
    assert {k.kernel for k in r.resources} == {"add_relu_kernel"}
    k = r.resources[0]
    assert k.arch == arch and k.constexprs == {"BLOCK": "256"} and k.arg_types == "*fp32, *fp32, *fp32, i32"
    assert k.fits and k.error is None
    assert 0 < k.registers < 64 and k.spill_bytes == 0 and k.occupancy_pct > 0
    assert k.num_warps == 4


def test_spills_are_reported(tmp_path, runner):
    # One warp holding an 8192-wide fp32 row: more values than registers.
    p = Project(tmp_path)
    p.write("sm.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def row_max_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(out_ptr + row * n + cols, e / tl.sum(e, axis=0), mask=cols < n)

        def softmax(x):
            out = torch.empty_like(x)
            row_max_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=8192, num_warps=1)
            return out

        def get_inputs():
            return [torch.randn(2, 8192, device="cuda")]
    """)
    r = p.evaluate(runner, "sm.py::softmax", aot_arch="sm_90", trials=1)
    assert r.status == "ok", r.message
    k = r.resources[0]
    assert k.num_warps == 1 and k.registers == 255 and k.spill_bytes > 0


def test_shared_memory_over_the_limit_does_not_fit(tmp_path, runner):
    # One 64x2048 by 2048x64 fp16 dot staged whole through shared memory: 512 KB, more than
    # any of the known GPUs has per block.
    p = Project(tmp_path)
    p.write("mm.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def mm_kernel(a, b, c, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
            rm = tl.arange(0, BM)
            rn = tl.arange(0, BN)
            rk = tl.arange(0, BK)
            x = tl.load(a + rm[:, None] * BK + rk[None, :])
            y = tl.load(b + rk[:, None] * BN + rn[None, :])
            tl.store(c + rm[:, None] * BN + rn[None, :], tl.dot(x, y).to(tl.float16))

        def mm(a, b):
            c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=torch.float16)
            mm_kernel[(1,)](a, b, c, BM=64, BN=64, BK=2048)
            return c

        def get_inputs():
            return [torch.randn(64, 2048, device="cuda", dtype=torch.float16),
                    torch.randn(2048, 64, device="cuda", dtype=torch.float16)]
    """)
    r = p.evaluate(runner, "mm.py::mm", aot_arch="sm_80", trials=1, interpreter_max_elements=1 << 18,
                   tolerance={"float16": Tolerance(atol=1e-1, rtol=1e-2)})
    assert r.status == "ok", r.message
    k = r.resources[0]
    assert k.constexprs == {"BM": "64", "BN": "64", "BK": "2048"}
    assert not k.fits and k.shared_bytes > ARCHS["sm_80"].smem_per_block
    assert "shared memory" in k.error and k.occupancy_pct == 0


def test_unknown_arch_is_a_clear_error(project, runner):
    r = project.evaluate(runner, "ref.py::add_relu", aot_arch="sm_100x")
    assert r.status == "rejected" and "unknown arch 'sm_100x'" in r.message and "gfx942" in r.error.hint


def test_occupancy_estimates():
    sm90, mi300 = ARCHS["sm_90"], ARCHS["gfx942"]
    assert occupancy(sm90, 32, 0, 4) == 100.0  # 64 warps resident
    assert occupancy(sm90, 128, 0, 4) == 25.0  # 128 regs x 32 lanes: 16 warps' worth per 64K
    assert occupancy(sm90, 32, 200 * 1024, 4) == 100.0 * 4 / 64  # one block fits in shared memory
    assert occupancy(mi300, 128, 0, 4) == 50.0  # 512/128 = 4 waves per SIMD of 8
    assert occupancy(mi300, 64, 32 * 1024, 8) == 50.0  # LDS: two workgroups of 8 waves


def test_no_torch_is_needed_to_read_the_arch_table():
    import subprocess
    import sys
    code = "import sys, runner.aot, runner.local; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
