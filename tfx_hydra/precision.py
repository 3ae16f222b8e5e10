"""precision: the Keras dtype policy a run computes in.

This module owns the dtype-policy vocabulary: nothing else spells a policy string.
Keras is imported inside the functions (importing it costs ~6 s; validation must not).
"""

from __future__ import annotations

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"
POLICIES = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)

# Only float16 needs loss scaling: its small range lets gradients underflow to zero.
# Keras wraps the optimizer in a dynamic LossScaleOptimizer itself when the global
# policy is mixed_float16, so "dynamic" is the one scaling we offer for it.
LOSS_SCALES_BY_POLICY = {FLOAT32: (None,), MIXED_FLOAT16: ("dynamic",), MIXED_BFLOAT16: (None,)}

# The dtype every model's last layer computes in, whatever the policy: a softmax in
# float16 loses the small probabilities that the cross-entropy needs.
OUTPUT_DTYPE = "float32"


def set_precision(policy: str) -> str:
    """Make `policy` Keras' global dtype policy for layers built from now on.

    Always sets it (float32 included), so a second run in the same process does not
    inherit the previous run's policy.
    """
    import keras

    keras.mixed_precision.set_global_policy(policy)
    return keras.mixed_precision.global_policy().name
