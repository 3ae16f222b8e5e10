"""losses: trainer.label_smoothing on the loss each task trains with.

Keras' binary cross-entropies take `label_smoothing`; its sparse categorical one does not (the
integer labels a classification's data gives), so `SmoothedSparseCrossentropy` one-hots the labels
and hands them to Keras' categorical cross-entropy, which smooths them. Registered with Keras, so a
`.keras` file compiled with it loads without our help.
"""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="tfx_hydra")
class SmoothedSparseCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy against targets (1 - s) * one_hot + s / classes."""

    def __init__(self, label_smoothing: float = 0.0, name: str = "sparse_categorical_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        classes = keras.ops.shape(y_pred)[-1]
        labels = keras.ops.cast(y_true, "int32")
        if len(labels.shape) == len(y_pred.shape):  # (batch, 1) as well as (batch,)
            labels = keras.ops.squeeze(labels, axis=-1)
        targets = keras.ops.one_hot(labels, classes, dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(targets, y_pred, label_smoothing=self.label_smoothing)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


# metrics.SMOOTHABLE_LOSSES, each with the loss class that smooths it
SMOOTHED = {"sparse_categorical_crossentropy": SmoothedSparseCrossentropy,
            "binary_crossentropy": keras.losses.BinaryCrossentropy,
            "binary_focal_crossentropy": keras.losses.BinaryFocalCrossentropy}


def smoothed(loss: Any, label_smoothing: float) -> Any:
    """The loss model.compile gets: the named cross-entropy with its targets smoothed, or `loss` itself
    when there is nothing to smooth (preflight refused smoothing for any other loss)."""
    if not label_smoothing or loss not in SMOOTHED:
        return loss
    return SMOOTHED[loss](label_smoothing=label_smoothing)
