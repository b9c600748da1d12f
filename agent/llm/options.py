"""The ``--strategy llm`` options of ``geak optimize`` (argparse only: no SDK is imported here).

Defaults are applied in ``command._settings`` so that ``--resume`` can tell what the command
line gave from what the run recorded.
"""

from __future__ import annotations

import argparse


def add_llm_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("--strategy llm (the GEAK loop; keys only from OPENAI_API_KEY / "
                                  "ANTHROPIC_API_KEY, base URLs from OPENAI_BASE_URL / ANTHROPIC_BASE_URL)")
    g.add_argument("--provider", choices=["openai", "anthropic"],
                   help="openai (also any OpenAI-compatible server: vLLM, Ollama, LM Studio) or anthropic")
    g.add_argument("--model", metavar="M", help="model name, as the provider knows it")
    g.add_argument("--iterations", type=int, metavar="N", help="sequential iterations (default 5)")
    g.add_argument("--parallel", type=int, metavar="K", help="candidates per iteration, generated "
                   "concurrently and evaluated as one batch (default 1)")
    g.add_argument("--base-url", metavar="URL", help="the provider's endpoint (OpenAI-compatible: "
                   "ends in /v1; Anthropic: without /v1); default from the environment")
    g.add_argument("--budget-tokens", type=int, metavar="N",
                   help="stop the run cleanly once N tokens (input + output) are spent")
    g.add_argument("--target-speedup", type=float, metavar="X",
                   help="stop early once a verified candidate is X times faster")
    g.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (default: the model's)")
    g.add_argument("--max-tokens", type=int, metavar="N", help="longest answer per call (default 8192)")
    g.add_argument("--timeout", type=float, metavar="S", help="seconds per model call (default 300)")
    g.add_argument("--retries", type=int, metavar="N",
                   help="SDK retries of a failed call (rate limit, server error; default 2)")
    g.add_argument("--fix-attempts", type=int, metavar="N",
                   help="failed attempts in a row on one line of attack before it is dropped and the "
                        "loop restarts from the best verified candidate (default 3)")
    g.add_argument("--corpus", metavar="DIR", help="more Triton kernels for one-shot retrieval "
                   "(besides the project's examples/ and benchmarks/)")
    g.add_argument("--instruction", metavar="TEXT", help="what to optimize for, in words (default: speed)")
    g.add_argument("--run-dir", metavar="DIR", help="where runs are written (default .geak/runs)")
    g.add_argument("--resume", metavar="DIR", help="go on with the run in DIR (its settings, unless "
                   "given again here; --iterations is the new total)")
