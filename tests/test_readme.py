"""The README's commands as written: every `geak` and `geak-runner` command line in it is
accepted by the real command-line parser, and every `FILE::SYMBOL` it names exists.

Those that can run on a CPU machine with no key run in CI as written (`.ci/run`: the main job,
`geak eval` with a candidate, the same through the runner daemon with its token); this test keeps
the others (a GPU's, a key's, a Ray cluster's) from going stale.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from agent.cli import build_parser as geak_parser
from runner.serve.cli import build_parser as runner_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def readme_commands() -> list[str]:
    """Each `geak ...` / `geak-runner ...` line of the README's code blocks, without its prompt
    (`$ `), its trailing comment and what follows `&&`; the first command's own `geak` too."""
    out, inside = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            continue
        for part in line.split("&&"):
            part = part.strip().removeprefix("$ ")
            part = re.sub(r"\s+#\s.*$", "", part).strip()
            if re.match(r"^(\.venv/bin/)?geak(-runner)?\s", part):
                out.append(part)
    return out


COMMANDS = readme_commands()


def test_the_readme_has_its_commands():
    assert len(COMMANDS) >= 8, COMMANDS
    assert any(c.startswith(".venv/bin/geak optimize examples/softmax.py::softmax") for c in COMMANDS)


@pytest.mark.parametrize("line", COMMANDS)
def test_each_readme_command_parses_and_names_files_that_exist(line: str):
    words = shlex.split(line)
    program = words[0].rsplit("/", 1)[-1]
    parser = {"geak": geak_parser, "geak-runner": runner_parser}[program]()
    try:
        parser.parse_args(words[1:])
    except SystemExit as e:  # the parser's own error, printed above
        pytest.fail(f"README: `{line}` is refused by {program}'s parser (exit {e.code})")
    for word in words[1:]:
        m = re.match(r"^([\w./-]+\.py)::(\w+)$", word)
        if not m:
            continue
        path = ROOT / m.group(1)
        assert path.is_file(), f"README: `{line}` names {m.group(1)}, which does not exist"
        names = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
                 if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert m.group(2) in names, f"README: `{line}`: {m.group(1)} has no top-level {m.group(2)}"
