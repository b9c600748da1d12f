"""Ahead-of-time compilation of the Triton kernels a call launched, for a GPU that need not be
here: registers, spills, shared memory and an occupancy estimate per kernel and config.

Inside the worker. The signature of each kernel comes from a real launch (observed by the
launch recorder, on the GPU or under the CPU interpreter), so the compiled code is the one that
launch would run on the target: same argument types, same constexprs, same num_warps and
num_stages, same 16-byte divisibility specialisation.

NVIDIA: the cubin's resource usage is read with the ``cuobjdump`` that ships inside Triton's
NVIDIA backend (REG = registers per thread; STACK = per-thread stack frame, which is where
spills go). AMD: the amdgcn assembly's metadata (``.vgpr_count``, ``.agpr_count``,
``.private_segment_fixed_size``). Shared memory is Triton's own figure (``metadata.shared``).
Occupancy is an estimate from the architecture limits below.

With a ``stage``, a report also carries that stage's text (``listing``): Triton's own ttir,
ttgir, llir, ptx or amdgcn, or the SASS that ``nvdisasm --print-line-info`` reads from the
cubin, with the kernel source's line info in it; cut at ``LISTING_MAX`` characters, with a mark
(all of one reply's listings together at ``LISTINGS_MAX``).
For display only: nothing decides a verdict from it.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

from .schema import KernelResources


@dataclass(frozen=True)
class ArchLimits:
    backend: str  # cuda | rocm (DeviceInfo's words; Triton calls ROCm "hip")
    target: Any  # what GPUTarget takes as arch: 90, "gfx942"
    warp: int
    max_warps: int  # resident warps (waves) per SM (CU)
    max_blocks: int
    smem_per_sm: int
    smem_per_block: int
    regs_per_sm: int = 65536  # NVIDIA: 32-bit registers per SM
    vgprs_per_lane: int = 512  # AMD: unified VGPR+AGPR budget per SIMD lane
    simds: int = 4

    @property
    def default_stages(self) -> int:
        """Triton's ``num_stages`` when a launch does not say (2 with AMD's stream pipeliner)."""
        return default_launch(self.backend)["num_stages"]

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda" if self.backend == "cuda" else "hip", self.target, self.warp)


ARCHS: dict[str, ArchLimits] = {
    "sm_80": ArchLimits("cuda", 80, 32, 64, 32, 167936, 166912),
    "sm_90": ArchLimits("cuda", 90, 32, 64, 32, 233472, 232448),
    "gfx90a": ArchLimits("rocm", "gfx90a", 64, 32, 32, 65536, 65536),
    "gfx942": ArchLimits("rocm", "gfx942", 64, 32, 32, 65536, 65536),
}
DEFAULT_ARCH = "sm_90"
"""Used when no arch is named and the runner has no GPU (the CPU interpreter)."""

_DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int8": "i8",
    "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""The options a Triton launch takes beside the kernel's arguments."""
TUNED_LAUNCH_OPTIONS = LAUNCH_OPTIONS[:3]
"""Those the tuner searches (``agent.tune.knobs``)."""


def default_launch(backend: str) -> dict[str, int]:
    """What Triton uses when a launch does not say, for a backend in ``DeviceInfo``'s words
    (``cuda``, ``rocm``): ``num_stages`` is 2 with AMD's stream pipeliner."""
    return {"num_warps": 4, "num_stages": 3 if backend == "cuda" else 2, "num_ctas": 1}

STAGES = {"cuda": ("ttir", "ttgir", "llir", "ptx", "sass"), "rocm": ("ttir", "ttgir", "llir", "amdgcn")}
"""The compile stages a listing can show, per backend; the first-named default is the last."""
LISTING_MAX = 2_000_000
"""Characters of one listing that travel back; the rest is cut, with ``CUT_MARK`` saying so."""
CUT_MARK = "# [listing cut: {n} more characters]"


LISTINGS_MAX = 16_000_000
"""Characters of all the listings of one reply together (a worker's message may be 64 MB)."""


def share_listings(reports: list, total: int = LISTINGS_MAX) -> None:
    """Cut the listings of ``reports`` (``KernelResources`` or their dicts) in order, so that each
    stays within ``LISTING_MAX`` and all of them together within ``total``."""
    left = total
    for r in reports:
        text = r.get("listing") if isinstance(r, dict) else r.listing
        if not isinstance(text, str):
            continue
        text = bounded(text, max(0, min(LISTING_MAX, left)))
        left -= len(text)
        if isinstance(r, dict):
            r["listing"] = text
        else:
            r.listing = text


