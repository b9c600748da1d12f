"""The ``geak`` command: the parser, and each subcommand's module in ``agent.commands``.

  geak eval     PATH::SYMBOL [--candidate PATH::SYMBOL] [--runner local|URL] [--json]
  geak optimize PATH::SYMBOL [--strategy tune|llm] [--out FILE] [--json]
  geak bench    DIR [--format ...] [--strategy none|tune|llm] [--json FILE] [--report FILE]
  geak asm      PATH::SYMBOL [--arch ARCH] [--stage STAGE] [--json]

The command's product (its report, a ``--preview`` diff) goes to stdout, progress and notes to
stderr; ``--json`` prints one JSON document on stdout instead, the report going to stderr.
Exit codes: 0 success, 1 the work ran but found no verified result, 2 bad usage or bad input,
3 the runner cannot be used, 4 the model provider cannot be used.
Nothing imports this module: it is the door, not a library.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from agent.commands import EXIT_BAD_INPUT, err


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2, with the usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"geak: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from agent.commands import asm, bench, eval as eval_, optimize
    p = _Parser(prog="geak", description="Evaluate and optimize Triton / PyTorch kernels.")
    p.add_argument("--version", action="version", version=f"geak {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    eval_.add_arguments(sub.add_parser(
        "eval", help="check a target (and a candidate) for correctness and speed",
        description="Check PATH::SYMBOL on its own inputs; with --candidate, check that the candidate "
                    "reproduces it and measure both."))
    optimize.add_arguments(sub.add_parser(
        "optimize", help="search for a faster verified version of a target",
        description="Search for a faster version of PATH::SYMBOL that is verified to compute the same "
                    "thing. --strategy tune (the default) searches the launch settings of its Triton kernel."))
    bench.add_arguments(sub.add_parser(
        "bench", help="run a benchmark suite and report the GEAK paper's metrics",
        description="Run every task in DIR (geak, TritonBench-G, GEAK ROCm or KernelBench format) through a "
                    "strategy and report call accuracy, execution accuracy, speedups, fast_p, pass@k and "
                    "% of peak."))
    asm.add_arguments(sub.add_parser(
        "asm", help="show what the compiler made of the target's kernels, line by line",
        description="Compile each Triton kernel PATH::SYMBOL launches, with the types, constexprs and launch "
                    "options of its recorded launches, for --arch, and print the chosen stage with each run of "
                    "instructions under the kernel source line it came from."))
    return p


def version() -> str:
    """This installation's version, from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed("geak")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    from agent.commands import asm, bench, eval as eval_, optimize
    args = build_parser().parse_args(argv)
    try:
        return {"eval": eval_.run, "optimize": optimize.run, "bench": bench.run,
                "asm": asm.run}[args.command](args)
    except KeyboardInterrupt:
        err("geak: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
