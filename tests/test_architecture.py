"""ARCHITECTURE.md's "Where to make a change" is true: every file it names exists, and every name
it gives after a file (in backticks) is defined in that file (a function, class or assignment;
in TypeScript an exported or declared function, class or const), or is a module of a folder it
names. A file named without a folder is in the folder of the file named before it in the cell."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("runner/", "agent/", "geak_lsp/", "vscode-client/", "docs/", "tests/", "scripts/", ".ci/")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def rows(text: str = "") -> list[tuple[str, str]]:
    text = text or (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text[text.index("## Where to make a change"):]
    table = table[:table.index("\n## ", 5)] if "\n## " in table[5:] else table
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= {"-", " "} and cells[0] != "to change":
            out += [(cells[0], cells[1]), (cells[0], cells[2])]
    return out


def defines(path: Path, name: str) -> bool:
    first = name.split(".")[0]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        pat = rf"^\s*(async\s+)?(def|class)\s+{first}\b|^\s*{first}\s*(:[^=]*)?="
    else:
        pat = rf"^\s*(export\s+)?(async\s+)?(function|class|const|let|interface|type)\s+{first}\b|^\s*(private\s+|public\s+)?{first}\s*\("
    return re.search(pat, text, re.M) is not None


def problems(text: str = "") -> list[str]:
    found = []
    for what, cell in rows(text):
        last = None
        for token in re.findall(r"`([^`]+)`", cell):
            if token.startswith(TOPS) or (re.search(r"\.(py|ts|md|json)$", token) and "/" not in token and last):
                rel = token if token.startswith(TOPS) else str(Path(last if last.endswith("/") else Path(last).parent.as_posix() + "/") / token)
                if "<" in rel:
                    continue
                hits = list(ROOT.glob(rel.rstrip("/"))) if "*" in rel else [ROOT / rel.rstrip("/")]
                if not hits or not all(h.exists() for h in hits):
                    found.append(f"{what}: {rel} does not exist")
                last = rel
            elif IDENT.match(token) and last is not None:
                p = ROOT / last.rstrip("/")
                if p.is_dir():
                    if not ((p / f"{token}.py").exists() or (p / token).is_dir()):
                        found.append(f"{what}: no module {token} in {last}")
                elif p.suffix in (".py", ".ts") and not defines(p, token):
                    found.append(f"{what}: {token} is not defined in {last}")
    return found


def test_where_to_make_a_change_names_files_and_names_that_exist():
    assert rows(), "the table was not found"
    assert problems() == []


def test_the_check_finds_a_missing_file_and_a_missing_name():
    table = ("## Where to make a change\n\n| to change | look in | and keep in step |\n| --- | --- | --- |\n"
             "| x | `runner/schema.py` (`EvalOptions`, `NoSuchThing`), `nosuch.py` | `runner/serve/daemon/` (`server`, `nomodule`) |\n")
    assert problems(table) == ["x: NoSuchThing is not defined in runner/schema.py", "x: runner/nosuch.py does not exist",
                               "x: no module nomodule in runner/serve/daemon/"]
