"""Hardware profiles: matching against device details recorded from real cards, and setup on CPU."""

from __future__ import annotations

import pytest

from tfx_hydra.errors import HardwareMismatch
from tfx_hydra.hardware import GpuDetails, describe_mismatch, setup_hardware
from tfx_hydra.schemas import ExpectConfig, HardwareConfig

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
    assert info.gpus == [] and info.device_type == "CPU"
    assert info.mismatch is None and info.xla is False


def test_a_mismatching_profile_is_recorded_not_fatal_by_default():
    info = setup_hardware(HardwareConfig(name="a100", expect=A100_PROFILE, xla=True), seed=1)
    assert info.mismatch == "hardware=a100 expects 1 GPU matching 'A100'; found no GPU (CPU only)."
    assert info.xla is True  # carries on with the profile's settings


def test_strict_turns_the_mismatch_into_an_error_with_the_fix():
    with pytest.raises(HardwareMismatch) as caught:
        setup_hardware(HardwareConfig(name="a100", expect=A100_PROFILE, strict=True), seed=1)
    assert "expects 1 GPU matching 'A100'; found no GPU (CPU only)" in str(caught.value)
    assert "Fix: use hardware=auto (or hardware=cpu)" in str(caught.value)


def test_selecting_a_gpu_that_does_not_exist_names_what_there_is():
    with pytest.raises(HardwareMismatch, match=r"visible_gpus=\[1\] asks for GPU index 1, but this machine has "
                                                r"no GPU \(CPU only\)\.\n  Fix: hardware=cpu"):
        setup_hardware(HardwareConfig(visible_gpus=[1]), seed=1)


def test_setup_seeds_every_generator():
    import numpy as np
    import tensorflow as tf

    setup_hardware(HardwareConfig(), seed=7)
    first = (np.random.rand(), float(tf.random.uniform(())))
    setup_hardware(HardwareConfig(), seed=7)
    assert (np.random.rand(), float(tf.random.uniform(()))) == first
