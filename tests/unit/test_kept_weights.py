"""kept_weights: whatever chooses the weights a run ends with -- trainer.keep_best, early stopping's restore,
optimizer.ema -- is said and tagged, and the run's val_* figures are measured on those weights, as its test_*
figures and its exports are (not the last epoch's, which were other weights')."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers.fakes import RecordingTracker
from tests.helpers.planted import Scramble
from tests.helpers.training import settings_with, setup_with
from tfx_hydra.models import mlp
from tfx_hydra.settings.schemas import EarlyStoppingConfig, KeepBestConfig, TrainerConfig
from tfx_hydra.trainer import compile_model, evaluate, train

ADAM = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})
ADAM_EMA = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01,
                             "ema": {"enabled": True, "momentum": 0.9}})


def trained(data, trainer: TrainerConfig, optimizer=ADAM, users=()):
    keras.utils.set_random_seed(3)
    settings, tracker = settings_with(trainer), RecordingTracker()
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
    compile_model(model, optimizer, settings, setup_with(), tracker)
    history = train(model, data, settings.trainer, tracker, users=list(users))
    return model, history, tracker, evaluate(model, data, history, tracker)


def measured(model, data) -> float:
    return float(model.evaluate(data.validation, verbose=0, return_dict=True)["loss"])


@pytest.mark.parametrize("chooser", ["keep_best", "early_stopping"])
def test_the_best_epoch_kept_is_said_and_its_figures_are_the_ones_reported(data, chooser):
    trainer = TrainerConfig(epochs=6, verbose=False, backup=False, tensorboard=False,
                            keep_best=KeepBestConfig(enabled=chooser == "keep_best", monitor="val_loss"),
                            early_stopping=EarlyStoppingConfig(enabled=chooser == "early_stopping", monitor="val_loss",
                                                               patience=10, restore_best_weights=True))
    model, history, tracker, results = trained(data, trainer, users=[Scramble(at=4)])  # epochs 5, 6 are worse
    losses = history.history["val_loss"]
    best = int(np.argmin(losses))
    assert best < 4 and losses[-1] > losses[best], losses
    assert results["val_loss"] == pytest.approx(losses[best], rel=1e-5) and results["val_loss"] != losses[-1]
    assert results["val_loss"] == pytest.approx(measured(model, data), rel=1e-6)  # the weights the run ends with
    why = "trainer.keep_best" if chooser == "keep_best" else "restored by early stopping"
    assert tracker.tags["weights.kept"] == f"epoch {best + 1} of 6 (best val_loss {losses[best]:.4f}, {why})"
    assert "test_loss" in tracker.metrics  # measured on the same weights (evaluate's test split)


def test_the_moving_average_kept_is_said_and_the_validation_figures_are_its(data):
    trainer = TrainerConfig(epochs=3, verbose=False, backup=False, tensorboard=False)
    model, history, tracker, results = trained(data, trainer, optimizer=ADAM_EMA)
    assert tracker.tags["weights.kept"] == "the moving average of the weights (optimizer.ema, momentum 0.9), after " \
                                           "epoch 3"
    assert results["val_loss"] == pytest.approx(measured(model, data), rel=1e-6)
    assert results["val_loss"] != pytest.approx(history.history["val_loss"][-1], rel=1e-3)  # the raw weights' figure


def test_without_a_chooser_the_last_epochs_figures_stand_and_validation_is_not_measured_again(data):
    trainer = TrainerConfig(epochs=2, verbose=False, backup=False, tensorboard=False)
    model, history, tracker, results = trained(data, trainer)
    assert tracker.tags["weights.kept"] == "the last epoch's (epoch 2)"
    assert results["val_loss"] == history.history["val_loss"][-1]  # exactly: the figure logged at the epoch's end
