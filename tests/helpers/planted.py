"""Divergence planted where the tests choose, the same on every CPU.

How a kernel treats NaN differs between CPUs (relu/max may drop it, may keep it), so a
test that feeds NaN data and waits for the loss to follow depends on the machine. These
plant the fault directly instead: a weight that becomes NaN after a given number of
training batches, without touching the model's output (so the loss stays finite
everywhere), and a loss that becomes NaN once a flag is raised.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from tfx_hydra.models import mlp


@keras.saving.register_keras_serializable(package="tests")
class NaNAfter(keras.layers.Layer):
    """Passes its inputs through unchanged; its own weight `planted` turns NaN once `batches`
    training batches have run (a divergence the loss cannot see)."""

    def __init__(self, batches: int, **kwargs):
        super().__init__(**kwargs)
        self.batches = batches

    def build(self, input_shape):
        # one copy's value counts under a strategy: assigned in every replica, read from the first
        self.planted = self.add_weight(shape=(), initializer="zeros", trainable=False, name="planted",
                                       aggregation="only_first_replica")
        self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False, name="seen",
                                    aggregation="only_first_replica")

    def call(self, inputs, training=False):
        if training:
            self.seen.assign(self.seen + 1.0)
            self.planted.assign(tf.where(self.seen > self.batches, math.nan, 0.0))
        return inputs

    def get_config(self):
        return super().get_config() | {"batches": self.batches}


def mlp_with_nan_after(nan_after_batches: int, **mlp_args):
    """The mlp model config with a NaN planted in a weight after `nan_after_batches` batches
    (a model `_target_` for CLI runs: model._target_=tests.helpers.planted.mlp_with_nan_after)."""
    inner = mlp(**mlp_args)
    inputs = keras.Input(shape=inner.input_shape[1:])
    return keras.Model(inputs, inner(NaNAfter(nan_after_batches, name="nan_after")(inputs)), name=inner.name)


def loss_nan_when(flag: tf.Variable):
    """sparse categorical cross-entropy, NaN at every batch once `flag` is true."""
    def loss(y_true, y_pred):
        real = keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
        return tf.where(flag, tf.fill(tf.shape(real), math.nan), real)
    return loss


class Scramble(keras.callbacks.Callback):
    """A planted fault (a callback of the user's, run after ours): at the start of epoch `at` (from 0), heavy
    noise on every weight, so the epochs after it are worse than the best one before it."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at:
            rng = np.random.default_rng(0)
            self.model.set_weights([w + rng.normal(0, 3.0, w.shape).astype(w.dtype) for w in self.model.get_weights()])
