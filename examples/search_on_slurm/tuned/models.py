"""The model builder conf/model/gated.yaml names (`model=gated`): an MLP whose hidden layer is gated, a model
of one's own that the search tunes (its `units` and `dropout` are in the search space)."""

import keras


def gated(name, input_shape, num_classes, units=64, dropout=0.1):
    """Flatten -> Dense(units) * sigmoid(Dense(units)) -> Dropout -> Dense(num_classes, softmax)."""
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Multiply()([keras.layers.Dense(units)(x), keras.layers.Dense(units, activation="sigmoid")(x)])
    x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name=name)
