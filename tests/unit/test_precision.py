"""Precision: the global dtype policy, float32 outputs and loss scaling, checked on real models."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_hydra.models import cnn, mlp
from tfx_hydra.precision import set_precision


@pytest.fixture(autouse=True)
def restore_float32():
    yield
    set_precision("float32")


@pytest.mark.parametrize("policy,compute", [("float32", "float32"), ("mixed_float16", "float16"),
                                            ("mixed_bfloat16", "bfloat16")])
@pytest.mark.parametrize("builder", [mlp, cnn])
def test_hidden_layers_follow_the_policy_and_the_output_stays_float32(policy, compute, builder):
    assert set_precision(policy) == policy
    model = builder(name="m", input_shape=[8, 8], num_classes=10)
    hidden = model.get_layer("dense_0" if builder is mlp else "conv_0")
    assert hidden.compute_dtype == compute
    assert hidden.variable_dtype == "float32"  # mixed precision keeps float32 master weights
    assert model.get_layer("predictions").compute_dtype == "float32"
    output = model(np.zeros((2, 8, 8), "float32"))
    assert keras.backend.standardize_dtype(output.dtype) == "float32"


def test_mixed_float16_wraps_the_optimizer_in_dynamic_loss_scaling():
    set_precision("mixed_float16")
    model = mlp(name="m", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert float(model.optimizer.scale_loss(1.0)) > 1.0  # starts at 2**15 and adapts


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_other_policies_keep_the_plain_optimizer(policy):
    set_precision(policy)
    model = mlp(name="m", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
