"""The optimizer a run compiles with: replica scaling, gradient accumulation."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers.fakes import RecordingTracker
from tests.helpers.training import ADAM, compiled, settings_with, setup_with
from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError
from tfx_hydra.models import mlp
from tfx_hydra.schemas import TrainerConfig
from tfx_hydra.trainer import compile_model


def test_learning_rate_scales_with_replicas_when_asked():
    tracker = RecordingTracker()
    compiled(TrainerConfig(scale_lr_with_replicas=True), tracker=tracker, replicas=4)
    assert tracker.tags["optimizer.learning_rate"] == pytest.approx(0.04)
    compiled(TrainerConfig(), tracker=tracker, replicas=4)
    assert tracker.tags["optimizer.learning_rate"] == pytest.approx(0.01)


def test_scaling_the_learning_rate_needs_one_to_scale():
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    optimizer = OmegaConf.create({"_target_": "keras.optimizers.Adam"})
    with pytest.raises(ConfigError, match=r"trainer.scale_lr_with_replicas=true needs optimizer.learning_rate"):
        compile_model(model, optimizer, settings_with(TrainerConfig(scale_lr_with_replicas=True)),
                      setup_with(replicas=2), RecordingTracker())


def test_four_accumulated_batches_of_32_update_like_one_batch_of_128():
    ordered = digits([8, 8], 10, batch_size=32, seed=0, limit=512, shuffle_buffer=0)  # no shuffle: same batches
    big = digits([8, 8], 10, batch_size=128, seed=0, limit=512, shuffle_buffer=0)
    weights = []
    for data, accumulate in ((ordered, 4), (big, 1)):
        keras.utils.set_random_seed(1)
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
        trainer = TrainerConfig(grad_accum_steps=accumulate, steps_per_execution=1)
        compile_model(model, ADAM, settings_with(trainer), setup_with(), RecordingTracker())
        model.fit(data.train, epochs=2, verbose=0)
        assert int(model.optimizer.iterations) == 8  # counts updates: 512 / 128 per epoch, not batches
        weights.append(model.get_weights())
    for accumulated, direct in zip(*weights):
        np.testing.assert_allclose(accumulated, direct, atol=2e-6)
