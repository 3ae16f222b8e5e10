"""Precision: the global dtype policy, float32 outputs and loss scaling, checked on real models."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_hydra.errors import ConfigError
from tfx_hydra.hardware import GpuDetails, HardwareInfo
from tfx_hydra.models import cnn, mlp
from tfx_hydra.precision import FLOAT32, apply_loss_scaling, resolve_policy, set_precision
from tfx_hydra.settings.schemas import ExpectConfig, HardwareConfig


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


def test_the_cpu_takes_bfloat16_only_with_amx_and_inputs_large_enough_to_gain(tmp_path):
    from tfx_hydra.precision import MIXED_BFLOAT16, cpu_flags, cpu_policy

    cpuinfo = tmp_path / "cpuinfo"  # a Sapphire Rapids' flags line (this machine's CPU has no AMX)
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    flags = cpu_flags(str(cpuinfo))
    assert {"amx_bf16", "avx512_bf16"} <= flags
    policy, why = cpu_policy(64 * 64 * 3, flags)
    assert (policy, why) == (MIXED_BFLOAT16, "the CPU has AMX-BF16 (amx_bf16) and inputs of 12,288 values")
    assert cpu_policy(28 * 28, flags) == (FLOAT32, "the CPU has AMX-BF16 (amx_bf16), but inputs of 784 values are "
                                                   "too small to gain from it")
    policy, why = cpu_policy(64 * 64 * 3, flags - {"amx_bf16"})  # AVX512_BF16 alone converts, it does not multiply
    assert policy == FLOAT32 and why.startswith("no AMX-BF16 on this CPU")
    assert cpu_flags(str(tmp_path / "missing")) == set()  # not Linux: no flags, float32


def test_the_cpu_profile_s_auto_precision_follows_the_cpu_and_says_why(monkeypatch):
    from tfx_hydra import hardware
    from tfx_hydra.precision import MIXED_BFLOAT16

    profile = HardwareConfig(name="cpu", expect=ExpectConfig(device_type="CPU"), xla=False, precision="auto")
    assert hardware.setup_hardware(profile, seed=1, input_values=12288).precision == (
        MIXED_BFLOAT16 if "amx_bf16" in hardware.cpu_flags() else FLOAT32)
    # Fault injection: this machine's CPU has no AMX, so its flags are given as a Sapphire Rapids lists them
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
    info = hardware.setup_hardware(profile, seed=1, input_values=12288)
    assert (info.precision, info.precision_reason) == (MIXED_BFLOAT16, "the CPU has AMX-BF16 (amx_bf16) and inputs "
                                                                       "of 12,288 values")
    small = hardware.setup_hardware(profile, seed=1, input_values=784)
    assert (small.precision, small.precision_reason) == (FLOAT32, "")  # the line stays as on any CPU


@pytest.mark.slow  # 16 s on a CPU without AMX, where bfloat16 is emulated: among the quick subset's heaviest
def test_bfloat16_learns_what_float32_learns_on_a_learnable_task():
    """The accuracy check behind precision=auto's bfloat16 on AMX CPUs, run on this CPU (bfloat16 emulated)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target
    accuracies = {}
    for policy in ("float32", "mixed_bfloat16"):
        set_precision(policy)
        keras.utils.set_random_seed(0)
        model = cnn("cnn", [8, 8, 1], 10)
        model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        model.fit(x[:1400], y[:1400], epochs=8, batch_size=32, verbose=0)
        accuracies[policy] = model.evaluate(x[1400:], y[1400:], verbose=0, return_dict=True)["accuracy"]
    assert accuracies["float32"] > 0.9
    assert abs(accuracies["mixed_bfloat16"] - accuracies["float32"]) < 0.04, accuracies