def default_stage(arch: str) -> str:
    return STAGES[ARCHS[arch].backend][-1]


def bounded(text: str, limit: int = LISTING_MAX) -> str:
    """``text`` cut at the last line end before ``limit`` characters, with a mark saying how much
    was left out."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit) + 1 or limit
    return text[:cut] + CUT_MARK.format(n=len(text) - cut) + "\n"


@dataclass
class LaunchSignature:
    """What AOT compilation needs from one launch; hashable, so repeats compile once."""

    signature: tuple  # ((name, type), ...); type "constexpr" for constexpr parameters
    constexprs: tuple  # ((name, value), ...)
    divisible: tuple  # indices of arguments divisible by 16 (pointers: 16-byte aligned)
    options: tuple  # ((name, value), ...)
    specialized: tuple = ()
    """Indices of the arguments the JIT gives an attribute (pointers and integers): the compile
    then carries the same attributes as the JIT's, so both hit the same compile-cache entry."""

    def key(self):
        return (self.signature, self.constexprs, self.divisible, self.options)


_PARAMS: dict[Any, list] = {}  # kernel function -> its parameters (launches repeat)


def with_config(launch: LaunchSignature, config: dict) -> LaunchSignature:
    """The same launch with other constexpr values and launch options (a config to screen);
    names that are neither a constexpr of the kernel nor an option are ignored."""
    consts = tuple((k, config.get(k, v)) for k, v in launch.constexprs)
    opts = dict(launch.options)
    opts.update({k: v for k, v in config.items() if k in LAUNCH_OPTIONS})
    return LaunchSignature(launch.signature, consts, launch.divisible, tuple(sorted(opts.items())),
                           launch.specialized)


