"""blocks: the pieces the image models share -- their input, a conv block, a residual block."""

from __future__ import annotations

from tfx_hydra.errors import ConfigError


def image_inputs(input_shape, model: str, resize_to=None, channels=None):
    """keras.Input for (H, W) or (H, W, C) images, and the tensor the network gets: with a channel axis,
    gray turned into `channels` (a pretrained backbone's 3), resized to `resize_to` where asked."""
    import keras

    shape = tuple(input_shape)
    if len(shape) not in (2, 3):
        raise ConfigError(f"model={model} needs images: data.input_shape={list(shape)} should be [height, width] or "
                          "[height, width, channels].", fix="model=mlp for flat features")
    inputs = keras.Input(shape=shape, name="inputs")
    x = keras.layers.Reshape((*shape, 1), name="add_channel")(inputs) if len(shape) == 2 else inputs
    if channels and x.shape[-1] != channels:
        if x.shape[-1] != 1:
            raise ConfigError(f"the backbone takes {channels} channels; the data has {x.shape[-1]}.",
                              fix="data with 1 or matching channels")
        x = keras.layers.Concatenate(name="gray_to_rgb")([x] * channels)
    if resize_to:
        x = keras.layers.Resizing(*resize_to, name="resize")(x)
    return inputs, x


def conv_bn_relu(x, filters: int, kernel_size: int, batch_norm: bool, name: str):
    import keras

    x = keras.layers.Conv2D(filters, kernel_size, padding="same", use_bias=not batch_norm, name=name)(x)
    if batch_norm:
        x = keras.layers.BatchNormalization(name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x)


def residual_block(x, filters: int, stride: int, name: str):
    import keras

    shortcut = x
    y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = keras.layers.BatchNormalization(name=f"{name}_bn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    y = keras.layers.BatchNormalization(name=f"{name}_bn2")(y)
    if stride != 1 or x.shape[-1] != filters:  # the shapes differ: project the shortcut
        shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_project")(x)
        shortcut = keras.layers.BatchNormalization(name=f"{name}_project_bn")(shortcut)
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)
