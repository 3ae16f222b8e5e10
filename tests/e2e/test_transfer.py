"""Transfer learning through the CLI: a TF Hub backbone (a SavedModel the test saves) frozen for
the head's epochs, then fine-tuned, on TFRecords the converter wrote; one MLflow run with both phases,
the model summary, TensorBoard logs (scalars, histograms, graph), and exports that save and reload
the hub layer."""

from __future__ import annotations

import os
import shlex
import signal
import threading
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import compose, mlflow_client, mlflow_runs, save_tiny_hub_model, wait_for_backup_of_epoch
from tests.helpers.in_process import run_cli_in_process
from tfx_hydra.data.to_tfrecord import main as to_tfrecord
from tfx_hydra.run import run

pytestmark = pytest.mark.slow


def test_head_then_fine_tuning_in_one_tracked_run_from_converted_tfrecords(tmp_path, capsys):
    """Also the data fast path as a user takes it: the converter (its main(), in-process) writes the
    digits as TFRecord shards and prints the overrides that read them; the CLI trains from those."""
    assert to_tfrecord([str(tmp_path / "tfr"), "--shards", "2", "data=digits"]) == 0
    printed = capsys.readouterr().out
    assert "wrote {'train': 1293, 'validation': 144, 'test': 360} examples" in printed
    command = next(line.strip() for line in printed.splitlines() if line.strip().startswith("python -m"))
    data_overrides = shlex.split(command)[3:]  # after `python -m tfx_hydra`: the data option written beside the files
    assert data_overrides == [f"hydra.searchpath=[file://{tmp_path / 'tfr'}]", "data=tfr"]
    handle = save_tiny_hub_model(tmp_path / "hub_model")
    done = run_cli_in_process([*data_overrides, "model=hub", f"model.handle={handle}", "trainer.epochs=2",
                               "trainer.finetune_epochs=2", "trainer.finetune_lr=0.0005",
                               "optimizer.learning_rate=0.01", "data.limit=320", "data.map_parallelism=2",
                               "export=[savedmodel,keras]", "export.mlflow_model=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch 2/4" in done.stdout and "epoch 4/4" in done.stdout
    assert "fine-tuning: backbone unfrozen (4 trainable weights), learning rate 0.0005, 2 more epochs" in done.stdout
    (run,) = mlflow_runs(tmp_path)
    client = mlflow_client(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.params["data._target_"] == "tfx_hydra.data.tfrecord"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "epoch/val_loss")] == [0, 1, 2, 3]  # both phases
    tags = run.data.tags
    head = 16 * 10 + 10  # the softmax head on 16 hub features
    assert tags["model.params.trainable"] == str(head)  # phase one: the hub backbone frozen
    assert tags["model.params.total"] == str(head + 64 * 16 + 16 + 16)
    assert tags["model.params.trainable_finetune"] == str(head + 64 * 16 + 16)  # moving mean stays non-trainable
    assert float(tags["finetune.learning_rate"]) == pytest.approx(0.0005)
    assert float(tags["optimizer.learning_rate"]) == pytest.approx(0.01)  # phase one's, kept
    assert "train_seconds" in run.data.metrics and "finetune_seconds" in run.data.metrics
    assert float(run.data.tags["export.keras.max_abs_diff"]) < 1e-5  # the .keras file reloads the hub layer

    artifacts = Path(run.info.artifact_uri)
    summary = (artifacts / "model_summary" / "summary.txt").read_text()
    assert "backbone (HubLayer)" in summary and "Total params" in summary
    assert (artifacts / "export" / "hub" / "1" / "saved_model.pb").is_file()  # as on disk: export/<model>/<version>
    assert_tensorboard_logs(artifacts / "tensorboard")


def assert_tensorboard_logs(folder: Path) -> None:
    """Scalars per epoch for all four epochs, weight histograms and the graph, as TensorBoard reads them."""
    train = EventAccumulator(str(folder / "train"), size_guidance={"tensors": 0}).Reload()
    tags = train.Tags()
    assert tags["graph"] is True and "keras" in tags["tensors"]  # op-level and conceptual graphs
    assert [e.step for e in train.Tensors("epoch_loss")] == [0, 1, 2, 3]
    histograms = [t for t in tags["tensors"] if t.endswith("histogram")]
    assert any("predictions" in t for t in histograms), histograms
    validation = EventAccumulator(str(folder / "validation"), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in validation.Tensors("epoch_accuracy")] == [0, 1, 2, 3]


def test_a_run_interrupted_while_fine_tuning_resumes_in_that_phase(tmp_path):
    """Ctrl-C (a real SIGINT) after the first fine-tuning epoch's backup; the same config run again
    continues the same MLflow run in phase two, without training the head again."""
    handle = save_tiny_hub_model(tmp_path / "hub_model")
    overrides = ["model=hub", f"model.handle={handle}", "data=synthetic", "data.num_examples=30000",
                 "trainer.epochs=1", "trainer.finetune_epochs=4", "export=none", "export.mlflow_model=false",
                 "trainer.tensorboard=false"]

    def ctrl_c_after_the_first_fine_tuning_epoch():
        wait_for_backup_of_epoch(tmp_path / "out" / "backup" / "finetune", 2)  # epochs 1 (head) and 2 done
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_after_the_first_fine_tuning_epoch, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run(compose(overrides, launch_dir=tmp_path))
    (killed,) = mlflow_runs(tmp_path)
    assert killed.info.status == "KILLED" and killed.data.tags["error"] == "interrupted (SIGINT)"

    run(compose(overrides, launch_dir=tmp_path))
    (resumed,) = mlflow_runs(tmp_path)
    assert resumed.info.run_id == killed.info.run_id and resumed.info.status == "FINISHED"
    assert "error" not in resumed.data.tags and resumed.data.tags["resume.interrupted_by"] == "interrupted (SIGINT)"
    history = mlflow_client(tmp_path).get_metric_history(resumed.info.run_id, "epoch/val_loss")
    assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]  # each epoch once: the head's was not redone
    assert "train_seconds" in killed.data.metrics and "finetune_seconds" in resumed.data.metrics
    assert not (tmp_path / "out" / "backup").exists()  # both phases' backups gone after success
