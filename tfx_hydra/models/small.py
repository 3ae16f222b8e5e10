"""Models built from scratch for small inputs: the seed's MLP, a configurable CNN, a small ResNet."""

from __future__ import annotations

from typing import Sequence

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.validation import require_non_negative, require_positive, require_range


def mlp(name, input_shape, num_classes, units=128, layers=1, dropout=0.2, activation="relu", head="softmax"):
    """The seed's MLP: Flatten -> [Dense(units) -> Dropout] x layers -> the task's head (a softmax over the
    classes by default)."""
    import keras

    require_positive("model.units", units, 128)
    require_non_negative("model.layers", layers, "no hidden layer", 1)
    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Flatten(name="flatten")(inputs)
    for i in range(layers):
        x = keras.layers.Dense(units, activation=activation, name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    outputs = output_head(x, num_classes, head)
    return keras.Model(inputs, outputs, name=name)


def cnn(name, input_shape, num_classes, filters=(32, 64), convs_per_block=1, kernel_size=3, batch_norm=False,
        dense_units=128, dropout=0.2, head="softmax"):
    """A small conv net: one block per entry of `filters` ([Conv (-> BatchNorm) -> ReLU] x convs_per_block
    -> MaxPool), then Dense -> Dropout -> the task's head."""
    import keras

    if not filters:
        raise ConfigError("model.filters is empty: expected one conv block per entry.", fix="model.filters=[32,64]")
    for f in filters:
        require_positive("model.filters", f, 32)
    require_positive("model.convs_per_block", convs_per_block, 1)
    require_positive("model.dense_units", dense_units, 128)
    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs, x = image_input(input_shape, "cnn")
    for i, count in enumerate(filters):
        for j in range(convs_per_block):
            x = conv_bn_relu(x, count, kernel_size, batch_norm, f"conv_{i}" + (f"_{j}" if convs_per_block > 1 else ""))
        x = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{i}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


def resnet_small(name, input_shape, num_classes, stages=(16, 32, 64), blocks_per_stage=2, dropout=0.0,
                 head="softmax"):
    """A small ResNet for 8-64 px images (He et al.'s CIFAR design): a 3x3 stem, then per stage
    `blocks_per_stage` residual blocks (two 3x3 conv + batch norm, identity or 1x1 projection
    shortcut), each stage after the first halving the resolution; global average pool; the task's head."""
    import keras

    if not stages:
        raise ConfigError("model.stages is empty: expected the filters of each stage.", fix="model.stages=[16,32,64]")
    for f in stages:
        require_positive("model.stages", f, 16)
    require_positive("model.blocks_per_stage", blocks_per_stage, 2)
    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs, x = image_input(input_shape, "resnet_small")
    x = conv_bn_relu(x, stages[0], 3, True, "stem")
    for s, filters in enumerate(stages):
        for b in range(blocks_per_stage):
            x = residual_block(x, filters, stride=2 if s > 0 and b == 0 else 1, name=f"stage{s}_block{b}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


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


def conv_bn_relu(x, filters: int, kernel_size: int, batch_norm: bool, name: str):
    import keras

    x = keras.layers.Conv2D(filters, kernel_size, padding="same", use_bias=not batch_norm, name=name)(x)
    if batch_norm:
        x = keras.layers.BatchNormalization(name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x)


def image_input(input_shape: Sequence[int], model: str):
    """keras.Input for (H, W) or (H, W, C) images, and the tensor with a channel axis."""
    import keras

    shape = tuple(input_shape)
    if len(shape) not in (2, 3):
        raise ConfigError(
            f"model={model} needs images: data.input_shape={list(shape)} should be [height, width] or "
            "[height, width, channels].",
            fix="model=mlp for flat features",
        )
    inputs = keras.Input(shape=shape, name="inputs")
    x = keras.layers.Reshape((*shape, 1), name="add_channel")(inputs) if len(shape) == 2 else inputs
    return inputs, x
