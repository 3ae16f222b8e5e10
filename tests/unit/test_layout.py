"""The layout ARCHITECTURE.md describes, held against the code: every config group has its module,
nothing imports the orchestrator, modules stay small, and the package imports form no circle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "tfx_hydra"
# groups whose options are presets of other groups' keys, or Hydra's own: no code of their own
PRESET_GROUPS = {"experiment", "hydra"}
MODULE_OF_GROUP = {"model": "models"}  # the one plural: a package of model builders


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """tfx_hydra modules `path` imports, at the top or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tfx_hydra"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("tfx_hydra"))
    return names & set(modules())


def test_every_config_group_has_the_module_of_its_name():
    groups = [p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name not in PRESET_GROUPS]
    for group in groups:
        name = MODULE_OF_GROUP.get(group, group)
        assert (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists(), group


def test_nothing_but_the_entrypoint_imports_the_orchestrator():
    importers = sorted(name for name, path in modules().items() if "tfx_hydra.run" in imports_of(path))
    assert importers == ["tfx_hydra.__main__"]


def test_run_holds_the_sequence_only():
    tree = ast.parse((PACKAGE / "run.py").read_text())
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["run", "preflight", "evaluate_export"]


def test_no_module_is_over_450_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 450}
    assert long == {}


def test_the_package_imports_form_no_circle():
    graph = {name: imports_of(path) - {name} for name, path in modules().items()}
    graph = {name: {m for m in targets if not name.startswith(m + ".")} for name, targets in graph.items()}
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            assert state.get(target) != "open", " -> ".join([*trail, name, target])
            if target not in state:
                visit(target, [*trail, name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
