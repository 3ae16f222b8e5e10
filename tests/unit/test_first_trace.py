"""The model's optimizer and metric state is built before fit traces its train step (keras_compat.
build_before_first_trace): one trace instead of two under the default strategy, the same weights."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.fakes import RecordingTracker
from tests.helpers.training import compiled
from tfx_hydra.data import digits
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.trainer import train
from tfx_hydra.trainer.keras_compat import build_before_first_trace


def counting_train_steps(model) -> list[int]:
    """Count the traces of the model's train step (fit calls train_step only while tracing)."""
    traces, step = [0], model.train_step

    def counted(batch):
        traces[0] += 1
        return step(batch)

    model.train_step = counted
    return traces


def seeded_model(trainer: TrainerConfig):
    keras.utils.set_random_seed(0)
    return compiled(trainer)


def test_the_trainer_traces_the_train_step_once_and_trains_the_weights_keras_alone_does():
    trainer = TrainerConfig(epochs=2, verbose=False)
    plain = seeded_model(trainer)
    plain_traces = counting_train_steps(plain)
    data = digits([8, 8], 10, batch_size=32, seed=0)  # a fresh pipeline each: the same shuffled order
    in_epoch_order = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs=None: data.order.set_epoch(epoch))
    plain.fit(data.train, validation_data=data.validation, epochs=2, shuffle=False, verbose=0,
              callbacks=[in_epoch_order])  # each epoch in its order, as the trainer reads it
    assert plain_traces == [2]  # Keras alone: the first trace makes the variables, tf.function traces again

    ours = seeded_model(trainer)
    our_traces = counting_train_steps(ours)
    data = digits([8, 8], 10, batch_size=32, seed=0)
    train(ours, data, trainer, RecordingTracker())
    assert our_traces == [1]
    assert len(ours.optimizer.variables) == len(plain.optimizer.variables)
    for mine, theirs in zip(ours.weights + ours.optimizer.variables, plain.weights + plain.optimizer.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())  # bit for bit


def test_under_a_strategy_of_its_own_keras_builds_and_nothing_is_done_here(two_logical_cpus):
    # No collective ops: their keys are process-wide, and another test's strategy in this worker would share them
    strategy = tf.distribute.MirroredStrategy([device.name for device in two_logical_cpus],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer="adam", loss="mse")
    dataset = tf.data.Dataset.from_tensor_slices((np.ones((8, 4), "float32"), np.ones((8, 3), "float32"))).batch(4)
    assert build_before_first_trace(model, dataset) is False
    assert not model.optimizer.built  # left to Keras' fit, inside the strategy's scope
    model.fit(dataset, epochs=1, verbose=0)
    assert model.optimizer.built


def test_ragged_inputs_are_left_to_the_first_trace():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    ragged = tf.data.Dataset.from_tensor_slices((tf.ragged.constant([[1.0], [1.0, 2.0]]), [[1.0], [2.0]])).batch(2)
    assert build_before_first_trace(model, ragged) is False
    assert not model.optimizer.built


def test_a_model_the_symbolic_build_cannot_take_is_built_by_its_first_trace_and_trains(monkeypatch):
    model = compiled(TrainerConfig())
    data = digits([8, 8], 10, batch_size=32, seed=0)

    # A planted fault: Keras' symbolic build refuses some models (Python code that needs concrete values);
    # which ones changes with Keras' versions, so this model's build is made to refuse
    def cannot(data_batch):
        raise RuntimeError("Unable to automatically build the model")

    monkeypatch.setattr(model, "_symbolic_build", cannot)
    assert build_before_first_trace(model, data.train) is False
    traces = counting_train_steps(model)
    history = model.fit(data.train, epochs=2, verbose=0)
    assert traces == [2] and model.optimizer.built  # Keras' own path, as before
    assert history.history["loss"][1] < history.history["loss"][0]


@pytest.mark.parametrize("dataset", [None, [(np.ones((2, 4)), np.ones((2, 1)))]])
def test_data_without_an_element_spec_is_left_to_the_first_trace(dataset):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    assert build_before_first_trace(model, dataset) is False
