"""``runner.worker.fastinterp``: the interpreter without its repeated scans of ``triton.language``
computes what the interpreter as shipped computes, and leaves the same names patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "fastinterp" / "run_kernels.py"


def _run(*flags: str, env: dict | None = None) -> dict:
    p = subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=240,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_same_outputs_and_same_patched_names_as_the_stock_interpreter():
    stock, fast = _run(), _run("--fast")
    assert fast["installed"] and not stock["installed"]
    assert len(stock["results"]) >= 30  # every suite task and the extra kinds ran
    differ = [k for k in stock["results"] if stock["results"][k] != fast["results"].get(k)]
    assert not differ, f"outputs differ from the stock interpreter's: {differ}"
    # After every launch, the same names of tl, tl.tensor, tl.math and tl.core hold a builtin.
    assert stock["states"] == fast["states"]
    assert len(stock["states"][0]["tl"]) > 50  # the names were read


def test_it_can_be_turned_off():
    assert not _run("--fast", env={"GEAK_STOCK_INTERPRETER": "1"})["installed"]


def test_libdevice_under_the_interpreter_computes_what_torch_computes():
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "fastinterp" / "libdevice_kernel.py")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    installed, diffs = p.stdout.strip().splitlines()[-2:]
    assert int(installed) > 50
    fp32, fp16 = (float(x.split("(")[1].rstrip(")")) for x in diffs.split(") ", 1)[0:1] + [diffs.split(") ", 1)[1]])
    assert fp32 < 1e-5 and fp16 < 1e-3
