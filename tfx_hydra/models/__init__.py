"""models: Keras model builders, one per option in conf/model/.

Builders return an uncompiled `keras.Model`; the run compiles it inside the
strategy's scope. Whatever the precision policy, the last layer computes in float32
(`precision.OUTPUT_DTYPE`): a float16 softmax loses the small probabilities the
cross-entropy needs. Keras is imported inside the builders (validation must not pay for it).
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.precision import OUTPUT_DTYPE


def mlp(name, input_shape, num_classes, units=128, layers=1, dropout=0.2, activation="relu"):
    """The seed's MLP: Flatten -> [Dense(units) -> Dropout] x layers -> Dense(classes, softmax)."""
    import keras

    _require_positive("model.units", units, 128)
    _require_positive("model.layers", layers, 1, allow_zero=True)
    _require_rate("model.dropout", dropout)
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Flatten(name="flatten")(inputs)
    for i in range(layers):
        x = keras.layers.Dense(units, activation=activation, name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    outputs = _classifier(keras, x, num_classes)
    return keras.Model(inputs, outputs, name=name)


def cnn(name, input_shape, num_classes, filters=(32, 64), kernel_size=3, dense_units=128, dropout=0.2):
    """A small conv net: [Conv -> MaxPool] per entry of `filters` -> Dense -> Dropout -> softmax."""
    import keras

    if not filters:
        raise ConfigError("model.filters is empty: expected one conv block per entry.", fix="model.filters=[32,64]")
    for f in filters:
        _require_positive("model.filters", f, 32)
    _require_positive("model.dense_units", dense_units, 128)
    _require_rate("model.dropout", dropout)
    shape = tuple(input_shape)
    if len(shape) not in (2, 3):
        raise ConfigError(
            f"model=cnn needs images: data.input_shape={list(shape)} should be [height, width] or "
            "[height, width, channels].",
            fix="model=mlp for flat features",
        )
    inputs = keras.Input(shape=shape, name="inputs")
    x = keras.layers.Reshape((*shape, 1), name="add_channel")(inputs) if len(shape) == 2 else inputs
    for i, count in enumerate(filters):
        x = keras.layers.Conv2D(count, kernel_size, padding="same", activation="relu", name=f"conv_{i}")(x)
        x = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{i}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = _classifier(keras, x, num_classes)
    return keras.Model(inputs, outputs, name=name)


def _classifier(keras, x, num_classes: int):
    """The float32 softmax head every model ends with."""
    _require_positive("data.num_classes", num_classes, 10)
    return keras.layers.Dense(num_classes, activation="softmax", dtype=OUTPUT_DTYPE, name="predictions")(x)


def _require_positive(key: str, value, example: int, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        expected = "a non-negative integer" if allow_zero else "a positive integer"
        raise ConfigError(f"{key}={value!r} is invalid: expected {expected}.", fix=f"{key}={example}")


def _require_rate(key: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise ConfigError(f"{key}={value!r} is invalid: expected a rate in [0, 1).", fix=f"{key}=0.2")
