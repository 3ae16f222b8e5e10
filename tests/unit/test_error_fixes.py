"""Every pointer an error gives is right: each `Fix:` a user-mistake error suggests (`fix="data.path=..."` in the
code) names keys the composed config has and options its groups have, so pasting a fix never meets "is not a key"."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import REPO, compose

pytestmark = pytest.mark.slow  # composes every option of every group (~20 s)

ERRORS = ("ConfigError", "DataError", "TrackingError", "TrainingError", "ExportError", "ReproduceError",
          "HardwareMismatch", "RequestError")
KEY = re.compile(r"(?<![\w./$+~-])([a-z_][a-z_0-9]*(?:\.[a-z_][a-z_0-9]*)+)=")
OPTION = re.compile(r"(?<![\w./$+~-])([a-z_]+)=([a-z_0-9]+)\b")
NOT_OURS = ("hydra.", "tracking.tags.", "data.augment.")  # Hydra's own node, free-form tag and augmentation maps


def literal_text(node: ast.AST) -> str:
    """The literal parts of a fix: its strings, an f-string's text between its {} (a { } stands for a value)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(literal_text(part) if isinstance(part, ast.Constant) else "\x00" for part in node.values)
    if isinstance(node, ast.BinOp):
        return literal_text(node.left) + literal_text(node.right)
    if isinstance(node, ast.IfExp):
        return literal_text(node.body) + " " + literal_text(node.orelse)
    return "\x00"


def suggested_fixes() -> list[tuple[str, str]]:
    """(where, the fix's literal text) of every error a module of the package raises with a fix."""
    found = []
    for path in sorted((REPO / "tfx_hydra").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ERRORS:
                for keyword in node.keywords:
                    if keyword.arg == "fix":
                        found.append((f"{path.relative_to(REPO)}:{node.lineno}", literal_text(keyword.value)))
    return found


def every_key_and_option() -> tuple[set[str], dict[str, set[str]]]:
    """The dotted keys of the config as each option of each group composes it, and each group's options."""
    from omegaconf import OmegaConf

    options = {group.name: {p.stem for p in group.glob("*.yaml")} for group in (REPO / "conf").iterdir()
               if group.is_dir() and group.name != "hydra"}
    needed = {"data": {"mnist": ["data.path=x.npz"], "csv": ["data.path=x.csv"]}}
    keys = set()

    def walk(node, prefix=""):
        for key, value in node.items():
            keys.add(f"{prefix}{key}")
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    for group, names in options.items():
        for name in names:
            cfg = compose([f"{group}={name}", *needed.get(group, {}).get(name, [])])
            walk(OmegaConf.to_container(cfg, resolve=False))
    return keys, options


def test_every_fix_names_keys_and_options_the_config_has():
    keys, options = every_key_and_option()
    fixes = suggested_fixes()
    assert len(fixes) > 150  # the walk finds the errors' fixes (a refactor that hid them would pass vacuously)
    wrong = []
    for where, text in fixes:
        for key in KEY.findall(text):
            if not key.startswith(NOT_OURS) and key not in keys:
                wrong.append(f"{where}: {key} is no key of the config")
        for group, option in OPTION.findall(text):
            if group in options and option != group and option not in options[group] | {"null", "none"}:  # task=task:
                # a Python call's argument (from_pipelines(..., task=task)), not an override
                wrong.append(f"{where}: {group}={option} is no option of '{group}'")
    assert wrong == []


def test_a_group_set_as_one_value_names_its_switch():
    """`trainer.early_stopping=null` meant the switch: the error says `trainer.early_stopping.enabled=false`."""
    from tfx_hydra.errors import ConfigError
    from tfx_hydra.settings.checked import validate

    for given, fix in (("trainer.early_stopping=null", "trainer.early_stopping.enabled=false"),
                       ("trainer.keep_best=false", "trainer.keep_best.enabled=false")):
        with pytest.raises(ConfigError) as said:
            validate(compose([given]))
        assert "is a group of settings" in said.value.message and said.value.fix.startswith(fix), given
