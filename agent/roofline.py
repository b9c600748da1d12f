"""How close a measured kernel is to its roofline: % of the GPU's peak, over a result's timed cases.

For each timed case the runner gives the candidate's time and, where it knows them, its share of
the peak memory bandwidth (bytes moved: the task's ``get_bytes``, else the sizes of inputs and
outputs: what a kernel that touches each of them once moves; a share over 100%, where
that count is too large, is left out by the runner) and of the peak FLOP/s (the task's ``get_flops``), against the datasheet
peaks of ``runner.devices.KNOWN_GPUS``. A case's roofline share is the larger of the two (the
roof that binds it), and a result's share is the time-weighted mean over its timed cases:

    Σ (time the case would take at its roof) / Σ (time it took)

so it agrees with the speedup, which is also Σ over the timed cases. Nothing is guessed: with
neither bytes nor FLOPs, or an unknown GPU, there is no share (``None``), and reports say
"unknown". Standard library only; reads an ``EvalResult`` or its JSON dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

ROOFLINE_STOP_PCT = 90.0
"""The tuner stops searching once its best verified config reaches this share of its roofline:
datasheet peaks are not reached in practice (an H200's device copy gets about 90% of its 4.8 TB/s),
so configs beyond it have little left to win."""

BASIS_TEXT = {"flops": "of peak FLOP/s", "bandwidth": "of peak bandwidth",
              "bandwidth_lower_bound": "of peak bandwidth (at least, if it touches all of its tensors: bytes counted "
                                       "from their sizes)"}


@dataclass
class Roofline:
    pct: float
    """Share of the roofline, in percent (time-weighted over the timed cases)."""
    basis: str
    """What bounds it: ``flops``, ``bandwidth`` (the task's ``get_bytes``) or
    ``bandwidth_lower_bound`` (inputs + outputs counted from their sizes: a kernel that touches
    each of them once moves at least that, so the share is at least this)."""
    cases: int
    """Timed cases with a known share."""

    def text(self) -> str:
        return f"{self.pct:.0f}% {BASIS_TEXT[self.basis]}"


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _case_share(t: Any) -> Optional[tuple[float, str]]:
    bw, fl = _get(t, "cand_bw_pct_peak"), _get(t, "cand_flops_pct_peak")
    if fl is not None and (bw is None or fl >= bw):
        return float(fl), "flops"
    if bw is not None:
        return float(bw), "bandwidth" if _get(t, "bytes_basis") == "get_bytes" else "bandwidth_lower_bound"
    return None


def roofline(result: Any) -> Optional[Roofline]:
    """The share of the roofline of ``result``'s candidate (an ``EvalResult`` or its dict), or
    None when no timed case has one."""
    if result is None:
        return None
    spent = at_roof = 0.0
    bases: list[str] = []
    for c in _get(result, "cases") or []:
        t = _get(c, "timing")
        share = _case_share(t) if t else None
        ms = _get(t, "cand_ms") if t else None
        if share is None or not ms:
            continue
        spent += ms
        at_roof += ms * share[0] / 100.0
        bases.append(share[1])
    if not bases:
        return None
    # One word for the whole: FLOP/s if any case is compute-bound, else bandwidth, and a lower
    # bound as soon as one case's bytes are.
    basis = ("flops" if "flops" in bases else
             "bandwidth_lower_bound" if "bandwidth_lower_bound" in bases else "bandwidth")
    return Roofline(pct=100.0 * at_roof / spent, basis=basis, cases=len(bases))


def pct_text(r: Optional[Roofline]) -> str:
    """``"87% of peak bandwidth"``, or ``"unknown"`` (no bytes or FLOPs known, not timed, or an
    unknown GPU)."""
    return r.text() if r is not None else "unknown"


