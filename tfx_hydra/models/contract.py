"""contract: what a model builder -- ours or the user's -- must hand back, checked before training.

A builder is any function or class a `model` config's `_target_` names. It is called inside the
strategy's scope with the config's keys as arguments (ours take `name`, `input_shape`,
`num_classes` and their own keys; `input_shape` and `num_classes` interpolate `${data.*}`) and
returns an uncompiled `keras.Model`. Before fit, the model must fit the data: the inputs' shape, one
output per class, integer labels. Said here, in the words of the config, rather than as a shape
error from inside Keras' first step.
"""

from __future__ import annotations

from typing import Any

from tfx_hydra.errors import ConfigError, DataError


def require_keras_model(built: Any, target: str) -> Any:
    """`built` is a keras.Model (a Sequential or a subclass too)."""
    import keras

    if not isinstance(built, keras.Model):
        raise ConfigError(f"model._target_={target} returned a {type(built).__module__}.{type(built).__qualname__}, "
                          "not a keras.Model.",
                          fix="return the model: keras.Model(inputs, outputs) (or keras.Sequential([...])), "
                          "uncompiled; tfx_hydra compiles it")
    return built


def require_fits_data(model: Any, datasets: Any) -> None:
    """The model takes the pipelines' inputs and ends in one output per class."""
    element = datasets.train.element_spec
    inputs, labels = element[0], element[1]
    want = tuple(inputs.shape[1:])
    have = _input_shape(model)
    if have is not None and len(have) == len(want) and any(h not in (None, w) for h, w in zip(have, want)):
        raise DataError(f"the model '{model.name}' takes inputs of shape {list(have)}, the data gives {list(want)}.",
                        fix=f"build the model for the data's shape: input_shape: ${{data.input_shape}} in its config "
                        f"(here {list(want)})")
    outputs = getattr(model, "outputs", None)
    width, task = datasets.spec.num_classes, datasets.spec.task
    if outputs and len(outputs) == 1 and outputs[0].shape[-1] not in (None, width):
        raise DataError(f"the model '{model.name}' ends in {outputs[0].shape[-1]} outputs, the data has "
                        f"{task.describe(width)} (task={task.name}).",
                        fix="end the model in num_classes units: num_classes: ${data.num_classes}")
    integer = task.label_dtype.startswith("int")
    if labels.dtype.is_integer != integer:
        raise DataError(f"the data's labels are {labels.dtype.name}: task={task.name} trains on "
                        + ("one integer class index per example." if integer else f"{task.label_dtype} labels."),
                        fix=f"cast the labels in the data source (tf.cast(y, tf.{task.label_dtype}))")


def _input_shape(model: Any) -> tuple | None:
    inputs = getattr(model, "inputs", None)
    if not inputs or len(inputs) != 1:  # a subclassed model before its first call, or several inputs
        return None
    return tuple(inputs[0].shape[1:])
