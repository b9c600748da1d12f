"""geak-lsp through an independent client: headless Neovim (Debian's package; .ci/run installs
it) runs the Lua script tests/lsp/nvim_optimize.lua, which requests the code action, runs
"Optimize with GEAK", and reads the buffer that Neovim's own applyEdit handler edited, the
diagnostics and a hover. The GEAK loop talks to the scripted LLM server on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ADD_RELU, ROOT, Project, kernel_variant
from llm_server import ScriptedLLM

NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None, reason="nvim is not installed (apt-get install neovim)")
def test_neovim_runs_optimize_and_reads_the_edited_buffer(tmp_path):
    proj = Project(tmp_path).write("k.py", ADD_RELU)
    answer = "Wider blocks.\n\n```python\n" + textwrap.dedent(kernel_variant(block=512)).lstrip() + "```\n"
    out = tmp_path / "nvim-result.json"
    with ScriptedLLM([{"text": answer}]) as llm:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": llm.openai_base_url,
               "OPENAI_API_KEY": "test-key", "GEAK_FILE": str(proj.root / "k.py"),
               "GEAK_LINE": str(ADD_RELU.splitlines().index("def add_relu(x, y):")),
               "GEAK_PYTHON": sys.executable, "GEAK_OUT": str(out),
               "GEAK_EXPECT": "add_relu_kernel[(triton.cdiv(n, 512),)]",
               "GEAK_INIT": json.dumps({"geak": {"device": "interpreter", "trials": 1, "strategy": "llm",
                                                 "provider": "openai", "model": "scripted", "iterations": 1,
                                                 "applyUntimed": True}})}
        run = subprocess.run([NVIM, "--headless", "--clean", "-u", "NONE", "-c",
                              f"luafile {ROOT / 'tests' / 'lsp' / 'nvim_optimize.lua'}"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert out.exists(), f"nvim wrote nothing (rc {run.returncode}): {run.stdout[-2000:]} {run.stderr[-2000:]}"
    res = json.loads(out.read_text())
    assert res["error"] is None, res
    assert res["titles"][:2] == ["Optimize with GEAK", "Benchmark with GEAK"]
    assert res["edited"], res
    text = "\n".join(res["lines"])
    assert "BLOCK=512" in text and "def get_inputs(n=300):" in text and text.count("def add_relu(") == 1
    msgs = [d["message"] for d in res["diagnostics"] if d["source"] == "geak"]
    assert any("verified correct" in m and "not timed" in m for m in msgs), res["diagnostics"]
    assert "optimize run on **Triton CPU interpreter**" in res["hover"]
    # The edit went into Neovim's buffer (unsaved), not behind its back to the file on disk.
    assert "BLOCK=512" not in (proj.root / "k.py").read_text()
