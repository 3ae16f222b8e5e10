"""Model builders: the seed's architecture, the CNN, and argument errors."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError
from tfx_hydra.models import cnn, mlp


def test_default_mlp_is_the_seed_architecture():
    model = mlp(name="mlp", input_shape=[28, 28], num_classes=10)
    kinds = [(type(layer).__name__, getattr(layer, "units", None) or getattr(layer, "rate", None))
             for layer in model.layers[1:]]
    assert kinds == [("Flatten", None), ("Dense", 128), ("Dropout", 0.2), ("Dense", 10)]
    assert model.get_layer("dense_0").activation is keras.activations.relu
    assert model.get_layer("predictions").activation is keras.activations.softmax
    assert model.count_params() == 784 * 128 + 128 + 128 * 10 + 10


def test_mlp_depth_width_and_no_dropout():
    model = mlp(name="deep", input_shape=[8, 8], num_classes=3, units=16, layers=3, dropout=0.0)
    assert [layer.units for layer in model.layers if isinstance(layer, keras.layers.Dense)] == [16, 16, 16, 3]
    assert not any(isinstance(layer, keras.layers.Dropout) for layer in model.layers)


def test_cnn_learns_digits_in_a_few_epochs():
    keras.utils.set_random_seed(0)
    data = digits([8, 8], 10, batch_size=32, seed=0)
    model = cnn(name="cnn", input_shape=[8, 8], num_classes=10, filters=[8, 16], dense_units=32)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(data.train, epochs=6, verbose=0)
    accuracy = model.evaluate(data.test, return_dict=True, verbose=0)["accuracy"]
    assert accuracy > 0.8


def test_cnn_accepts_channels_last_images():
    model = cnn(name="cnn", input_shape=[8, 8, 3], num_classes=4, filters=[4])
    assert model(np.zeros((2, 8, 8, 3), "float32")).shape == (2, 4)


@pytest.mark.parametrize("kwargs,message", [
    ({"units": 0}, r"model.units=0 is out of range: expected a positive integer"),
    ({"units": "wide"}, r"model.units=wide is not a number: expected a positive integer"),
    ({"dropout": 1.0}, r"model.dropout=1.0 is out of range: expected a number \[0, 1\)"),
    ({"layers": -1}, r"model.layers=-1 is out of range: expected 0 \(no hidden layer\) or more"),
])
def test_bad_mlp_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        mlp(name="mlp", input_shape=[8, 8], num_classes=10, **kwargs)


def test_cnn_on_flat_features_says_to_use_the_mlp():
    with pytest.raises(ConfigError, match=r"model=cnn needs images.*\n  Fix: model=mlp"):
        cnn(name="cnn", input_shape=[64], num_classes=10)
