"""The data fast path as a user takes it: the converter (`python -m tfx_hydra.data.to_tfrecord`, its
main() called here in-process) writes shards from a configured dataset and prints the overrides;
`python -m tfx_hydra` trains from them in a subprocess, tracked."""

from __future__ import annotations

import shlex

import pytest

from tests.helpers import mlflow_client, mlflow_runs, run_cli
from tfx_hydra.data.to_tfrecord import main as to_tfrecord

pytestmark = pytest.mark.slow


def test_convert_to_tfrecord_then_train_from_the_printed_command(tmp_path, capsys):
    assert to_tfrecord([str(tmp_path / "tfr"), "--shards", "2", "data=digits"]) == 0
    printed = capsys.readouterr().out
    assert "wrote {'train': 1293, 'validation': 144, 'test': 360} examples" in printed
    command = next(line.strip() for line in printed.splitlines() if line.strip().startswith("python -m"))
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


def test_the_converter_reports_user_mistakes_without_a_traceback(capsys, tmp_path):
    assert to_tfrecord([str(tmp_path), "--shards", "0", "data=digits"]) == 1
    assert "Error: ConfigError: --shards=0: expected at least 1." in capsys.readouterr().err
    assert to_tfrecord([str(tmp_path), "data=imagenet"]) == 1
    assert "Could not find 'data/imagenet'" in capsys.readouterr().err
    assert to_tfrecord([str(tmp_path), "data=mnist", f"data.path={tmp_path}/missing.npz"]) == 1
    assert f"DataError: data.path={tmp_path}/missing.npz does not exist." in capsys.readouterr().err
