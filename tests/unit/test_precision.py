"""Precision: the global dtype policy, float32 outputs and loss scaling, checked on real models."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_hydra.errors import ConfigError
from tfx_hydra.hardware import GpuDetails, HardwareInfo
from tfx_hydra.models import cnn, mlp
from tfx_hydra.precision import FLOAT32, apply_loss_scaling, resolve_policy, set_precision


@pytest.fixture(autouse=True)
def restore_float32():
    yield
    set_precision(FLOAT32)


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


# --- precision=auto, warnings and loss scaling -------------------------------------------------


CPU = HardwareInfo(profile="cpu", precision="float32")
A100 = HardwareInfo(profile="a100", precision="mixed_bfloat16", gpus=[GpuDetails(0, "NVIDIA A100", (8, 0))])
PASCAL = HardwareInfo(profile="gpu", precision="float32", gpus=[GpuDetails(0, "GTX 1080", (6, 1))])


def test_auto_takes_the_profiles_policy():
    assert resolve_policy("auto", A100) == ("mixed_bfloat16", [])
    assert resolve_policy("auto", CPU) == ("float32", [])
    assert resolve_policy("float32", A100) == ("float32", [])


@pytest.mark.parametrize("hardware,where", [(CPU, "the CPU"), (PASCAL, "a GPU without tensor cores")])
def test_float16_without_tensor_cores_is_warned_about(hardware, where):
    policy, warnings = resolve_policy("mixed_float16", hardware)
    assert policy == "mixed_float16"
    assert warnings == [f"precision mixed_float16 on {where}: float16 is fast only on GPUs of compute capability "
                        "7.0+ (tensor cores); expect no speedup. precision=fp32 (or bf16 on Ampere+) fits here."]
    assert resolve_policy("mixed_float16", A100)[1] == []


def compile_with(policy, loss_scale):
    set_precision(policy)
    model = mlp(name="m", input_shape=[8, 8], num_classes=10)
    optimizer, auto_scale_loss = apply_loss_scaling(keras.optimizers.Adam(), policy, loss_scale)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", auto_scale_loss=auto_scale_loss)
    return model.optimizer


@pytest.mark.parametrize("loss_scale", ["auto", "dynamic"])
def test_float16_scales_dynamically_by_default(loss_scale):
    optimizer = compile_with("mixed_float16", loss_scale)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert optimizer.initial_scale == 2.0 ** 15 and optimizer.dynamic_growth_steps == 2000


def test_a_fixed_loss_scale_starts_there_and_never_grows():
    optimizer = compile_with("mixed_float16", 1024)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert optimizer.initial_scale == 1024.0 and optimizer.dynamic_growth_steps == 10**9


def test_loss_scaling_can_be_turned_off_for_float16():
    assert not isinstance(compile_with("mixed_float16", None), keras.optimizers.LossScaleOptimizer)


def test_bfloat16_needs_no_loss_scaling_and_rejects_one():
    assert not isinstance(compile_with("mixed_bfloat16", "auto"), keras.optimizers.LossScaleOptimizer)
    with pytest.raises(ConfigError, match=r"precision.loss_scale=dynamic only applies to mixed_float16, and the "
                                          r"policy in effect is mixed_bfloat16"):
        apply_loss_scaling(keras.optimizers.Adam(), "mixed_bfloat16", "dynamic")
