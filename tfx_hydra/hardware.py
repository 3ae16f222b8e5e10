"""hardware: what the run executes on, and the hardware profile's settings applied to it.

A profile (conf/hardware/*.yaml) says what it expects (GPU name, count, memory, compute
capability) and carries tuned defaults (precision, XLA, per-replica batch size,
steps_per_execution, allocator, threads). `hardware=auto` picks the profile that matches
the visible GPUs (`pick_profile`), or generic settings from the compute capability.
Matching is a pure function of device details, so it is tested against details
recorded from real cards on a machine that has none.

Everything that configures TensorFlow's devices must happen before TensorFlow
initialises them (its first op), which is why this is the first step of a run.
TensorFlow is imported inside the functions: validation must not pay for it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from omegaconf import OmegaConf

from tfx_hydra.console import start_tensorflow_quietly
from tfx_hydra.errors import HardwareMismatch
from tfx_hydra.precision import FLOAT32, MIXED_BFLOAT16, MIXED_FLOAT16, cpu_flags, cpu_policy
from tfx_hydra.settings.schemas import ExpectConfig, HardwareConfig
from tfx_hydra.threads import set_threads

log = logging.getLogger(__name__)

# Values a profile tunes; on hardware=auto, null ones come from the picked profile.
TUNED = ("allocator", "xla", "precision", "per_replica_batch_size", "steps_per_execution",
         "intra_op_threads", "inter_op_threads")
# Settings the fallbacks below use when a profile leaves a tuned value null.
FALLBACKS = {"xla": False, "precision": FLOAT32, "per_replica_batch_size": 32, "steps_per_execution": 1}


@dataclass(frozen=True)
class GpuDetails:
    """What TensorFlow (and nvidia-smi, where present) report of one physical GPU."""

    index: int
    name: str  # e.g. "NVIDIA A100-SXM4-80GB"
    compute_capability: tuple[int, int] | None = None
    memory_gb: float | None = None  # GiB, from nvidia-smi; None when unknown


@dataclass
class HardwareInfo:
    """The hardware step's result: what later steps (precision, strategy, trainer, tracking) read."""

    profile: str  # the profile in effect, e.g. "a100" (also when hardware=auto picked it)
    reason: str = ""  # why this profile is in effect
    gpus: list[GpuDetails] = field(default_factory=list)  # visible GPUs, after selection
    xla: bool = False
    precision: str = FLOAT32  # the policy precision=auto uses
    precision_reason: str = ""  # why, where the profile leaves it to the machine (the cpu profile: AMX-BF16)
    per_replica_batch_size: int = 32  # used when trainer.batch_size=auto
    steps_per_execution: int = 1  # used when trainer.steps_per_execution=auto
    mismatch: str | None = None  # why the machine does not match the profile, if it does not
    strict: bool = False  # hardware.strict: a request the machine cannot satisfy is an error, not a warning
    intra_op_threads: tuple = (None, "")  # the count set (0: every core; None: TensorFlow's default) and why

    @property
    def fast_float16(self) -> bool:
        """Tensor cores (compute capability 7.0+) are what make float16 fast."""
        return any(g.compute_capability and g.compute_capability >= (7, 0) for g in self.gpus)


# --- matching (pure) ----------------------------------------------------------------------

def describe_mismatch(profile: str, expect: ExpectConfig, gpus: list[GpuDetails]) -> str | None:
    """Say why `gpus` cannot satisfy the profile's expectations, or None when they can."""
    if expect.device_type != "GPU":
        return None  # CPU and "anything" profiles run everywhere
    wanted = max(expect.min_count, 1)
    matching = [g for g in gpus if _gpu_matches(expect, g)]
    if len(matching) >= wanted:
        return None
    what = f"{wanted} GPU{'s' if wanted > 1 else ''}"
    if expect.name_pattern:
        what += f" matching '{expect.name_pattern}'"
    if expect.min_memory_gb:
        what += f" with at least {expect.min_memory_gb:g} GiB"
    return f"hardware={profile} expects {what}; found {describe_gpus(gpus)}."