def _specializer():
    """Triton's own argument specialisation (what ``JITFunction.run`` keys its compile on):
    ``(type, attr)`` per value, e.g. ``("*fp16", "D")`` for a 16-byte aligned fp16 tensor and
    ``("constexpr", 1)`` for the integer 1. None on Triton versions without it."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
    except Exception:
        return None
    return lambda v, specialize: native_specialize_impl(BaseBackend, v, False, specialize, specialize)


def describe_launch(raw_fn, args: tuple, kwargs: dict,
                    no_specialize: frozenset = frozenset()) -> Optional[LaunchSignature]:
    """Types of a launch's arguments, from the Python function behind a JIT kernel, as the JIT
    specialises them: integers equal to 1 become the constant 1 and 16-divisible integers and
    16-byte aligned pointers are marked divisible, except for parameters in ``no_specialize``
    (``do_not_specialize``), so that the compiled code is the code the launch runs."""
    import torch

    params = _PARAMS.get(raw_fn)
    if params is None:
        try:
            params = _PARAMS[raw_fn] = list(inspect.signature(raw_fn).parameters.values())
        except (TypeError, ValueError):
            return None
    options = tuple((k, kwargs[k]) for k in LAUNCH_OPTIONS if k in kwargs)
    values = dict(zip([p.name for p in params], args))
    values.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
    spec = _specializer()
    sig, consts, div, attributed = [], [], [], []
    for i, p in enumerate(params):
        if p.name in values:
            v = values[p.name]
        elif p.default is not p.empty:
            v = p.default
        else:
            return None
        ann = p.annotation
        is_const = "constexpr" in (ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann)))
        if is_const or v is None:
            sig.append((p.name, "constexpr"))
            consts.append((p.name, v))
        elif spec is not None and isinstance(v, (torch.Tensor, bool, int, float)):
            try:
                ty, attr = spec(v, p.name not in no_specialize)
            except Exception:
                return None
            if ty == "constexpr":  # the integer 1: the JIT compiles it in as a constant
                sig.append((p.name, "constexpr"))
                consts.append((p.name, attr))
                continue
            if isinstance(v, torch.Tensor) and str(v.dtype).replace("torch.", "") not in _DTYPES:
                return None
            sig.append((p.name, ty))
            if isinstance(attr, str):
                attributed.append(i)
            if attr == "D":
                div.append(i)
        elif isinstance(v, torch.Tensor):
            t = _DTYPES.get(str(v.dtype).replace("torch.", ""))
            if t is None:
                return None
            sig.append((p.name, "*" + t))
            if v.data_ptr() % 16 == 0:
                div.append(i)
        elif isinstance(v, bool):
            sig.append((p.name, "i1"))
        elif isinstance(v, int):
            sig.append((p.name, "i32" if -2 ** 31 <= v < 2 ** 31 else "i64"))
            if v % 16 == 0 and v != 0:
                div.append(i)
        elif isinstance(v, float):
            sig.append((p.name, "fp32"))
        else:
            return None  # tensor descriptors and other kinds are not described here
    return LaunchSignature(tuple(sig), tuple(consts), tuple(div), options, tuple(attributed))


def _tool(name: str) -> Optional[str]:
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return path if os.path.exists(path) else None


def _nvidia_usage(cubin: bytes) -> tuple[Optional[int], Optional[int]]:
    tool = _tool("cuobjdump")
    if tool is None:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             timeout=60).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _amd_usage(asm: str) -> tuple[Optional[int], Optional[int]]:
    def get(key):
        m = re.search(r"\.%s:\s+(\d+)" % key, asm)
        return int(m.group(1)) if m else None
    vgpr, agpr, scratch = get("vgpr_count"), get("agpr_count") or 0, get("private_segment_fixed_size")
    return ((vgpr + agpr) if vgpr is not None else None), scratch


def occupancy(limits: ArchLimits, registers: Optional[int], shared: int, num_warps: int) -> Optional[float]:
    """Resident warps (waves) per SM (CU) over the maximum, as a percentage. An estimate."""
    if registers is None or num_warps <= 0:
        return None
    by_smem = limits.smem_per_sm // (shared + (1024 if limits.backend == "cuda" else 0)) if shared else 10 ** 9
    if limits.backend == "cuda":
        per_warp = math.ceil(max(registers, 1) * 32 / 256) * 256
        by_regs = (limits.regs_per_sm // per_warp) // num_warps
    else:
        waves_per_simd = min(8, limits.vgprs_per_lane // (math.ceil(max(registers, 1) / 8) * 8))
        by_regs = (waves_per_simd * limits.simds) // num_warps
    by_warps = limits.max_warps // num_warps
    blocks = min(by_regs, by_smem, by_warps, limits.max_blocks)
    return 100.0 * blocks * num_warps / limits.max_warps


def source_for(raw_fn, launch: LaunchSignature, arch: str):
    """What ``triton.compile`` gets for one launch on ``arch``: ``(source, target, options)``,
    built as the JIT builds them, so that on that GPU the JIT finds this compile in its cache."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    limits = ARCHS[arch]
    opts = dict(launch.options)
    fn = raw_fn if isinstance(raw_fn, JITFunction) else JITFunction(raw_fn)
    attrs = ({(i,): [["tt.divisibility", 16]] if i in launch.divisible else [] for i in launch.specialized}
             if launch.specialized else {(i,): [["tt.divisibility", 16]] for i in launch.divisible})
    src = ASTSource(fn, signature=dict(launch.signature), constexprs=dict(launch.constexprs), attrs=attrs)
    options = {"num_warps": int(opts.get("num_warps", 4)),
               "num_stages": int(opts.get("num_stages", limits.default_stages)),
               **{k: v for k, v in opts.items() if k in ("num_ctas", "maxnreg")}}
    return src, limits.gpu_target(), options


def _sass(cubin: bytes) -> str:
    """The cubin's SASS, each run of instructions under a ``//## File "...", line N`` comment
    (the line info ptxas keeps in the cubin's .debug_line; Triton compiles with it)."""
    tool = _tool("nvdisasm")
    if tool is None:
        return "# nvdisasm is not in this Triton's NVIDIA backend: no SASS\n"
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        p = subprocess.run([tool, "--print-line-info", "--print-code", f.name], capture_output=True,
                           text=True, timeout=120)
    finally:
        os.unlink(f.name)
    return p.stdout if p.returncode == 0 else f"# nvdisasm failed: {p.stderr.strip()[:500]}\n"


def stage_text(ck, stage: str) -> Optional[str]:
    """One stage of a compiled kernel as text (``sass`` disassembled from the cubin)."""
    if stage == "sass":
        return _sass(ck.asm["cubin"]) if "cubin" in ck.asm else None
    text = ck.asm.get(stage)
    return text if isinstance(text, str) else None


