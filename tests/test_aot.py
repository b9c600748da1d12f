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
    code = "import sys, runner.aot, runner.serve.local; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_launches_are_specialised_as_the_jit_compiles_them(tmp_path, runner):
    # Triton's JIT compiles an integer argument equal to 1 in as a constant (a unit stride makes
    # loads contiguous) and marks 16-divisible integers; do_not_specialize turns both off. The
    # report must describe that code, not a generic one.
    p = Project(tmp_path)
    p.write("cp.py", """
        import torch
        import triton
        import triton.language as tl

        @triton.jit(do_not_specialize=["m"])
        def copy_kernel(x_ptr, out_ptr, stride, n, m, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs * stride, mask=offs < n)
            tl.store(out_ptr + offs, x + m, mask=offs < n)

        def copy(x):
            out = torch.empty_like(x)
            copy_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.stride(0), x.numel(), 1, BLOCK=128)
            return out

        def get_inputs():
            return [torch.randn(256, device="cuda")]
    """)
    r = p.evaluate(runner, "cp.py::copy", aot_arch="sm_90")
    assert r.status == "ok", r.message
    (k,) = r.resources
    # stride == 1 is a constant; m == 1 too, but m is do_not_specialize: a plain i32
    assert k.constexprs == {"stride": "1", "BLOCK": "128"}, k.constexprs
    assert k.arg_types == "*fp32, *fp32, i32, i32", k.arg_types


def test_the_aot_compile_is_the_jits_cache_entry():
    """On a GPU of the target arch, the JIT must find the ahead-of-time compile in its cache
    (so screening configs before running them costs no second compile): same source hash, same
    options, same key. Checked here with the JIT's own binder, without a GPU."""
    import importlib.util

    import torch
    from triton.compiler import make_backend
    from triton.compiler.compiler import get_cache_key
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime.jit import create_function_from_signature

    from conftest import ROOT
    from runner.aot import describe_launch, source_for, with_config

    spec = importlib.util.spec_from_file_location("mm_example", ROOT / "examples" / "matmul.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = mod.matmul_kernel
    a, b = torch.randn(64, 40, dtype=torch.float16), torch.randn(40, 48, dtype=torch.float16)
    c = torch.empty(64, 48, dtype=torch.float16)
    args = (a, b, c, 64, 48, 40, *a.stride(), *b.stride(), *c.stride())
    for kw in (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2),
               dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32)):  # launch options left to their defaults
        src, target, options = source_for(fn.fn, describe_launch(fn.fn, args, kw), "sm_90")
        backend = make_backend(target)
        bound, specialization, _ = create_function_from_signature(fn.signature, fn.params, backend)(*args, **kw)
        jit_kw = {**kw, "debug": False}
        jit_opts, signature, constexprs, attrs = fn._pack_args(backend, jit_kw, bound, specialization, None)
        jit_src = type(src)(fn, signature, constexprs, attrs)
        env = get_cache_invalidating_env_vars()
        assert src.hash() == jit_src.hash()
        assert get_cache_key(src, backend, backend.parse_options(options), env) == \
            get_cache_key(jit_src, backend, jit_opts, env)
    # A screened config (other tiles) is the JIT's entry for that config too.
    kw = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    screened = with_config(describe_launch(fn.fn, args, kw), {"BLOCK_M": 128, "num_warps": 8})
    src, target, options = source_for(fn.fn, screened, "sm_90")
    kw2 = {**kw, "BLOCK_M": 128, "num_warps": 8}
    backend = make_backend(target)
    bound, specialization, _ = create_function_from_signature(fn.signature, fn.params, backend)(*args, **kw2)
    jit_opts, signature, constexprs, attrs = fn._pack_args(backend, {**kw2, "debug": False}, bound,
                                                           specialization, None)
    assert get_cache_key(src, backend, backend.parse_options(options), get_cache_invalidating_env_vars()) == \
        get_cache_key(type(src)(fn, signature, constexprs, attrs), backend, jit_opts, get_cache_invalidating_env_vars())
