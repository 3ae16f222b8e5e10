"""trainer.keep_best: the run ends with its best epoch's weights (what it then evaluates and exports), not
the last epoch's; the best-so-far survives a kill; it cannot be combined with EMA; its monitor is checked."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers import compose
from tests.helpers.fakes import PlantedKill, RecordingTracker, StopAfterEpoch
from tests.helpers.planted import Scramble
from tests.helpers.training import settings_with, setup_with
from tfx_hydra.errors import ConfigError
from tfx_hydra.models import mlp
from tfx_hydra.settings.checked import validate
from tfx_hydra.settings.schemas import KeepBestConfig, TrainerConfig
from tfx_hydra.trainer import compile_model, train

ADAM = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})


def model_for(settings):
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
    compile_model(model, ADAM, settings, setup_with(), RecordingTracker())
    return model


def validation_loss(model, data) -> float:
    return float(model.evaluate(data.validation, verbose=0, return_dict=True)["loss"])


def test_the_run_ends_with_the_best_epochs_weights_not_the_last(data):
    keras.utils.set_random_seed(3)
    settings = settings_with(TrainerConfig(epochs=8, verbose=False, backup=False,
                                           keep_best=KeepBestConfig(enabled=True, monitor="val_loss")))
    tracker = RecordingTracker()
    model = model_for(settings)
    history = train(model, data, settings.trainer, tracker, users=[Scramble(at=5)]).history["val_loss"]
    best = int(np.argmin(history))
    assert best != len(history) - 1, history  # the setup makes a later epoch worse: else the test proves nothing
    assert validation_loss(model, data) == pytest.approx(history[best], rel=1e-5)  # the best epoch's model
    assert tracker.tags["train.best_epoch"] == best + 1 and tracker.tags["train.best_val_loss"] == history[best]


def test_a_metric_best_high_keeps_its_highest_epoch_on_a_model_never_run_before(data):
    """The direction of val_accuracy is read from the compiled metric once Keras has built it (on the first
    batch): read at train begin it was unknown, taken as best low, and the worst epoch was kept (CPU run)."""
    keras.utils.set_random_seed(3)
    settings = settings_with(TrainerConfig(epochs=8, verbose=False, backup=False,
                                           keep_best=KeepBestConfig(enabled=True, monitor="val_accuracy")))
    tracker, model = RecordingTracker(), model_for(settings)  # compiled, never fitted: metrics unbuilt
    history = train(model, data, settings.trainer, tracker, users=[Scramble(at=5)]).history["val_accuracy"]
    best = int(np.argmax(history))
    assert best != len(history) - 1 and history[best] > min(history), history
    assert float(model.evaluate(data.validation, verbose=0, return_dict=True)["accuracy"]) == pytest.approx(
        history[best], abs=1e-6)
    assert tracker.tags["train.best_epoch"] == best + 1


def test_the_best_so_far_survives_a_kill_and_the_resumed_run_still_ends_with_it(data, tmp_path):
    keras.utils.set_random_seed(3)
    settings = settings_with(TrainerConfig(epochs=8, verbose=False,
                                           keep_best=KeepBestConfig(enabled=True, monitor="val_loss")))
    killed = StopAfterEpoch(5)
    with pytest.raises(PlantedKill, match="stopped here"):
        train(model_for(settings), data, settings.trainer, killed, backup_dir=str(tmp_path / "backup"),
              users=[Scramble(at=4)])
    before = [logs["val_loss"] for _, logs in killed.epochs]  # epochs 0-4, as MLflow got them
    resumed = RecordingTracker()
    model = model_for(settings)
    train(model, data, settings.trainer, resumed, backup_dir=str(tmp_path / "backup"), users=[Scramble(at=6)])
    after = [logs["val_loss"] for _, logs in resumed.epochs]  # epochs 6-7 (5 was backed up before the kill)
    best = resumed.tags["train.best_val_loss"]
    assert best == min(before + after) and best in before  # the best came before the kill, and is kept
    assert resumed.tags["train.best_epoch"] <= 5
    assert validation_loss(model, data) == pytest.approx(best, rel=1e-5)


def test_keep_best_with_ema_and_an_unlogged_monitor_are_preflight_errors():
    with pytest.raises(ConfigError, match=r"trainer.keep_best and optimizer.ema both choose the weights"):
        validate(compose(["trainer.keep_best.enabled=true", "optimizer.ema.enabled=true"]))
    with pytest.raises(ConfigError, match=r"trainer.keep_best.monitor=val_auc is not a metric logged every epoch"):
        validate(compose(["trainer.keep_best.enabled=true", "trainer.keep_best.monitor=val_auc"]))


@pytest.mark.parametrize("monitor, better", [("val_loss", "lower"), ("val_accuracy", "higher"),
                                             ("val_mae", "lower"), ("val_auc", "higher")])
def test_mode_auto_takes_each_metrics_own_direction(monitor, better):
    """Not by its name alone: val_mae (no 'loss' in it) is best low, val_auc high, as Keras' metrics say."""
    from tfx_hydra.data import synthetic
    from tfx_hydra.trainer.callbacks import KeepBest

    data = synthetic([4], 1, 64, 16, 0, task="binary")
    model = mlp(name="mlp", input_shape=[4], num_classes=1, head="sigmoid")
    model.compile("adam", "binary_crossentropy", metrics=[keras.metrics.BinaryAccuracy(name="accuracy"),
                                                          keras.metrics.MeanAbsoluteError(name="mae"),
                                                          keras.metrics.AUC(name="auc")])
    model.fit(data.train.take(1), verbose=0)  # the compiled metrics are built
    keeping = KeepBest(monitor, "auto", None)
    keeping.set_model(model)
    assert keeping.direction() is (np.less if better == "lower" else np.greater)
