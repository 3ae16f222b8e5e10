"""--help, --cfg job and a config typo never import TensorFlow, Keras or MLflow."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import cli_env

HEAVY = ("tensorflow", "keras", "mlflow")


def imported_modules(args: list[str], cwd) -> tuple[set[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tfx_hydra", *args], cwd=cwd,
                          env=cli_env(), capture_output=True, text=True, timeout=120)
    modules = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s+(\S+)$", done.stderr, re.M)}
    return modules, done


@pytest.mark.parametrize("args,expected", [
    (["--help"], "== Configuration groups =="),
    (["--cfg", "job"], "_target_: tfx_hydra.models.mlp"),
])
def test_help_and_cfg_do_not_import_heavy_libraries(args, expected, tmp_path):
    modules, done = imported_modules(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
    assert "hydra" in modules and "tfx_hydra" in modules  # the measurement works
    assert modules.isdisjoint(HEAVY), modules & set(HEAVY)


@pytest.mark.parametrize("typo, message", [
    (["trainer.epochs=abc"], "ConfigError: trainer.epochs got 'abc'"),
    (["optimizer.learning_rate=-1"], "ConfigError: optimizer.learning_rate=-1 is out of range"),
    (["export=[tflite]", "export.tflite.quantization=int4"], "ConfigError: export.tflite.quantization=int4"),
    (["data.shard_policy=files"], "ConfigError: data.shard_policy=files is unknown"),
])
def test_a_typo_fails_before_tensorflow_is_imported(tmp_path, typo, message):
    modules, done = imported_modules([*typo, "tracking=none"], tmp_path)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr[-2000:]
    assert modules.isdisjoint(HEAVY), modules & set(HEAVY)
    assert not (tmp_path / "mlflow.db").exists()
