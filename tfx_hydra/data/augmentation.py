"""data.augmentation: Keras' random preprocessing layers on training batches only, for any image
source (image folders and the in-memory Keras datasets).
"""

from __future__ import annotations

from typing import Any

from tfx_hydra.settings.checks import require_choice, require_known_keys

FLIPS = ("horizontal", "vertical", "horizontal_and_vertical")


def augmenter(augmentation: dict[str, Any], shape: tuple[int, ...], seed: int | None):
    """Keras' random preprocessing layers as one function for the training pipeline, or None."""
    require_known_keys("data.augmentation", sorted(augmentation), ("flip", "rotation", "zoom"))
    flip, rotation, zoom = augmentation.get("flip"), augmentation.get("rotation") or 0, augmentation.get("zoom") or 0
    if flip is not None:
        require_choice("data.augmentation.flip", flip, FLIPS)
    if not flip and not rotation and not zoom:
        return None
    import keras
    import tensorflow as tf

    layers = []
    if flip:
        layers.append(keras.layers.RandomFlip(flip, seed=seed))
    if rotation:
        layers.append(keras.layers.RandomRotation(rotation, seed=seed))
    if zoom:
        layers.append(keras.layers.RandomZoom(zoom, seed=seed))
    augment = keras.Sequential(layers, name="augmentation")

    def apply(image, label, *weight):  # a training split with sample weights keeps them
        batched = image[tf.newaxis] if len(shape) == 3 else image[tf.newaxis, ..., tf.newaxis]
        out = augment(batched, training=True)[0]
        return (out if len(shape) == 3 else tf.squeeze(out, -1)), label, *weight

    return apply
