"""Knowledge packs per architecture (text files in agent/knowledge/), picked by the device.

The runner's reported device (``EvalResult.device``: backend ``cuda`` | ``rocm`` |
``interpreter``, arch ``sm_90`` / ``gfx942`` ...) picks the pack; ``--arch`` overrides it (e.g.
to write for an MI300X from a CPU machine). The general Triton pack always comes first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from runner.schema import DeviceInfo

KNOWLEDGE_DIR = Path(__file__).resolve().parent.parent / "knowledge"
GENERAL = "triton.md"


def pack_for(arch: Optional[str], backend: Optional[str] = None) -> Optional[str]:
    """The architecture pack's file name, or None when no pack fits."""
    a = (arch or "").lower()
    if a.startswith("gfx9") or (backend == "rocm" and not a):
        return "amd_cdna3.md"  # written for gfx942; gfx90a shares the 64-wide wavefronts and 64 KiB LDS
    if a.startswith("sm_9"):
        return "nvidia_hopper.md"
    return None


def pick(device: Optional[DeviceInfo], arch: Optional[str] = None) -> tuple[str, list[str]]:
    """(text, names of the packs used) for the given device, or for ``arch`` when named."""
    backend = device.backend if device else None
    target = arch or (device.arch if device and device.backend != "interpreter" else None)
    names = [GENERAL]
    extra = pack_for(target, None if arch else backend)
    if extra:
        names.append(extra)
    texts = [(KNOWLEDGE_DIR / n).read_text(encoding="utf-8").strip() for n in names]
    return "\n\n".join(texts), names
