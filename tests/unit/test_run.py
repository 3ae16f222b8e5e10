"""The run's steps called directly: build errors, compile, train callbacks, NaN stop, the objective."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError, DataError, TrainingError
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.models import mlp
from tfx_hydra.run import build, compile_model, evaluate, sweep_objective, train
from tfx_hydra.schemas import EarlyStoppingConfig, SweepConfig, TrainerConfig
from tfx_hydra.tracking import NullTracker

ADAM = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})


class RecordingTracker(NullTracker):
    """Keeps what would go to MLflow, to assert on it."""

    def __init__(self):
        self.epochs, self.metrics = [], {}

    def log_epoch(self, epoch, logs):
        self.epochs.append((epoch, dict(logs)))

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)


@pytest.fixture
def data():
    return digits([8, 8], 10, batch_size=32, seed=0)


def compiled(trainer: TrainerConfig):
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, ADAM, trainer, HardwareInfo(profile="cpu"))
    return model


def test_build_passes_our_errors_through_unwrapped():
    node = OmegaConf.create({"_target_": "tfx_hydra.models.mlp", "name": "m", "input_shape": [8, 8],
                             "num_classes": 10, "units": -4})
    with pytest.raises(ConfigError, match=r"model.units=-4 is invalid"):
        build(node, "model")


def test_build_names_the_group_of_an_unknown_argument():
    node = OmegaConf.create({"_target_": "tfx_hydra.data.digits", "input_shape": [8, 8], "num_classes": 10,
                             "batch_size": 32, "seed": 0, "colour": "red"})
    with pytest.raises(ConfigError, match=r"cannot build 'data' from its config: .*unexpected keyword argument 'colour'"):
        build(node, "data")


def test_build_reports_data_errors_as_data_errors(tmp_path):
    node = OmegaConf.create({"_target_": "tfx_hydra.data.mnist", "path": str(tmp_path / "x.npz"),
                             "input_shape": [28, 28], "num_classes": 10, "batch_size": 32, "seed": 0})
    with pytest.raises(DataError, match="does not exist"):
        build(node, "data")


def test_a_loss_or_metric_keras_does_not_know_is_a_config_error_at_compile():
    with pytest.raises(ConfigError, match=r"trainer.loss: Keras does not know 'cross_entropyy'"):
        compiled(TrainerConfig(loss="cross_entropyy"))
    with pytest.raises(ConfigError, match=r"trainer.metrics: Keras does not know 'acuracy'"):
        compiled(TrainerConfig(metrics=["acuracy"]))
    assert compiled(TrainerConfig(metrics=["acc", "sparse_top_k_categorical_accuracy"])).compiled


def test_jit_compile_auto_follows_the_hardware_profile():
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, ADAM, TrainerConfig(jit_compile="auto"), HardwareInfo(profile="a100", xla=True))
    assert model.jit_compile is True
    compile_model(model, ADAM, TrainerConfig(jit_compile="auto"), HardwareInfo(profile="cpu", xla=False))
    assert model.jit_compile is False


def test_each_epoch_reaches_tracking_once_with_its_throughput(data):
    tracker = RecordingTracker()
    history = train(compiled(TrainerConfig(epochs=3)), data, TrainerConfig(epochs=3, verbose=False), tracker)
    assert [epoch for epoch, _ in tracker.epochs] == [0, 1, 2]
    logs = tracker.epochs[-1][1]
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec", "epoch_seconds"} <= set(logs)
    assert logs["examples_per_sec"] == pytest.approx(data.num_train / logs["epoch_seconds"])
    assert tracker.metrics["train_examples_per_sec"] > 0
    assert history.history["val_accuracy"][-1] > 0.5


def test_early_stopping_stops_when_the_monitor_stops_improving(data):
    # mode=max on val_loss: a falling loss never "improves", so patience 0 stops after epoch 2.
    trainer = TrainerConfig(epochs=20, verbose=False, early_stopping=EarlyStoppingConfig(
        enabled=True, monitor="val_loss", mode="max", patience=0, restore_best_weights=False))
    history = train(compiled(trainer), data, trainer, RecordingTracker())
    assert len(history.history["loss"]) == 2


def test_a_nan_loss_stops_training_and_fails_with_a_hint(data):
    data.train = data.train.map(lambda x, y: (x * math.nan, y))
    trainer = TrainerConfig(epochs=5, verbose=False)
    with pytest.raises(TrainingError, match=r"the training loss became nan in epoch 1.*\n  Fix: lower "
                                            r"optimizer.learning_rate"):
        train(compiled(trainer), data, trainer, RecordingTracker())


def test_evaluate_adds_the_test_split(data):
    trainer = TrainerConfig(epochs=1, verbose=False)
    model = compiled(trainer)
    history = train(model, data, trainer, RecordingTracker())
    tracker = RecordingTracker()
    metrics = evaluate(model, data, history, tracker)
    assert set(tracker.metrics) == {"test_loss", "test_accuracy"}
    assert metrics["test_accuracy"] == tracker.metrics["test_accuracy"]
    assert metrics["val_accuracy"] == history.history["val_accuracy"][-1]


def test_the_objective_is_the_configured_metric():
    metrics = {"val_accuracy": 0.9, "test_accuracy": 0.8}
    assert sweep_objective(metrics, SweepConfig(metric="test_accuracy")) == 0.8
    with pytest.raises(ConfigError, match=r"sweep.metric=val_auc is not a metric this run produced.\n"
                                          r"  Fix: one of: test_accuracy, val_accuracy"):
        sweep_objective(metrics, SweepConfig(metric="val_auc"))
