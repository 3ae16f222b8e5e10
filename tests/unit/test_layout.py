"""The layout ARCHITECTURE.md describes, held against the code: every config group has its module,
every data source and exporter its own file, sweep code lives under sweeps/, tracking imports no
step, imports run one way (down) and form no circle, modules stay small, and the Layout page
(docs/explanation/layout.md) and pyproject's package list name what is there."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import tomllib
import yaml

from tests.helpers import REPO

PACKAGE = REPO / "tfx_hydra"
# groups whose options are presets of other groups' keys, or Hydra's own: no code of their own
PRESET_GROUPS = {"experiment", "hydra"}
# a package of builders; a sweep's; a piece of training
MODULE_OF_GROUP = {"model": "models", "hparams_search": "sweeps/hparams_search", "debug": "trainer/debug"}
MAX_LINES = 300

# Imports run down this list, never up; within one layer any direction, as long as there is no circle.
LAYERS = [
    ("entrypoint", {"tfx_hydra.__main__"}),
    ("commands", {"tfx_hydra.run", "tfx_hydra.reproduce", "tfx_hydra.sync", "tfx_hydra.data.to_tfrecord",
                  "tfx_hydra.new_project", "tfx_hydra.promote"}),
    ("steps", {"tfx_hydra.hardware", "tfx_hydra.strategy", "tfx_hydra.data", "tfx_hydra.models", "tfx_hydra.optimizer",
               "tfx_hydra.trainer", "tfx_hydra.export", "tfx_hydra.records", "tfx_hydra.reports", "tfx_hydra.plots",
               "tfx_hydra.environment", "tfx_hydra.sweeps", "tfx_hydra.code_state", "tfx_hydra.task",
               "tfx_hydra.lr_schedule", "tfx_hydra.cv", "tfx_hydra.job", "tfx_hydra.peak", "tfx_hydra.threads",
               "tfx_hydra.losses"}),  # a moved path kept importable until 0.3.0
    ("tracking", {"tfx_hydra.tracking"}),
    # the vocabulary every layer speaks (precision.py spells the dtype policies the schemas check; it
    # imports Keras only inside the function that sets one)
    ("foundations", {"tfx_hydra.settings", "tfx_hydra.console", "tfx_hydra.process", "tfx_hydra.metrics",
                     "tfx_hydra.precision", "tfx_hydra.errors", "tfx_hydra.user_cache"}),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """tfx_hydra modules `path` imports, at the top or inside functions (the package root left out:
    `from tfx_hydra import sweeps` imports tfx_hydra.sweeps)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tfx_hydra"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("tfx_hydra"))
    return (names & set(modules())) - {"tfx_hydra"}


def layer_of(module: str) -> int:
    """The layer of the longest listed name `module` starts with (tfx_hydra.data.to_tfrecord before tfx_hydra.data)."""
    matches = [(len(name), index) for index, (_, names) in enumerate(LAYERS) for name in names
               if module == name or module.startswith(name + ".")]
    assert matches, f"{module} is in no layer of test_layout.LAYERS: place it"
    return max(matches)[1]


