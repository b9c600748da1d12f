"""Known GPUs and their datasheet peaks, and device detection inside a worker.

Peaks are vendor datasheet numbers (dense, no sparsity), used to state results as % of peak.
They are upper bounds: measured ceilings are lower (the H200's device-to-device copy reaches about
4.3 of its 4.8 TB/s; see docs/benchmarks.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .schema import DeviceInfo


@dataclass(frozen=True)
class GpuSpec:
    match: tuple[str, ...]  # all lower-case substrings of the device name / arch that must appear
    name: str
    bandwidth_gbs: float
    tflops: dict  # dtype -> dense TFLOP/s on the matrix units ("float32" is the non-matrix rate)
    l2_mb: float
    arch: str


KNOWN_GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(("h200",), "NVIDIA H200", 4800, {"float16": 989, "bfloat16": 989, "float8": 1979,
            "tf32": 494, "float32": 67, "float64": 34}, 60, "sm_90"),
    GpuSpec(("h100", "pcie"), "NVIDIA H100 PCIe", 2000, {"float16": 756, "bfloat16": 756,
            "float8": 1513, "tf32": 378, "float32": 51, "float64": 26}, 50, "sm_90"),
    GpuSpec(("h100",), "NVIDIA H100 SXM", 3350, {"float16": 989, "bfloat16": 989, "float8": 1979,
            "tf32": 494, "float32": 67, "float64": 34}, 50, "sm_90"),
    GpuSpec(("a100", "40gb"), "NVIDIA A100 40GB", 1555, {"float16": 312, "bfloat16": 312,
            "tf32": 156, "float32": 19.5, "float64": 9.7}, 40, "sm_80"),
    GpuSpec(("a100",), "NVIDIA A100 80GB", 2039, {"float16": 312, "bfloat16": 312, "tf32": 156,
            "float32": 19.5, "float64": 9.7}, 40, "sm_80"),
    GpuSpec(("mi300x",), "AMD Instinct MI300X", 5300, {"float16": 1307, "bfloat16": 1307,
            "float8": 2615, "tf32": 654, "float32": 163, "float64": 81.7}, 256, "gfx942"),
    GpuSpec(("mi250x",), "AMD Instinct MI250X", 3277, {"float16": 383, "bfloat16": 383,
            "float32": 95.7, "float64": 95.7}, 16, "gfx90a"),
    GpuSpec(("mi250",), "AMD Instinct MI250", 3277, {"float16": 362, "bfloat16": 362,
            "float32": 90.5, "float64": 90.5}, 16, "gfx90a"),
    GpuSpec(("mi325x",), "AMD Instinct MI325X", 6000, {"float16": 1307, "bfloat16": 1307,
            "float8": 2615, "tf32": 654, "float32": 163, "float64": 81.7}, 256, "gfx942"),
    GpuSpec(("b200",), "NVIDIA B200", 8000, {"float16": 2250, "bfloat16": 2250, "float8": 4500,
            "tf32": 1100, "float32": 80, "float64": 40}, 126, "sm_100"),
)
"""L2 for MI300X is its 256 MB Infinity Cache (the last level a flush must cover)."""


def lookup(name: str, arch: Optional[str] = None) -> Optional[GpuSpec]:
    key = f"{name} {arch or ''}".lower()
    for spec in KNOWN_GPUS:
        if all(m in key for m in spec.match):
            return spec
    if arch == "gfx942":  # MI300 family reported by arch only (e.g. "AMD Radeon Graphics")
        return next(s for s in KNOWN_GPUS if s.name == "AMD Instinct MI300X")
    return None


def rocm_arch(gcn_arch_name: str) -> str:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'."""
    return gcn_arch_name.split(":")[0]


def gpu_present(requested: str = "auto") -> bool:
    """Whether a GPU will be used, decided without initialising the GPU driver in this process
    (the fork server's children must be the first to do that). NVIDIA: a device count from NVML;
    AMD: the kernel driver's device files."""
    import torch

    if requested not in ("auto", "cuda", "rocm"):
        return False
    if torch.version.hip:
        return os.path.exists("/dev/kfd") and any(n.startswith("renderD") for n in
                                                 (os.listdir("/dev/dri") if os.path.isdir("/dev/dri") else []))
    if not torch.version.cuda or not torch.backends.cuda.is_built():
        return False
    try:
        n = torch.cuda._device_count_nvml()
    except Exception:
        n = -1
    if n >= 0:
        return n > 0
    return any(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev"))


def _why_no_gpu(torch) -> str:
    """What torch's device queries say, for an error message."""
    facts = [f"torch {torch.__version__}",
             f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"]
    for name, query in (("NVML count", getattr(torch.cuda, "_device_count_nvml", None)),
                        ("driver count", getattr(torch._C, "_cuda_getDeviceCount", None))):
        if query is None:
            continue
        try:
            facts.append(f"{name} {query()}")
        except Exception as e:
            facts.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
    return ", ".join(facts)


def detect(requested: str = "auto") -> DeviceInfo:
    """Inside a worker (torch importable). Does not initialise CUDA beyond device queries."""
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # triton may be missing on a box that only runs PyTorch targets
        triton_version = None
    if requested not in ("auto", "cuda", "rocm", "interpreter"):
        raise RuntimeError(f"unknown device '{requested}' (use auto, cuda, rocm or interpreter)")
    # A worker that has its CUDA context has a GPU, whatever NVML says inside its sandbox.
    gpu = requested in ("auto", "cuda", "rocm") and (torch.cuda.is_initialized() or torch.cuda.is_available())
    if requested in ("cuda", "rocm") and not gpu:
        raise RuntimeError(f"device '{requested}' was asked for, but torch sees no GPU ({_why_no_gpu(torch)})")
    if not gpu:
        return DeviceInfo(name="CPU (Triton interpreter)", backend="interpreter", arch=None,
                          torch=torch.__version__, triton=triton_version)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip:
        backend, arch = "rocm", rocm_arch(getattr(props, "gcnArchName", "") or "")
    else:
        backend, arch = "cuda", f"sm_{props.major}{props.minor}"
    spec = lookup(props.name, arch)
    return DeviceInfo(name=props.name, backend=backend, arch=arch,
                      peak_bandwidth_gbs=spec.bandwidth_gbs if spec else None,
                      peak_tflops=dict(spec.tflops) if spec else {},
                      torch=torch.__version__, triton=triton_version)


def l2_bytes(info: DeviceInfo) -> int:
    """Bytes a flush buffer must cover: the last-level cache, with margin; 256 MB if unknown."""
    import torch

    spec = lookup(info.name, info.arch)
    if spec is not None:
        return int(spec.l2_mb * 2 * 1024 * 1024)
    try:
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
    except Exception:
        l2 = 0
    return max(2 * l2, 256 * 1024 * 1024)
