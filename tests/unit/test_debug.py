"""What the debug presets report (tfx_hydra/trainer/debug.py), on real Keras histories and real
check_numerics errors; the presets end to end are tests/e2e/test_debug.py."""

from __future__ import annotations

import logging
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.fakes import RecordingTracker
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.trainer.debug import NUMERICS_MARK, judge_overfit, non_finite_op, say_profile


def history_of(learning_rate: float, epochs: int = 40):
    """A real fit on 64 examples: a learning rate that fits them, or one too small to move."""
    keras.utils.set_random_seed(0)
    x, y = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"), np.arange(64) % 4
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(4, activation="softmax")])
    model.compile(keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy")
    return model.fit(x, y, batch_size=16, epochs=epochs, verbose=0)


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_the_overfit_verdict_passes_a_model_that_fits_and_fails_one_that_cannot(caplog):
    caplog.set_level(logging.INFO)
    fits, stuck = RecordingTracker(), RecordingTracker()
    assert judge_overfit(history_of(0.05), 64, fits)
    assert fits.tags["debug.overfit"] == "passed" and "the model can fit them" in caplog.text
    assert not judge_overfit(history_of(1e-6, epochs=3), 64, stuck)
    assert stuck.tags["debug.overfit"] == "failed"
    assert "it did not fall under 5% of where it started" in caplog.text and "optimizer.learning_rate" in caplog.text


def test_the_first_non_finite_op_is_named_with_its_layer_and_line():
    class Log(keras.layers.Layer):
        def call(self, inputs):
            return tf.math.log(inputs - 1.0)  # log of a negative number: NaN, on every CPU

    tf.debugging.enable_check_numerics()
    try:
        model = keras.Sequential([keras.Input((2,)), Log(name="bad_log")])
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            tf.function(lambda x: model(x))(tf.zeros((1, 2)))
    finally:
        tf.debugging.disable_check_numerics()
    assert NUMERICS_MARK in caught.value.message
    said = str(non_finite_op(caught.value.message))
    # the layer as its graph name scope spells it (TensorFlow may add _1 when a scope is re-entered)
    assert re.search(r"op 'Log' in layer 'bad_log(_\d+)?' produced the first NaN or infinity \(output 0\)", said), said
    assert "test_debug.py:" in said and "(call)" in said


def test_profile_says_when_no_trace_was_written(tmp_path, caplog):
    say_profile(TrainerConfig(tensorboard_profile_batches=[3, 5]), str(tmp_path))
    assert "no trace was written for batches [3, 5]" in caplog.text
    caplog.clear()
    say_profile(TrainerConfig(), str(tmp_path))  # not asked for: nothing said
    assert caplog.text == ""


def test_an_op_made_inside_a_keras_layer_is_placed_at_that_layers_call():
    """A functional model's ops are made in Keras' own layers (no user frame on the stack): the message
    still gives a source position, the Keras layer's call that made the op."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name="head")])
    model.layers[0].kernel.assign(tf.fill((2, 2), float("inf")))
    tf.debugging.enable_check_numerics()
    try:
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            tf.function(lambda x: model(x))(tf.fill((1, 2), -1.0))
    finally:
        tf.debugging.disable_check_numerics()
    said = str(non_finite_op(caught.value.message))
    assert re.search(r"op '\w+' in layer 'head(_\d+)?' produced the first NaN or infinity \(output 0\), made at "
                     r"keras/src/layers/core/dense\.py:\d+ \(call\)\.", said), said