def compile_for(raw_fn, name: str, launch: LaunchSignature, arch: str,
                stage: Optional[str] = None) -> KernelResources:
    """Compile one launch configuration for ``arch`` and read its resources (and, with
    ``stage``, that stage's text: ``KernelResources.listing``)."""
    import triton

    limits = ARCHS[arch]
    opts = dict(launch.options)
    num_warps = int(opts.get("num_warps", 4))
    num_stages = int(opts.get("num_stages", limits.default_stages))
    res = KernelResources(kernel=name, arch=arch, num_warps=num_warps, num_stages=num_stages,
                          constexprs={k: repr(v) for k, v in launch.constexprs},
                          arg_types=", ".join(t for _, t in launch.signature if t != "constexpr"),
                          arg_names=", ".join(n for n, t in launch.signature if t != "constexpr"),
                          shared_limit=limits.smem_per_block)
    t0 = time.monotonic()
    try:
        src, target, options = source_for(raw_fn, launch, arch)
        ck = triton.compile(src, target=target, options=options)
    except Exception as e:
        msg = str(e).strip().splitlines()
        res.fits = False
        res.error = f"{type(e).__name__}: {msg[-1] if msg else ''}"[:300]
        if "out of resource" in res.error.lower() or "shared memory" in res.error.lower():
            res.error = f"needs more shared memory than {arch} has per block ({limits.smem_per_block} bytes)"
        res.compile_s = round(time.monotonic() - t0, 3)
        return res
    res.shared_bytes = int(getattr(ck.metadata, "shared", 0) or 0)
    if limits.backend == "cuda":
        res.registers, res.spill_bytes = _nvidia_usage(ck.asm["cubin"])
    else:
        res.registers, res.spill_bytes = _amd_usage(ck.asm.get("amdgcn", ""))
    res.fits = res.shared_bytes <= limits.smem_per_block
    if not res.fits:
        res.error = f"needs {res.shared_bytes} bytes of shared memory; {arch} has {limits.smem_per_block} per block"
    res.occupancy_pct = occupancy(limits, res.registers, res.shared_bytes, num_warps) if res.fits else 0.0
    if stage:
        res.listing_stage = stage
        if stage in STAGES[limits.backend]:
            text = stage_text(ck, stage)
            res.listing = bounded(text) if text is not None else f"# no {stage} from this compile\n"
        else:
            res.listing = f"# no {stage} for {arch}: one of {', '.join(STAGES[limits.backend])}\n"
    res.compile_s = round(time.monotonic() - t0, 3)
    return res


# --------------------------------------------------------------------------- out of process
#
# A process that imported triton with TRITON_INTERPRET=1 (the CPU worker) cannot compile: the
# @jit helpers inside triton.language (tl.max's combine function, ...) were created as
# interpreted functions. There, the candidate's worker hands the compiles to the pool
# (``compile_request``), which runs them in a compile worker: a job of a second fork server
# that imported triton for compiling (``runner.worker.main.prepare("compile")``), sandboxed like
# every worker, forked with torch and triton already imported (``runner.worker.main.compile_tree``).


def constexprs_to_wire(constexprs: tuple) -> Optional[list]:
    """A launch's constexprs as JSON for the compile worker: plain values as they are, a Triton
    dtype (``OUT_DTYPE=tl.float16``) as ``{"tl.dtype": "fp16"}``; None when one cannot be sent."""
    out = []
    for name, v in constexprs:
        if v is None or isinstance(v, (bool, int, float, str)):
            out.append([name, v])
        elif type(v).__name__ == "dtype" and isinstance(getattr(v, "name", None), str):
            out.append([name, {"tl.dtype": v.name}])
        else:
            return None
    return out


def constexprs_from_wire(wire: list) -> tuple:
    """``constexprs_to_wire``'s list as a launch's constexprs again (in the compile worker)."""
    import triton.language as tl
    return tuple((name, tl.dtype(v["tl.dtype"]) if isinstance(v, dict) and "tl.dtype" in v else v)
                 for name, v in wire)


def compile_request(files: dict[str, str], jobs: list[dict]) -> dict:
    """What the pool's compile worker needs: the candidate tree (project-relative paths) and,
    per job, {"rel", "kernel", "signature", "constexprs", "divisible", "options",
    "specialized", "arch", "variant", "stage"}."""
    return {"files": files, "jobs": jobs}
