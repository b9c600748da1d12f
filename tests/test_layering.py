"""The packages depend one way: ``runner`` <- ``agent`` <- ``geak_lsp``, and no module imports a
command-line module (``agent.cli``, ``agent.commands``, ``runner.serve.cli``) but another one of them.

Read from the source with ``ast`` (every import, at module level or inside a function);
nothing is imported, so this runs in a fraction of a second."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS = {"runner": {"runner"}, "agent": {"agent", "runner"}, "geak_lsp": {"geak_lsp", "agent", "runner"}}
"""Each package, and the packages its modules may import."""
CLI = ("agent.cli", "agent.commands", "runner.serve.cli")
"""The command-line modules: doors, not libraries."""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def imported(path: Path, root: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, absolute module name, what it may name)`` of every import in the file: for
    ``from X import y``, ``X`` and ``X.y`` (y may be a module)."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, [a.name]) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out.append((node.lineno, base, [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]))
    return out


def violations(root: Path) -> list[str]:
    found = []
    for package, allowed in LAYERS.items():
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            is_cli = any(_within(module, c) for c in CLI)
            for line, name, names in imported(path, root):
                top = name.split(".")[0]
                where = f"{path.relative_to(root)}:{line}"
                if top in LAYERS and top not in allowed:
                    found.append(f"{where}: {module} imports {name} ({package} may import only "
                                 f"{', '.join(sorted(allowed))})")
                cli = next((n for n in names if any(_within(n, c) for c in CLI)), None)
                if cli is not None and not (is_cli and top == package):
                    found.append(f"{where}: {module} imports the command-line module {cli}")
    return found


def test_the_packages_import_each_other_one_way_and_no_cli_module():
    assert violations(ROOT) == []


def test_a_wrong_import_is_found(tmp_path):
    """The checker itself: each kind of wrong import, as it would be written."""
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "agent" / "cli.py").write_text("")
    (tmp_path / "agent" / "commands").mkdir()
    (tmp_path / "agent" / "commands" / "__init__.py").write_text("from ..cli import x\n")  # CLI to CLI: fine
    (tmp_path / "runner" / "pool.py").write_text("def f():\n    from agent.llm import loop\n")
    (tmp_path / "agent" / "tuner.py").write_text("from geak_lsp import settings\nfrom .cli import make_runner\n")
    (tmp_path / "geak_lsp" / "server.py").write_text("import agent.commands.optimize\nfrom runner.serve import cli\n")
    got = violations(tmp_path)
    assert "runner/pool.py:2: runner.pool imports agent.llm (runner may import only runner)" in got, got
    assert any("agent/tuner.py:1:" in v and "geak_lsp" in v for v in got), got
    assert any("agent/tuner.py:2: agent.tuner imports the command-line module agent.cli" in v for v in got), got
    assert any("geak_lsp/server.py:1:" in v and "agent.commands.optimize" in v for v in got), got
    assert any("geak_lsp/server.py:2:" in v and "runner.serve.cli" in v for v in got), got
    assert not any("agent/commands/__init__.py" in v for v in got), got


RUNNER_SIDES = {"runner.worker": {"runner.worker"}, "runner.judge": {"runner.judge"},
                "runner.serve": {"runner.serve", "runner.judge"}}
"""The evaluator's trust boundary in folders: what runs in the sandboxed worker processes beside
user and candidate code (``runner.worker``), what decides the verdict (``runner.judge``), what
serves clients (``runner.serve``), and what both sides load (``runner``'s own modules: the wire
format, the static view of the code, the compile module, the sandbox), which imports none of the
three. Each may import the shared modules and those of the sides named here; nothing else."""


def boundary_violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "runner").rglob("*.py")):
        module = _module_name(path, root)
        side = next((s for s in RUNNER_SIDES if _within(module, s)), None)
        allowed = RUNNER_SIDES.get(side, set())
        for line, name, names in imported(path, root):
            for n in names:
                other = next((s for s in RUNNER_SIDES if _within(n, s)), None)
                if other is not None and other not in allowed:
                    found.append(f"{path.relative_to(root)}:{line}: {module} ({side or 'shared'}) imports {n}")
                    break
    return found


def test_the_runner_shows_its_trust_boundary_in_its_folders():
    assert {p.name for p in (ROOT / "runner").iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        {"worker", "judge", "serve"}
    assert boundary_violations(ROOT) == []


def test_a_crossing_of_the_boundary_is_found(tmp_path):
    for d in ("runner", "runner/worker", "runner/judge", "runner/serve"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "runner" / "worker" / "side.py").write_text("def f():\n    from ..judge import verdict\n")
    (tmp_path / "runner" / "judge" / "pool.py").write_text("from runner.worker.channel import MAX_FDS\n")
    (tmp_path / "runner" / "schema.py").write_text("from .serve import local\n")
    (tmp_path / "runner" / "serve" / "local.py").write_text("from ..judge import pool\nfrom .. import schema\n")
    assert boundary_violations(tmp_path) == [
        "runner/judge/pool.py:1: runner.judge.pool (runner.judge) imports runner.worker.channel",
        "runner/schema.py:1: runner.schema (shared) imports runner.serve",
        "runner/worker/side.py:2: runner.worker.side (runner.worker) imports runner.judge"]


def project_modules(root: Path) -> dict[str, Path]:
    return {_module_name(p, root): p for package in LAYERS for p in sorted((root / package).rglob("*.py"))}


def private_imports(root: Path) -> list[str]:
    """``from X import _name`` of another module's private name (not a submodule)."""
    mods, found = project_modules(root), []
    for module, path in mods.items():
        bases = {line: n for line, n, _ in imported(path, root)}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = bases.get(node.lineno, "")
            if base.split(".")[0] not in LAYERS:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: {base}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__") and f"{base}.{a.name}" not in mods]
    return found


def import_cycles(root: Path) -> list[list[str]]:
    """Modules that import each other, directly or through others, by any import (at module
    level or inside a function: an import put in a function to break a circle is still one)."""
    mods = project_modules(root)
    graph = {m: sorted({n for _, _, names in imported(p, root) for n in names if n in mods and n != m})
             for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_another_modules_private_names():
    assert private_imports(ROOT) == []


def test_no_import_circles():
    assert import_cycles(ROOT) == []


def test_the_checks_find_a_circle_and_a_private_import(tmp_path):
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "runner" / "a.py").write_text("def f():\n    from .b import g\n")
    (tmp_path / "runner" / "b.py").write_text("from runner.a import f\n_x = 1\n")
    (tmp_path / "runner" / "c.py").write_text("from .b import _x\n")
    assert import_cycles(tmp_path) == [["runner.a", "runner.b"]]
    assert private_imports(tmp_path) == ["runner/c.py:1: runner.b._x"]
