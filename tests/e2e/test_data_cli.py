"""The data fast path as a user takes it: `python -m tfx_hydra.data.to_tfrecord` writes shards from a
configured dataset and prints the overrides; `python -m tfx_hydra` trains from them, tracked."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from tests.helpers import cli_env, mlflow_client, mlflow_runs, run_cli

pytestmark = pytest.mark.slow


def test_convert_to_tfrecord_then_train_from_the_printed_command(tmp_path):
    converted = subprocess.run([sys.executable, "-m", "tfx_hydra.data.to_tfrecord", str(tmp_path / "tfr"),
                                "--shards", "2", "data=digits"], cwd=tmp_path, env=cli_env(), capture_output=True,
                               text=True, timeout=300)
    assert converted.returncode == 0, converted.stderr[-3000:]
    assert "wrote {'train': 1293, 'validation': 144, 'test': 360} examples" in converted.stdout
    command = next(line.strip() for line in converted.stdout.splitlines() if line.strip().startswith("python -m"))
    overrides = shlex.split(command)[3:]  # after `python -m tfx_hydra`
    assert overrides[0] == "data=tfrecord"

    done = run_cli([*overrides, "trainer.epochs=3", "data.map_parallelism=2", "export=none",
                    "export.mlflow_model=false", "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.params["data._target_"] == "tfx_hydra.data.tfrecord"
    assert run.data.metrics["test_accuracy"] > 0.8  # the digits, read back from the shards
    artifacts = {a.path for a in mlflow_client(tmp_path).list_artifacts(run.info.run_id)}
    assert "model_summary" in artifacts and "tensorboard" not in artifacts  # trainer.tensorboard=false
