"""The last layer of every built-in model, chosen by the task (`head: ${task.head}` in conf/model/):
a softmax over the classes, a sigmoid per label (binary, multilabel), or linear outputs (regression),
always computed in float32 (`precision.OUTPUT_DTYPE`): a float16 softmax or sigmoid loses the small
probabilities a cross-entropy needs, and float16 outputs round regression targets.

For regression with `task.standardize_targets`, `in_target_units` puts the training targets' mean
and std after the model's outputs: the model learns standardized targets' scale, and every export
(SavedModel, TFLite, the MLflow model) predicts in the target's own units without undoing anything.
"""

from __future__ import annotations

from tfx_hydra.metrics import HEADS
from tfx_hydra.precision import OUTPUT_DTYPE
from tfx_hydra.settings.checks import require_choice, require_positive


def head(x, num_classes: int, activation: str = "softmax"):
    """The float32 output layer: `num_classes` units (classes, labels or targets; 1 for binary)."""
    import keras

    require_positive("data.num_classes", num_classes, 10)
    require_choice("model.head", activation, HEADS, fix="model.head=${task.head}")
    return keras.layers.Dense(num_classes, activation=activation, dtype=OUTPUT_DTYPE, name="predictions")(x)


def in_target_units(model, spec):
    """`model` with its outputs mapped to the targets' units (x * std + mean, per target) when the task
    asks (task.standardize_targets) and the data read the figures (DataSpec.target_mean), else `model`
    itself. A functional model gets the layer after its output, its own layers unchanged (a backbone stays
    findable by name); another model is called inside a new one."""
    if not spec.task.standardize_targets or spec.target_mean is None:
        return model
    import keras

    units = keras.layers.Rescaling(scale=list(spec.target_std), offset=list(spec.target_mean), dtype=OUTPUT_DTYPE,
                                   name="target_units")
    inputs = getattr(model, "inputs", None)
    if inputs and len(inputs) == 1 and len(getattr(model, "outputs", None) or []) == 1:
        return keras.Model(inputs[0], units(model.outputs[0]), name=model.name)
    inputs = keras.Input(shape=tuple(spec.input_shape), name="inputs")
    return keras.Model(inputs, units(model(inputs)), name=model.name)
