"""Hardware profiles: matching against device details recorded from real cards, and setup on CPU."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

from tfx_hydra.errors import ConfigError, HardwareMismatch
from tfx_hydra.hardware import (
    GpuDetails,
    describe_mismatch,
    load_profiles,
    pick_profile,
    setup_hardware,
    with_user_settings,
)
from tfx_hydra.settings.schemas import ExpectConfig, HardwareConfig

# What tf.config.experimental.get_device_details() reports on these cards.
A100 = GpuDetails(0, "NVIDIA A100-SXM4-80GB", (8, 0))
H100 = GpuDetails(0, "NVIDIA H100 80GB HBM3", (9, 0))
RTX4090 = GpuDetails(0, "NVIDIA GeForce RTX 4090", (8, 9))
T4 = GpuDetails(0, "Tesla T4", (7, 5))

A100_PROFILE = ExpectConfig(device_type="GPU", name_pattern="A100", min_count=1)


@pytest.mark.parametrize("gpus,expected", [
    ([A100], None),
    ([A100, GpuDetails(1, "NVIDIA A100-PCIE-40GB", (8, 0))], None),
    ([H100], "hardware=a100 expects 1 GPU matching 'A100'; found 1 GPU: NVIDIA H100 80GB HBM3."),
    ([RTX4090], "hardware=a100 expects 1 GPU matching 'A100'; found 1 GPU: NVIDIA GeForce RTX 4090."),
    ([T4], "hardware=a100 expects 1 GPU matching 'A100'; found 1 GPU: Tesla T4."),
    ([], "hardware=a100 expects 1 GPU matching 'A100'; found no GPU (CPU only)."),
])
def test_a100_profile_against_recorded_cards(gpus, expected):
    assert describe_mismatch("a100", A100_PROFILE, gpus) == expected


def test_count_is_checked_as_well_as_the_name():
    four = ExpectConfig(device_type="GPU", name_pattern="A100", min_count=4)
    message = describe_mismatch("a100x4", four, [A100, GpuDetails(1, A100.name, (8, 0))])
    assert message == ("hardware=a100x4 expects 4 GPUs matching 'A100'; "
                       "found 2 GPUs: NVIDIA A100-SXM4-80GB, NVIDIA A100-SXM4-80GB.")


@pytest.mark.parametrize("gpus", [[], [A100], [T4, RTX4090]])
def test_cpu_and_auto_profiles_match_any_machine(gpus):
    assert describe_mismatch("cpu", ExpectConfig(device_type="CPU"), gpus) is None
    assert describe_mismatch("auto", ExpectConfig(), gpus) is None


def test_setup_on_this_cpu_machine_reports_no_gpu_and_keeps_the_profile_xla():
    info = setup_hardware(HardwareConfig(name="cpu", expect=ExpectConfig(device_type="CPU"), xla=False), seed=1)
    assert info.gpus == [] and not info.fast_float16
    assert info.mismatch is None and info.xla is False


def test_a_mismatching_profile_is_recorded_not_fatal_by_default():
    info = setup_hardware(HardwareConfig(name="a100", expect=A100_PROFILE, xla=True, precision="mixed_bfloat16"),
                          seed=1)
    assert info.precision == "mixed_bfloat16"
    assert info.mismatch == "hardware=a100 expects 1 GPU matching 'A100'; found no GPU (CPU only)."
    assert info.xla is True  # carries on with the profile's settings


def test_strict_turns_the_mismatch_into_an_error_with_the_fix():
    with pytest.raises(HardwareMismatch) as caught:
        setup_hardware(HardwareConfig(name="a100", expect=A100_PROFILE, strict=True), seed=1)
    assert "expects 1 GPU matching 'A100'; found no GPU (CPU only)" in str(caught.value)
    assert "Fix: use hardware=auto (or hardware=cpu)" in str(caught.value)


def test_selecting_a_gpu_that_does_not_exist_names_what_there_is():
    with pytest.raises(HardwareMismatch, match=r"gpus=\[1\] asks for GPU index 1, but this machine has "
                                                r"no GPU \(CPU only\)\.\n  Fix: hardware=cpu"):
        setup_hardware(HardwareConfig(gpus=[1]), seed=1)


def test_setup_seeds_every_generator():

    setup_hardware(HardwareConfig(), seed=7)
    first = (np.random.rand(), float(tf.random.uniform(())))
    setup_hardware(HardwareConfig(), seed=7)
    assert (np.random.rand(), float(tf.random.uniform(()))) == first


# --- hardware=auto: which profile each real card gets -------------------------------------------


PROFILES = load_profiles()
RECORDED = {  # device_name and compute_capability as TensorFlow reports them; memory in GiB as nvidia-smi does
    "A100 80GB": (GpuDetails(0, "NVIDIA A100-SXM4-80GB", (8, 0), 79.6), "a100_80gb", "mixed_bfloat16"),
    "A100 40GB": (GpuDetails(0, "NVIDIA A100-SXM4-40GB", (8, 0), 39.4), "a100", "mixed_bfloat16"),
    "H100": (GpuDetails(0, "NVIDIA H100 80GB HBM3", (9, 0), 79.6), "h100", "mixed_bfloat16"),
    "H200": (GpuDetails(0, "NVIDIA H200", (9, 0), 140.4), "h200", "mixed_bfloat16"),
    "RTX 4090": (GpuDetails(0, "NVIDIA GeForce RTX 4090", (8, 9), 23.99), "rtx4090", "mixed_bfloat16"),
    "RTX 3090": (GpuDetails(0, "NVIDIA GeForce RTX 3090", (8, 6), 24.0), "rtx3090", "mixed_bfloat16"),
    "V100": (GpuDetails(0, "Tesla V100-SXM2-16GB", (7, 0), 15.78), "v100", "mixed_float16"),
    "T4": (GpuDetails(0, "Tesla T4", (7, 5), 15.0), "t4", "mixed_float16"),
    "L4 (no profile, Ada)": (GpuDetails(0, "NVIDIA L4", (8, 9), 22.5), "gpu", "mixed_bfloat16"),
    "Quadro RTX 6000 (no profile, Turing)": (GpuDetails(0, "Quadro RTX 6000", (7, 5), 24.0), "gpu", "mixed_float16"),
    "GTX 1080 (no profile, Pascal)": (GpuDetails(0, "NVIDIA GeForce GTX 1080", (6, 1), 8.0), "gpu", "float32"),
}


@pytest.mark.parametrize("card", list(RECORDED))
def test_auto_picks_the_profile_of_each_recorded_card(card):
    gpu, expected_profile, expected_precision = RECORDED[card]
    profile, reason = pick_profile([gpu], PROFILES)
    assert profile.name == expected_profile
    assert profile.precision == expected_precision
    assert profile.xla is True and profile.allocator == "cuda_malloc_async"
    assert (f"matches the {expected_profile} profile" in reason) if expected_profile != "gpu" else \
        reason.startswith(f"no profile names {gpu.name}; generic GPU settings for compute capability")


def test_auto_without_gpus_is_the_cpu_profile_with_xla_off():
    profile, reason = pick_profile([], PROFILES)
    # the precision is auto: decided by the CPU (precision.cpu_policy)
    assert (profile.name, profile.precision, profile.xla, reason) == ("cpu", "auto", False, "no GPU is visible")


def test_unknown_memory_does_not_block_a_match():
    profile, _ = pick_profile([GpuDetails(0, "NVIDIA A100-PCIE-40GB", (8, 0), None)], PROFILES)
    assert profile.name in ("a100", "a100_80gb")


def test_a_40gb_card_does_not_satisfy_the_80gb_profile():
    message = describe_mismatch("a100_80gb", PROFILES["a100_80gb"].expect, [RECORDED["A100 40GB"][0]])
    assert message == ("hardware=a100_80gb expects 1 GPU matching 'A100' with at least 79 GiB; "
                       "found 1 GPU: NVIDIA A100-SXM4-40GB.")


def test_every_gpu_profile_matches_its_own_card_and_no_other_named_card():
    named = {name: gpu for name, (gpu, profile, _) in RECORDED.items() if profile != "gpu"}
    for card, gpu in named.items():
        matches = {p.name for p in PROFILES.values() if p.expect.device_type == "GPU"
                   and describe_mismatch(p.name, p.expect, [gpu]) is None}
        assert RECORDED[card][1] in matches
        assert matches <= {"a100", "a100_80gb"} or len(matches) == 1, (card, matches)


def test_what_the_user_sets_on_auto_wins_over_the_picked_profile():
    user = HardwareConfig(name="auto", xla=False, gpus=[0], strict=True)
    merged = with_user_settings(PROFILES["h100"], user)
    assert merged.name == "h100" and merged.xla is False and merged.gpus == [0] and merged.strict is True
    assert merged.precision == "mixed_bfloat16"  # not set by the user: the profile's


def test_setup_with_auto_on_this_machine_uses_the_cpu_profile():
    info = setup_hardware(HardwareConfig(name="auto"), seed=0)
    assert (info.profile, info.reason) == ("cpu", "no GPU is visible")
    assert (info.xla, info.precision, info.steps_per_execution) == (False, "float32",
                                                                    PROFILES["cpu"].steps_per_execution)


def test_threads_fixed_earlier_in_the_process_are_a_warning_not_an_error(caplog):
    tf.constant(1.0) + 1.0  # TensorFlow is initialised (it is, in this test process, anyway)
    info = setup_hardware(HardwareConfig(name="cpu", intra_op_threads=7), seed=0)
    assert info.profile == "cpu"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("hardware.intra_op_threads=7 not applied: TensorFlow was already initialised in this process" in line
               for line in warned)


def test_intra_op_threads_auto_splits_ops_for_large_inputs_and_declaring_models(tmp_path, monkeypatch):
    """The cpu profile's auto: one thread per op for an MLP's small inputs, every core from 2,048 values on, and
    what the model function declares first (ours: the conv nets, every core even on 28x28; all measured:
    bench/README.md). The rule reads data.input_shape and model._target_ from the config, before TensorFlow."""
    from omegaconf import OmegaConf

    from tfx_hydra.data.preflight import declared_input_values
    from tfx_hydra.threads import declared_threads, op_threads

    assert [op_threads("auto", n)[0] for n in (64, 784, 2047, 2048, 32 * 32 * 3, 160 * 160 * 3, None)] == [
        1, 1, 1, 0, 0, 0, 1]
    assert op_threads("auto", 784) == (1, "inputs of 784 values (under 2,048): one thread per op")
    assert op_threads("auto", 3072) == (0, "inputs of 3,072 values (2,048 or more)")
    assert op_threads("auto", None) == (1, "inputs of unknown size: one thread per op")  # text, a user's source
    assert op_threads("auto", 784, declared=0) == (0, "the model function declares it (intra_op_threads)")
    assert op_threads(3, 784, declared=0) == (3, "set by hardware.intra_op_threads")  # a number is the user's
    assert op_threads(None, 10**6) == (None, "")  # a GPU profile: TensorFlow's default
    # what model._target_ names declares: ours (the conv nets; the MLP says nothing), a user's function or class
    (tmp_path / "users_models.py").write_text(
        "def conv(**keys): pass\nconv.intra_op_threads = 0\n"
        "class Wide:\n    intra_op_threads = 2\n"
        "def quiet(**keys): pass\n"
        "def wrong(**keys): pass\nwrong.intra_op_threads = 'many'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [declared_threads(t) for t in ("tfx_hydra.models.cnn", "tfx_hydra.models.resnet_small",
                                          "tfx_hydra.models.mlp", "users_models.conv", "users_models.Wide",
                                          "users_models.quiet", "users_models.nowhere", None)] == [
        0, 0, None, 0, 2, None, None, None]
    with pytest.raises(ConfigError, match=r"model._target_=users_models.wrong declares intra_op_threads='many': "
                                          r"expected a whole number of threads for each op, 0 for every core"):
        declared_threads("users_models.wrong")
    # a number the user set wins without the declaration being read (a bad one included)
    from tfx_hydra.threads import set_threads

    assert set_threads(tf, 3, None, 784, "users_models.wrong")[1].startswith("set by hardware.intra_op_threads")
    assert declared_input_values(OmegaConf.create({"input_shape": [160, 160, 3]})) == 76_800
    assert declared_input_values(OmegaConf.create({"input_shape": "???"})) is None
    assert declared_input_values(OmegaConf.create({"input_shape": []})) is None  # text
    assert declared_input_values(OmegaConf.create({"path": "x.csv"})) is None
    assert load_profiles()["cpu"].intra_op_threads == "auto"
    with pytest.raises(ConfigError, match=r"hardware.intra_op_threads=many"):
        HardwareConfig(name="cpu", intra_op_threads="many")
