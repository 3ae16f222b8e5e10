"""The experiment= recipes end to end on tiny local data (nothing here is downloaded): each composes
what its file says and trains. The recipes' real datasets (Fashion-MNIST, CIFAR-10, a TF Hub model)
need the network; offline, a recipe without a local copy fails with the data step's message."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import mlflow_client, mlflow_runs, run_cli, save_tiny_hub_model, write_mnist_npz
from tests.helpers.in_process import run_cli_in_process
from tests.unit.test_data_sources import write_images
from tfx_hydra.data.to_tfrecord import main as to_tfrecord

pytestmark = pytest.mark.slow
TINY = ["trainer.epochs=1", "data.limit=256", "export.mlflow_model=false", "trainer.backup=false",
        "tracking.system_metrics.enabled=false"]


def test_cnn_fashion_mnist_trains_from_a_local_copy(tmp_path):
    """(Without one, offline: the download's DataError naming data.path, tests/unit/test_data.py.)"""
    done = run_cli_in_process(["experiment=cnn_fashion_mnist", f"data.path={write_mnist_npz(tmp_path / 'fashion.npz')}",
                    *TINY, "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.params["model._target_"] == "tfx_hydra.models.cnn"
    assert run.data.params["data.name"] == "fashion_mnist"
    assert run.data.params["trainer.early_stopping.enabled"] == "True" and run.data.params["trainer.batch_size"] == "64"


def test_resnet_cifar10_augments_and_follows_the_profiles_precision(tmp_path):
    rng = np.random.default_rng(0)
    y_train, y_test = rng.integers(0, 10, 300), rng.integers(0, 10, 60)
    images = lambda y: (rng.integers(0, 60, (len(y), 32, 32, 3)) + 19 * y[:, None, None, None]).astype("uint8")  # noqa: E731
    np.savez(tmp_path / "cifar10.npz", x_train=images(y_train), y_train=y_train.reshape(-1, 1),
             x_test=images(y_test), y_test=y_test.reshape(-1, 1))
    done = run_cli_in_process(["experiment=resnet_cifar10", f"data.path={tmp_path / 'cifar10.npz'}",
                               "model.stages=[8,16]", "model.blocks_per_stage=1", *TINY, "trainer.epochs=4",
                               "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.params["data.augmentation.flip"] == "horizontal"
    # the recipe: SGD + Nesterov, cosine after 2 warmup epochs, decoupled decay sparing biases/norms, smoothing
    params = run.data.params
    assert (params["optimizer._target_"], params["optimizer.nesterov"], params["optimizer.weight_decay"],
            params["optimizer.decay_biases_and_norms"]) == ("keras.optimizers.SGD", "True", "0.005", "False")
    assert (params["lr_schedule.name"], params["lr_schedule.warmup_epochs"]) == ("cosine", "2")
    assert params["trainer.label_smoothing"] == "0.1" and "train.best_epoch" in run.data.tags
    rates = [m.value for m in sorted(mlflow_client(tmp_path).get_metric_history(run.info.run_id, "lr"),
                                     key=lambda m: m.step)]
    assert len(rates) == 4 and rates[0] < rates[1] == pytest.approx(0.1, rel=1e-2) and rates[1] > rates[2] > rates[3]
    assert run.data.tags["precision.policy"] == "float32"  # precision=auto on the cpu profile; a GPU profile's below
    assert "precision: float32 (precision=auto: the cpu profile's)" in done.stdout
    on_a100 = run_cli_in_process(["experiment=resnet_cifar10", "hardware=a100", "--cfg", "job", "--package",
                                  "precision"], cwd=tmp_path)
    assert on_a100.returncode == 0 and "policy: auto" in on_a100.stdout  # resolved from the a100 profile at run time


def test_hub_transfer_trains_the_head_then_fine_tunes_on_an_image_folder(tmp_path):
    folder = write_images(tmp_path / "pets", {"cats": [(10, 10)] * 20, "dogs": [(10, 10)] * 20})
    handle = save_tiny_hub_model(tmp_path / "hub", input_shape=(8, 8, 3))
    done = run_cli_in_process(["experiment=hub_transfer", f"data.directory={folder}", "data.num_classes=2",
                               "data.input_shape=[8,8,3]", f"model.handle={handle}", "model.resize_to=null",
                               "model.channels=null", "trainer.epochs=2", "trainer.finetune_epochs=2",
                               "trainer.batch_size=8", "export=none", "export.mlflow_model=false",
                               "trainer.backup=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch 1/4" in done.stdout and "fine-tuning: backbone unfrozen" in done.stdout
    (run,) = mlflow_runs(tmp_path)
    assert run.data.params["model.freeze_backbone"] == "True"
    assert run.data.params["optimizer._target_"] == "keras.optimizers.AdamW"
    rates = [m.value for m in sorted(mlflow_client(tmp_path).get_metric_history(run.info.run_id, "lr"),
                                     key=lambda m: m.step)]  # each phase warms up to its own peak, then decays
    assert rates[0] == pytest.approx(1e-3, rel=1e-2) and rates[1] < rates[0] / 10  # warmed up, then decayed
    assert rates[2] == pytest.approx(1e-4, rel=1e-2) and rates[3] < rates[2] / 10  # again, from a tenth
    assert run.data.params["data.augmentation.flip"] == "horizontal"


def test_tfrecord_multi_worker_runs_as_a_single_worker_without_a_cluster(tmp_path):
    """The Slurm recipe outside Slurm and without -m: its launcher is not used, and
    strategy.cluster=tf_config without TF_CONFIG makes MultiWorkerMirroredStrategy one local worker."""
    assert to_tfrecord([str(tmp_path / "tfr"), "--shards", "2", "data=digits"]) == 0
    # a subprocess: MultiWorkerMirroredStrategy configures collectives at TensorFlow's start-up
    done = run_cli(["experiment=tfrecord_multi_worker", f"data.train_files={tmp_path / 'tfr'}/train-*.tfrecord",
                    f"data.validation_files={tmp_path / 'tfr'}/validation-*.tfrecord",
                    f"data.test_files={tmp_path / 'tfr'}/test-*.tfrecord", "data.input_shape=[8,8]",
                    "data.num_classes=10", "data.raw_scale=0.0625", "strategy.cluster=tf_config", *TINY,
                    "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["strategy"] == "CollectiveAllReduceStrategy"  # MultiWorkerMirroredStrategy's class
    assert run.data.params["data.shard_policy"] == "file" and run.data.params["data.cache"] == "False"
