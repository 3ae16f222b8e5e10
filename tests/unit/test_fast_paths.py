"""--help, --cfg job and a config typo never import TensorFlow, Keras or MLflow."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, cli_env

HEAVY = ("tensorflow", "keras", "mlflow", "optuna")  # optuna: Hydra imports our sweeper plugin for --help too


def imported_modules(args: list[str], cwd) -> tuple[set[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tfx_hydra", *args], cwd=cwd,
                          env=cli_env(), capture_output=True, text=True, timeout=120)
    modules = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s+(\S+)$", done.stderr, re.M)}
    return modules, done


@pytest.mark.parametrize("args,expected", [
    (["--help"], "Groups (group=option):"),
    (["--cfg", "job"], "_target_: tfx_hydra.models.mlp"),
    (["init", "new-project"], "init: wrote 10 files into "),
])
def test_help_and_cfg_do_not_import_heavy_libraries(args, expected, tmp_path):
    modules, done = imported_modules(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
    assert "hydra" in modules and "tfx_hydra" in modules  # the measurement works
    assert modules.isdisjoint(HEAVY), modules & set(HEAVY)


@pytest.mark.fresh_store
@pytest.mark.parametrize("typo, message", [
    (["trainer.epochs=abc"], "ConfigError: trainer.epochs got 'abc'"),
    (["optimizer.learning_rate=-1"], "ConfigError: optimizer.learning_rate=-1 is out of range"),
    (["export=[tflite]", "export.tflite.quantization=int4"], "ConfigError: export.tflite.quantization=int4"),
    (["data.shard_policy=files"], "ConfigError: data.shard_policy=files is not one of"),
    (["trainer.epoch=3"], "ConfigError: trainer.epoch is not a key of 'trainer'"),
    (["data=mnst"], "ConfigError: data=mnst is not an option of 'data'"),
])
def test_a_typo_fails_before_tensorflow_is_imported(tmp_path, typo, message):
    modules, done = imported_modules([*typo, "tracking=none"], tmp_path)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr[-2000:]
    assert modules.isdisjoint(HEAVY), modules & set(HEAVY)
    assert not (tmp_path / "mlflow.db").exists()


def test_help_names_the_app_opens_with_first_commands_and_lists_every_group(tmp_path):
    from tfx_hydra.settings.compose import group_options

    done = subprocess.run([sys.executable, "-m", "tfx_hydra", "--help"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tfx_hydra: ") and "__main__" not in done.stdout and "powered by" not in done.stdout
    commands = lines[lines.index("First commands:") + 1:lines.index("Groups (group=option):")]
    assert commands[0].strip().split("  ")[0] == "python -m tfx_hydra"
    assert any(" -m " in line for line in commands) and any(line.strip().startswith("mlflow ui") for line in commands)
    listed = {line.split(": ", 1)[0]: line.split(": ", 1)[1].split(", ") for line in lines
              if re.match(r"^[\w/]+: ", line) and not line.startswith("tfx_hydra")}
    groups = [p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__")]
    for group in [*groups, "hydra/launcher", "hydra/sweeper", "hydra/job_logging"]:
        assert listed[group] == group_options(group), group  # every option a user can select
    assert {"parallel", "local_gpus", "slurm"} <= set(listed["hydra/launcher"])
    assert "hparams_search" in listed


def test_hydra_help_names_the_installed_command_not_a_file(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tfx_hydra", "--hydra-help"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert 'eval "$(tfx-hydra -sc install=bash)"' in done.stdout
    assert "__main__.py" not in done.stdout


def test_version_is_one_value_the_command_the_package_and_the_install_agree_on(tmp_path):
    from importlib import metadata

    import tfx_hydra

    modules, done = imported_modules(["--version"], tmp_path)
    assert done.returncode == 0 and done.stdout == f"tfx_hydra {tfx_hydra.__version__}\n", done.stderr[-2000:]
    assert modules.isdisjoint(HEAVY), modules & set(HEAVY)
    assert metadata.version("tfx_hydra") == tfx_hydra.__version__  # pyproject.toml reads the same line
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## [{tfx_hydra.__version__}] - " in changelog  # the release this is, said in the changelog
