"""A user's project is found from where they work: the [tool.tfx_hydra] table of the nearest
pyproject.toml (or $TFX_HYDRA_PROJECT's), its config folder on Hydra's search path after ours, its code
importable; a table that names missing folders, or a broken file of ours, is one ConfigError."""

from __future__ import annotations

import os
import sys

import pytest

from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.compose import compose, group_options
from tfx_hydra.settings.project import ENV_VAR, activate, find_project


def make_project(root, table='[tool.tfx_hydra]\nconfig_dir = "conf"\n', option="tiny"):
    (root / "conf" / "model").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "x"\n\n' + table)
    (root / "conf" / "model" / f"{option}.yaml").write_text("defaults:\n  - mlp\n  - _self_\nname: tiny\nunits: 7\n")
    return root


def test_the_nearest_project_upwards_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    root = make_project(tmp_path / "proj")
    (root / "deep" / "er").mkdir(parents=True)
    project = find_project(str(root / "deep" / "er"))
    assert project.root == str(root) and project.config_dir == str(root / "conf")
    assert project.python_path == (str(root),) and project.search_path == f"file://{root / 'conf'}"
    assert find_project(str(tmp_path)) is None  # outside it: no project


def test_a_pyproject_without_our_table_is_not_a_project(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\n[tool.ruff]\nline-length = 99\n')
    assert find_project(str(tmp_path)) is None
    (tmp_path / "pyproject.toml").write_text('[project\nname = "broken, not ours"\n')
    assert find_project(str(tmp_path)) is None  # someone else's broken file is not ours to judge


def test_the_projects_options_join_ours_and_inherit_them(tmp_path, monkeypatch):
    root = make_project(tmp_path / "proj")
    monkeypatch.setenv(ENV_VAR, str(root))
    assert "tiny" in group_options("model") and "mlp" in group_options("model")
    cfg = compose(["model=tiny"])
    assert cfg.model._target_ == "tfx_hydra.models.mlp" and cfg.model.units == 7 and cfg.model.layers == 1
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert "tiny" not in group_options("model")  # the project is found only from inside it


def test_activate_puts_the_projects_code_first_for_this_process_and_its_children(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    root = make_project(tmp_path, table='[tool.tfx_hydra]\nconfig_dir = "conf"\npython_path = ["src"]\n')
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv(ENV_VAR, raising=False)
    activate(find_project(str(root)))
    assert sys.path[0] == str(root / "src")
    assert os.environ["PYTHONPATH"] == os.pathsep.join([str(root / "src"), "/elsewhere"])


@pytest.mark.parametrize("table, message, fix", [
    ('config_dir = "configs"', 'config_dir = "configs" in {pyproject} [tool.tfx_hydra]: {root}/configs does not exist.',
     "Fix: create {root}/configs"),
    ('config_dir = "conf"\npython_path = ["src"]', "python_path in {pyproject} [tool.tfx_hydra] names {root}/src, "
     "which does not exist.", "Fix: list the folders the project's packages are in"),
    ('config_dir = "conf"\npython_path = "src"', "python_path='src' in {pyproject} [tool.tfx_hydra] is not a list of "
     "folders.", 'Fix: python_path = ["."]'),
    ('config_dir = 3', "config_dir=3 in {pyproject} [tool.tfx_hydra] is not a folder name.",
     'Fix: config_dir = "conf"'),
    ('config_dir = "conf', "{pyproject} cannot be read: ", "Fix: fix the TOML syntax of the file"),
])
def test_a_table_that_cannot_work_is_one_clear_error(tmp_path, monkeypatch, table, message, fix):
    monkeypatch.delenv(ENV_VAR, raising=False)
    root = make_project(tmp_path, table="[tool.tfx_hydra]\n" + table + "\n")
    with pytest.raises(ConfigError) as raised:
        find_project(str(root))
    said = str(raised.value)
    assert message.format(pyproject=root / "pyproject.toml", root=root) in said, said
    assert fix.format(root=root) in said, said


def test_a_named_project_that_is_none_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(ConfigError, match=f"{ENV_VAR}={tmp_path} is not a tfx_hydra project: "
                       f"{tmp_path}/pyproject.toml has no \\[tool.tfx_hydra\\] table"):
        find_project()