def test_every_config_group_has_the_module_of_its_name():
    groups = [p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name not in PRESET_GROUPS | {"__pycache__"}]
    for group in groups:
        name = MODULE_OF_GROUP.get(group, group)
        assert (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists(), group


@pytest.mark.parametrize("group", ["data", "export", "model"])
def test_every_data_source_exporter_and_model_lives_in_the_module_of_its_option(group):
    """One option, one file, named as the option is typed: conf/data/csv.yaml builds tfx_hydra/data/csv.py's
    factory, model=cnn tfx_hydra/models/cnn.py's; a preset of another option (model=hub_mobilenet_v3 is
    model=hub with a handle) builds that option's."""
    from hydra.utils import get_object

    checked = 0
    for option in sorted((REPO / "conf" / group).glob("*.yaml")):
        target = (yaml.safe_load(option.read_text()) or {}).get("_target_")
        if target is None:  # an option that inherits another's factory (mnist: keras) or selects none
            continue
        builder = target.rsplit(".", 1)[-1]
        own = option.stem if builder == option.stem or not (option.parent / f"{builder}.yaml").exists() else builder
        source = Path(inspect.getsourcefile(get_object(target)))
        folder = MODULE_OF_GROUP.get(group, group)
        assert source == PACKAGE / folder / f"{own}.py", f"{group}={option.stem}: {target} is in {source}"
        checked += 1
    assert checked >= 5


def test_sweep_code_lives_under_sweeps_only():
    sweeps = PACKAGE / "sweeps"
    outside = {name: path for name, path in modules().items() if sweeps not in path.parents}
    for name, path in outside.items():
        assert not re.search(r"sweep|search", path.relative_to(PACKAGE).as_posix()), name
        text = path.read_text()
        tree = ast.parse(text)
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        foreign = {m for m in imported if m.split(".")[0] in ("optuna", "optuna_integration")
                   or m in ("hydra.experimental.callback", "hydra.plugins.sweeper")}
        assert not foreign, f"{name} imports {foreign}: sweep code belongs under tfx_hydra/sweeps"
        assert "mlflow.parentRunId" not in text, f"{name} spells the parent tag: ask sweeps.parent"
    queries = [name for name, path in modules().items() if "mlflow.parentRunId" in path.read_text()]
    assert queries == ["tfx_hydra.sweeps.parent"]  # one place holds the query for a parent's children


def test_training_imports_nothing_of_the_search():
    """The search is a client of training: it hands the trainer its pruning callback; nothing in trainer/ (fit,
    the callbacks, the backups) reaches into sweeps/."""
    training = {name: path for name, path in modules().items() if name.startswith("tfx_hydra.trainer")}
    assert len(training) > 15
    for name, path in training.items():
        assert not {m for m in imports_of(path) if m.startswith("tfx_hydra.sweeps")}, name


def test_every_keras_callback_lives_in_trainer_callbacks_or_the_search_that_hands_it_in():
    """A newcomer looking for what runs at an epoch's end finds it in trainer/callbacks/ (the search's pruning
    callback is the search's own, handed to training)."""
    found = 0
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(re.search(r"callbacks\.\w+$|PruningCallback$", ast.unparse(base))
                                                      for base in node.bases):
                found += 1
                assert name.startswith(("tfx_hydra.trainer.callbacks.", "tfx_hydra.sweeps.")), \
                    f"{name}.{node.name} is a Keras callback outside trainer/callbacks/"
    assert found >= 10


def test_tracking_imports_no_step():
    foundations = LAYERS[-1][1]
    for name, path in modules().items():
        if name.startswith("tfx_hydra.tracking"):
            for target in imports_of(path):
                assert target.startswith("tfx_hydra.tracking") or layer_of(target) == len(LAYERS) - 1, \
                    f"{name} imports {target}: tracking is MLflow plumbing, below every step ({sorted(foundations)})"


def test_imports_run_down_the_layers():
    upward = [f"{name} -> {target}" for name, path in modules().items() for target in imports_of(path)
              if not name.startswith(target + ".") and layer_of(target) < layer_of(name)]
    assert upward == []


def test_nothing_but_the_entrypoint_imports_the_orchestrator():
    importers = sorted(name for name, path in modules().items() if "tfx_hydra.run" in imports_of(path))
    assert importers == ["tfx_hydra.__main__"]


def test_run_holds_the_sequence_only():
    tree = ast.parse((PACKAGE / "run.py").read_text())
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["run", "preflight", "evaluate_export"]


def test_run_names_no_sweep_and_returns_one_result_type():
    """The search is a client of the run: run() takes the job it works for and returns a RunResult, whoever
    called it; a sweep's or a trial's part comes through the job's hooks (job.py)."""
    path = PACKAGE / "run.py"
    assert not {m for m in imports_of(path) if m.startswith("tfx_hydra.sweeps")}
    code = "\n".join(line.split("#")[0] for line in path.read_text().split('"""\n\nfrom __future__')[1].splitlines())
    assert not re.search(r"\bsweeps\b|trial|optuna|prun", code, re.IGNORECASE)
    (function,) = [node for node in ast.parse(path.read_text()).body if getattr(node, "name", None) == "run"]
    assert ast.unparse(function.returns) == "RunResult"
    assert [ast.unparse(a.annotation) for a in function.args.args] == ["DictConfig", "Job | None"]


def test_no_module_is_over_300_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
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


def layout_page_of_the_package() -> list[str]:
    """The lines of the Layout page's block that describe tfx_hydra/ (the indented ones under it)."""
    readme = (REPO / "docs" / "explanation" / "layout.md").read_text()
    section = readme[readme.index("# Layout"):]
    block = section[section.index("```") + 4:section.index("```", section.index("```") + 3)].splitlines()
    start = next(i for i, line in enumerate(block) if line.startswith("tfx_hydra/"))
    end = next(i for i, line in enumerate(block[start + 1:], start + 1) if not line.startswith(" "))
    return block[start + 1:end]


def test_the_layout_page_names_every_module_and_package_and_nothing_else():
    named = set()
    for line in layout_page_of_the_package():
        if line.startswith("   "):  # a description's second line
            continue
        names = line.strip().split("  ")[0]  # the names, then two spaces and what they are
        named |= {word for word in names.split() if word.endswith((".py", "/"))}
    there = {p.name + ("/" if p.is_dir() else "") for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert named == there, f"missing from the Layout page: {sorted(there - named)}; not there: {sorted(named - there)}"


def test_pyproject_ships_every_package():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(p.parent.relative_to(REPO).parts) for root in ("tfx_hydra", "hydra_plugins")
                for p in (REPO / root).rglob("__init__.py")}
    assert packages - listed == set()
    assert listed - packages == {"tfx_hydra.conf", "hydra_plugins"}  # conf/ mapped in; the namespace package
