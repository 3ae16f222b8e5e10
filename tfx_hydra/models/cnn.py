"""model=cnn: a small configurable conv net for images."""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.blocks import conv_bn_relu, image_inputs
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.settings.checks import require_positive, require_range


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
    inputs, x = image_inputs(input_shape, "cnn")
    for i, count in enumerate(filters):
        for j in range(convs_per_block):
            x = conv_bn_relu(x, count, kernel_size, batch_norm, f"conv_{i}" + (f"_{j}" if convs_per_block > 1 else ""))
        x = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{i}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


# hardware.intra_op_threads=auto gives its ops every core, even on 28x28 digits (threads.py): a convolution's work
# per example splits well (2 cores: 2,288 vs 1,392 examples/s on 28x28, 1,288 vs 983 on 32x32x3).
cnn.intra_op_threads = 0