def _gpu_matches(expect: ExpectConfig, gpu: GpuDetails) -> bool:
    if expect.name_pattern and not re.search(expect.name_pattern, gpu.name, re.IGNORECASE):
        return False
    if expect.min_memory_gb and gpu.memory_gb is not None and gpu.memory_gb < expect.min_memory_gb:
        return False
    if expect.min_compute_capability and gpu.compute_capability:
        return float(".".join(map(str, gpu.compute_capability))) >= expect.min_compute_capability
    return True


def describe_gpus(gpus: list[GpuDetails]) -> str:
    if not gpus:
        return "no GPU (CPU only)"
    return f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: " + ", ".join(g.name for g in gpus)


def pick_profile(gpus: list[GpuDetails], profiles: dict[str, HardwareConfig]) -> tuple[HardwareConfig, str]:
    """The profile hardware=auto uses for `gpus`, and why.

    No GPU: the cpu profile. A GPU a named profile matches: that profile, the one with
    the most memory when several match (an A100 80GB is a100_80gb, not a100). Any other
    GPU: generic settings from its compute capability.
    """
    if not gpus:
        return profiles["cpu"], "no GPU is visible"
    matching = [p for p in profiles.values()
                if p.expect.device_type == "GPU" and p.expect.name_pattern
                and describe_mismatch(p.name, p.expect, gpus) is None]
    if matching:
        best = max(matching, key=lambda p: p.expect.min_memory_gb or 0)
        return best, f"{describe_gpus(gpus)} matches the {best.name} profile"
    generic = generic_gpu_profile(gpus)
    return generic, (f"no profile names {gpus[0].name}; generic GPU settings for compute capability "
                     f"{_capability(gpus)}: {generic.precision}, XLA on")


def generic_gpu_profile(gpus: list[GpuDetails]) -> HardwareConfig:
    """bfloat16 from compute capability 8.0 (Ampere), float16 on 7.x (tensor cores), else float32."""
    capability = min((g.compute_capability for g in gpus if g.compute_capability), default=(0, 0))
    precision = MIXED_BFLOAT16 if capability >= (8, 0) else MIXED_FLOAT16 if capability >= (7, 0) else FLOAT32
    return HardwareConfig(name="gpu", expect=ExpectConfig(device_type="GPU"), allocator="cuda_malloc_async",
                          xla=True, precision=precision, per_replica_batch_size=64, steps_per_execution=16,
                          intra_op_threads=0, inter_op_threads=0)


def _capability(gpus: list[GpuDetails]) -> str:
    known = [g.compute_capability for g in gpus if g.compute_capability]
    return ".".join(map(str, min(known))) if known else "unknown"


def with_user_settings(picked: HardwareConfig, requested: HardwareConfig) -> HardwareConfig:
    """The picked profile, with everything the user set on hardware=auto taking precedence."""
    tuned = {k: getattr(requested, k) for k in TUNED if getattr(requested, k) is not None}
    chosen = {k: getattr(requested, k) for k in ("gpus", "memory_growth", "log_device_placement", "strict")}
    return dataclasses.replace(picked, **tuned, **chosen)


def load_profiles() -> dict[str, HardwareConfig]:
    """Every profile of conf/hardware/, by name, read through Hydra as `hardware=<name>` reads it:
    a profile that inherits from another (`defaults: [a100]`) comes whole. One composition holds
    them all (`+hardware@profiles.<name>=<name>`), once per process: the profiles ship with the
    package, and the jobs of a sweep in one process (the basic launcher) each need them."""
    return dict(_composed_profiles())


@functools.lru_cache(maxsize=1)
def _composed_profiles() -> dict[str, HardwareConfig]:
    from tfx_hydra.settings.compose import compose, config_tree, group_options

    with config_tree():
        options = group_options("hardware")
        composed = compose([f"+hardware@profiles.{option}={option}" for option in options], config_name=None)
    profiles = {}
    for node in composed.profiles.values():
        profile = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(HardwareConfig), node))
        profiles[profile.name] = profile
    return profiles


# --- setup (TensorFlow) -------------------------------------------------------------------

