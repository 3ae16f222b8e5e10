"""model=mlp: the seed article's multilayer perceptron, for flat features (and images it flattens)."""

from __future__ import annotations

from tfx_hydra.models.heads import head as output_head
from tfx_hydra.settings.checks import require_non_negative, require_positive, require_range


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
