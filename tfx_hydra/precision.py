"""precision: the Keras dtype policy a run computes in, and loss scaling for float16.

This module owns the dtype-policy vocabulary: nothing else spells a policy string.
Keras is imported inside the functions (importing it costs ~6 s; validation must not).
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"
POLICIES = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)

# The dtype every model's last layer computes in, whatever the policy: a softmax in
# float16 loses the small probabilities that the cross-entropy needs.
OUTPUT_DTYPE = "float32"

# A "fixed" loss scale never grows: Keras' LossScaleOptimizer only grows the scale after
# this many finite steps. It still halves the scale (and skips the step) on an overflow,
# which a truly fixed scale would turn into NaN weights.
NEVER_GROW = 10**9


# bfloat16 pays on a CPU that multiplies it in its matrix units (Intel AMX), for ops large enough to fill them:
# model=cnn on 64x64x3 inputs went from ~1,000 to ~2,000 examples/s on a Xeon with AMX, resnet_small +15 %
BFLOAT16_CPU_FLAG = "amx_bf16"
BFLOAT16_MIN_INPUTS = 4096  # values in one example's input from which AMX's bfloat16 pays (model=cnn on 64x64x3)


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        with open(path, encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_policy(input_values: int | None, flags: set[str]) -> tuple[str, str]:
    """The cpu profile's precision=auto: mixed_bfloat16 where the CPU has AMX-BF16 and an example's input holds
    4,096 values or more (an MLP's small matrices gain nothing), else float32; and why, for the precision line."""
    if BFLOAT16_CPU_FLAG not in flags:
        return FLOAT32, f"no AMX-BF16 on this CPU ({BFLOAT16_CPU_FLAG} not in its flags): bfloat16 would be slower"
    if not input_values or input_values < BFLOAT16_MIN_INPUTS:
        return FLOAT32, (f"the CPU has AMX-BF16 ({BFLOAT16_CPU_FLAG}), but inputs of {input_values or 'unknown'} "
                         f"values are too small to gain from it")
    return MIXED_BFLOAT16, f"the CPU has AMX-BF16 ({BFLOAT16_CPU_FLAG}) and inputs of {input_values:,} values"


def resolve_policy(requested: str, hardware) -> tuple[str, list[str]]:
    """The policy to use (precision=auto takes the hardware profile's) and warnings about it."""
    policy = hardware.precision if requested == "auto" else requested
    warnings = []
    if policy == MIXED_FLOAT16 and not hardware.fast_float16:
        where = "a GPU without tensor cores" if hardware.gpus else "the CPU"
        warnings.append(f"precision mixed_float16 on {where}: float16 is fast only on GPUs of compute capability "
                        "7.0+ (tensor cores); expect no speedup. precision=fp32 (or bf16 on Ampere+) fits here.")
    return policy, warnings


def set_precision(policy: str) -> str:
    """Make `policy` Keras' global dtype policy for layers built from now on.

    Always sets it (float32 included), so a second run in the same process does not
    inherit the previous run's policy.
    """
    import keras

    keras.mixed_precision.set_global_policy(policy)
    return keras.mixed_precision.global_policy().name


def apply_loss_scaling(optimizer, policy: str, loss_scale) -> tuple[object, bool]:
    """The optimizer to compile with and Keras' `auto_scale_loss` flag, per precision.loss_scale.

    mixed_float16: "auto"/"dynamic" lets Keras wrap the optimizer in a dynamic
    LossScaleOptimizer; a number wraps it with that fixed scale; null turns scaling off.
    Other policies need no scaling (bfloat16 has float32's range).
    """
    import keras

    if policy != MIXED_FLOAT16:
        if loss_scale not in ("auto", None):
            raise ConfigError(f"precision.loss_scale={loss_scale} only applies to mixed_float16, and the policy "
                              f"in effect is {policy}.", fix="precision.loss_scale=auto")
        return optimizer, False
    if loss_scale in ("auto", "dynamic"):
        return optimizer, True
    if loss_scale is None:
        return optimizer, False
    fixed = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=float(loss_scale),
                                                dynamic_growth_steps=NEVER_GROW)
    return fixed, False