def setup_hardware(config: HardwareConfig, seed: int, deterministic: bool = False,
                   input_values: int | None = None, model_target: str | None = None) -> HardwareInfo:
    """Select and configure devices per the profile, seed every RNG, and report what is there.
    For intra_op_threads=auto (threads.py): `input_values`, the values in one example's input (data.input_shape),
    and `model_target`, the model function (model._target_) whose declared count comes first."""
    start_tensorflow_quietly()  # its C++ start-up lines to the job log, its objects out of gc's scans
    import keras
    import tensorflow as tf

    physical = tf.config.list_physical_devices("GPU")
    memory = gpu_memory_gb()
    all_gpus = [_gpu_details(tf, index, device, memory.get(index)) for index, device in enumerate(physical)]
    selected = _select_gpus(config, physical)
    visible = [all_gpus[physical.index(device)] for device in selected]
    if config.name == "auto":
        picked, reason = pick_profile(visible, load_profiles())
        profile = with_user_settings(picked, config)
    else:
        profile, reason = config, f"hardware={config.name} was asked for"

    if profile.allocator and visible:
        os.environ.setdefault("TF_GPU_ALLOCATOR", profile.allocator)  # read when TensorFlow creates the GPU
    try:
        _apply_visible_devices(tf, selected, physical)
        if profile.memory_growth:
            for device in selected:
                tf.config.experimental.set_memory_growth(device, True)
    except RuntimeError as err:
        raise HardwareMismatch(
            f"TensorFlow initialised its devices before the hardware step could configure them ({err}).",
            fix="start a fresh process; in your own code, run tfx_hydra before any TensorFlow op",
        ) from None
    intra_op_threads = set_threads(tf, profile.intra_op_threads, profile.inter_op_threads, input_values, model_target)
    tf.debugging.set_log_device_placement(profile.log_device_placement)
    keras.backend.clear_session()  # a sweep runs jobs in one process: drop the previous job's graph
    keras.utils.set_random_seed(seed)  # Python, NumPy and TensorFlow in one call
    if deterministic:
        tf.config.experimental.enable_op_determinism()

    mismatch = describe_mismatch(config.name, config.expect, visible)
    if mismatch and config.strict:
        raise HardwareMismatch(
            mismatch,
            fix=f"use hardware=auto (or hardware=cpu) on this machine, or drop hardware.strict=true "
            f"to run with the {config.name} profile's settings anyway",
        )
    tuned = {k: getattr(profile, k) if getattr(profile, k) is not None else v for k, v in FALLBACKS.items()}
    tuned["precision"], why = cpu_policy(input_values, cpu_flags()) if tuned["precision"] == "auto" else \
        (tuned["precision"], "")
    return HardwareInfo(profile=profile.name, reason=reason, gpus=visible,  # the CPU's reason said where it decided
                        precision_reason=why if tuned["precision"] == MIXED_BFLOAT16 else "",
                        intra_op_threads=intra_op_threads,
                        mismatch=mismatch, strict=config.strict, **tuned)


def gpu_memory_gb() -> dict[int, float]:
    """Total memory per GPU index in GiB, from nvidia-smi ({} where it is absent)."""
    rows = nvidia_smi("index,memory.total")
    memory = {}
    for row in rows:
        index, mebibytes = (part.strip() for part in row.split(","))
        memory[int(index)] = float(mebibytes) / 1024
    return memory


def nvidia_smi(query: str) -> list[str]:
    """One CSV row per GPU for `query` (nvidia-smi --query-gpu), [] without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def _gpu_details(tf, index: int, device, memory_gb: float | None) -> GpuDetails:
    details = tf.config.experimental.get_device_details(device)
    return GpuDetails(index=index, name=details.get("device_name", device.name),
                      compute_capability=details.get("compute_capability"), memory_gb=memory_gb)


def _select_gpus(config: HardwareConfig, physical: list) -> list:
    if config.gpus is None:
        return list(physical)
    missing = [i for i in config.gpus if i >= len(physical)]
    if missing:
        raise HardwareMismatch(
            f"hardware.gpus={list(config.gpus)} asks for GPU index {missing[0]}, "
            f"but this machine has {describe_gpus([GpuDetails(i, d.name) for i, d in enumerate(physical)])}.",
            fix=f"hardware.gpus=null (all GPUs) or indices below {len(physical)}" if physical else "hardware=cpu",
        )
    return [physical[i] for i in config.gpus]


def _apply_visible_devices(tf, selected: list, physical: list) -> None:
    if not physical or tf.config.get_visible_devices("GPU") == selected:
        return  # nothing to hide; calling anyway would fail once TensorFlow is initialised
    tf.config.set_visible_devices(selected, "GPU")
