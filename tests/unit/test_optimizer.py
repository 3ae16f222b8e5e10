"""The optimizer a run compiles with: every option, replica scaling, gradient accumulation, weight decay off
biases and normalisation, clipping under loss scaling."""

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
from tfx_hydra.settings.schemas import TrainerConfig
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


@pytest.mark.parametrize("option", ["adam", "adamw", "sgd", "rmsprop", "nadam", "lion", "lamb", "adafactor"])
def test_every_optimizer_option_builds_from_its_config_and_trains(option, data):
    from tests.helpers import compose

    cfg = compose([f"optimizer={option}"])
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
    compile_model(model, cfg.optimizer, settings_with(TrainerConfig(steps_per_execution=1)), setup_with(),
                  RecordingTracker())
    assert type(model.optimizer).__name__.lower() == option  # Adam, AdamW, SGD, RMSprop, ...: the option's class
    before = [np.asarray(w).copy() for w in model.trainable_weights]
    losses = model.fit(data.train, epochs=3, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and any(not np.array_equal(b, np.asarray(w))
                                            for b, w in zip(before, model.trainable_weights))
    assert losses[-1] < losses[0]  # adafactor too: its epsilon_1 keeps its second moments normal floats


@pytest.mark.parametrize("decay_all", [False, True])
def test_weight_decay_shrinks_kernels_and_by_default_spares_biases_and_normalisation(decay_all):
    """Zero gradients, one step: decoupled decay alone moves the weights, by learning_rate x weight_decay."""
    inputs = keras.Input((4,))
    x = keras.layers.BatchNormalization(name="norm")(keras.layers.Dense(3, name="dense")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2, name="out")(x))
    for layer in ("norm", "dense", "out"):
        for variable in model.get_layer(layer).trainable_variables:
            variable.assign(np.full(variable.shape, 2.0, "float32"))
    node = OmegaConf.create({"_target_": "keras.optimizers.SGD", "learning_rate": 0.1, "momentum": 0.0,
                             "weight_decay": 0.5, "decay_biases_and_norms": decay_all})
    from tfx_hydra.optimizer import build_optimizer

    optimizer, _ = build_optimizer(node, settings_with(TrainerConfig()), "float32", 1)
    optimizer.apply_gradients([(np.zeros(v.shape, "float32"), v) for v in model.trainable_variables])
    after = {v.path: float(np.asarray(v).flat[0]) for v in model.trainable_variables}
    assert after["dense/kernel"] == pytest.approx(2.0 * (1 - 0.1 * 0.5)) == after["out/kernel"]
    spared = ["dense/bias", "norm/gamma", "norm/beta", "out/bias"]
    assert [after[name] for name in spared] == pytest.approx([1.9 if decay_all else 2.0] * 4)


def test_global_clipnorm_bounds_each_update_under_loss_scaling_and_accumulation(data):
    """Clipping sees the unscaled, accumulated gradient: one SGD update moves the weights by at most
    learning_rate x global_clipnorm, whatever the loss scale (mixed_float16) and the accumulation."""
    from tfx_hydra.settings.schemas import PrecisionConfig

    node = OmegaConf.create({"_target_": "keras.optimizers.SGD", "learning_rate": 1.0, "momentum": 0.0,
                             "global_clipnorm": 0.01})
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
        compile_model(model, node, settings_with(TrainerConfig(grad_accum_steps=2, steps_per_execution=1),
                                                 PrecisionConfig(policy="mixed_float16")),
                      setup_with(policy="mixed_float16"), RecordingTracker())
        before = [np.asarray(w, "float64") for w in model.trainable_weights]
        model.fit(data.train.take(2), epochs=1, verbose=0)  # two batches: one accumulated update
        moved = np.sqrt(sum(np.sum((np.asarray(w, "float64") - b) ** 2) for w, b in zip(model.trainable_weights,
                                                                                       before)))
    finally:
        keras.config.set_dtype_policy("float32")
    assert int(model.optimizer.iterations) == 1 and 0 < moved <= 0.01 * 1.001


def test_with_ema_the_model_ends_training_holding_the_average_it_is_evaluated_and_exported_with(data, tmp_path):
    from tfx_hydra.export.savedmodel import SavedModelExport
    from tfx_hydra.trainer.kept_weights import weights_said

    node = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01,
                             "ema": {"enabled": True, "momentum": 0.9}})
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
    tracker = RecordingTracker()
    compile_model(model, node, settings_with(TrainerConfig(steps_per_execution=1)), setup_with(), tracker)
    assert tracker.tags["optimizer.ema"] is True and model.optimizer.ema_momentum == 0.9
    model.fit(data.train, epochs=2, verbose=0)
    averages = model.optimizer._model_variables_moving_average
    for weight, average in zip(model.trainable_variables, averages):
        np.testing.assert_array_equal(np.asarray(weight), np.asarray(average))  # the average replaced the weights
    export = SavedModelExport(str(tmp_path), "mlp")(model, data)  # and is what the export serves
    assert export.figures["export.savedmodel.max_abs_diff"] <= 1e-5
    assert weights_said(model).endswith("(the EMA of the weights, momentum 0.9)")
