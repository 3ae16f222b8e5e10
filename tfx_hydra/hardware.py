"""hardware: what the run executes on, and the profile's settings applied to it.

A profile (conf/hardware/*.yaml) says what it expects (GPU name, count) and how to
set the machine up (visible GPUs, memory growth, threads, XLA). Matching a profile
against the machine is a pure function of device details (`describe_mismatch`), so
it is tested against details recorded from real cards on a machine without any.

Everything that configures TensorFlow's devices must happen before TensorFlow
initialises them (its first op), which is why this is the first step of a run.
TensorFlow is imported inside the functions: validation must not pay for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tfx_hydra.errors import HardwareMismatch
from tfx_hydra.schemas import ExpectConfig, HardwareConfig


@dataclass(frozen=True)
class GpuDetails:
    """What TensorFlow reports of one physical GPU."""

    index: int
    name: str  # e.g. "NVIDIA A100-SXM4-80GB"
    compute_capability: tuple[int, int] | None = None


@dataclass
class HardwareInfo:
    """The hardware step's result: what later steps (strategy, tracking) read."""

    profile: str
    gpus: list[GpuDetails] = field(default_factory=list)  # visible GPUs, after selection
    xla: bool = False  # the profile's XLA choice (used when trainer.jit_compile=auto)
    mismatch: str | None = None  # why the machine does not match the profile, if it does not

    @property
    def device_type(self) -> str:
        return "GPU" if self.gpus else "CPU"


def describe_mismatch(profile: str, expect: ExpectConfig, gpus: list[GpuDetails]) -> str | None:
    """Say why `gpus` cannot satisfy the profile's expectations, or None when they can."""
    if expect.device_type != "GPU":
        return None  # CPU and "anything" profiles run everywhere
    wanted = max(expect.min_count, 1)
    pattern = expect.name_pattern
    matching = [g for g in gpus if not pattern or re.search(pattern, g.name, re.IGNORECASE)]
    if len(matching) >= wanted:
        return None
    what = f"{wanted} GPU{'s' if wanted > 1 else ''}" + (f" matching '{pattern}'" if pattern else "")
    return f"hardware={profile} expects {what}; found {describe_gpus(gpus)}."


def describe_gpus(gpus: list[GpuDetails]) -> str:
    if not gpus:
        return "no GPU (CPU only)"
    return f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: " + ", ".join(g.name for g in gpus)


def setup_hardware(config: HardwareConfig, seed: int) -> HardwareInfo:
    """Select and configure devices per the profile, seed every RNG, and report what is there."""
    import keras
    import tensorflow as tf

    physical = tf.config.list_physical_devices("GPU")
    all_gpus = [_gpu_details(tf, index, device) for index, device in enumerate(physical)]
    selected = _select_gpus(config, physical)
    try:
        _apply_visible_devices(tf, selected, physical)
        if config.memory_growth:
            for device in selected:
                tf.config.experimental.set_memory_growth(device, True)
        _apply_threads(tf, config)
    except RuntimeError as err:
        raise HardwareMismatch(
            f"TensorFlow initialised its devices before the hardware step could configure them ({err}).",
            fix="start a fresh process; in your own code, run tfx_hydra before any TensorFlow op",
        ) from None
    tf.debugging.set_log_device_placement(config.log_device_placement)
    keras.backend.clear_session()  # a sweep runs jobs in one process: drop the previous job's graph
    keras.utils.set_random_seed(seed)  # Python, NumPy and TensorFlow in one call

    visible = [all_gpus[physical.index(device)] for device in selected]
    mismatch = describe_mismatch(config.name, config.expect, visible)
    if mismatch and config.strict:
        raise HardwareMismatch(
            mismatch,
            fix=f"use hardware=auto (or hardware=cpu) on this machine, or drop hardware.strict=true "
            f"to run with the {config.name} profile's settings anyway",
        )
    return HardwareInfo(profile=config.name, gpus=visible, xla=config.xla, mismatch=mismatch)


def _gpu_details(tf, index: int, device) -> GpuDetails:
    details = tf.config.experimental.get_device_details(device)
    return GpuDetails(
        index=index,
        name=details.get("device_name", device.name),
        compute_capability=details.get("compute_capability"),
    )


def _select_gpus(config: HardwareConfig, physical: list) -> list:
    if config.visible_gpus is None:
        return list(physical)
    missing = [i for i in config.visible_gpus if i >= len(physical)]
    if missing:
        raise HardwareMismatch(
            f"hardware.visible_gpus={list(config.visible_gpus)} asks for GPU index {missing[0]}, "
            f"but this machine has {describe_gpus([GpuDetails(i, d.name) for i, d in enumerate(physical)])}.",
            fix=f"hardware.visible_gpus=null (all GPUs) or indices below {len(physical)}"
            if physical
            else "hardware=cpu",
        )
    return [physical[i] for i in config.visible_gpus]


def _apply_visible_devices(tf, selected: list, physical: list) -> None:
    if not physical or tf.config.get_visible_devices("GPU") == selected:
        return  # nothing to hide; calling anyway would fail once TensorFlow is initialised
    tf.config.set_visible_devices(selected, "GPU")


def _apply_threads(tf, config: HardwareConfig) -> None:
    threading = tf.config.threading
    if config.intra_op_threads and threading.get_intra_op_parallelism_threads() != config.intra_op_threads:
        threading.set_intra_op_parallelism_threads(config.intra_op_threads)
    if config.inter_op_threads and threading.get_inter_op_parallelism_threads() != config.inter_op_threads:
        threading.set_inter_op_parallelism_threads(config.inter_op_threads)
