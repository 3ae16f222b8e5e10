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
from tfx_hydra.models.presets import BUILDER, require_task_fits, resolve_task

TEXT_MODELS = ("tfx_hydra.models.text_baseline", "tfx_hydra.models.hub_text")  # raw strings in, tokenized inside


def require_model_takes_the_inputs(model: Any, data: Any) -> None:
    """One of our models against the kind of inputs the data config gives (raw text: `inputs: text`, as
    text_folder and text_table say; else numbers), before anything is built: text into a numeric model fails
    deep in its first step ('Cast string to float is not supported'). A builder or source of the user's is
    checked on what it builds instead (require_fits_data)."""
    from tfx_hydra.settings.compose import choice

    target = str(model.get("_target_", ""))
    if not target.startswith("tfx_hydra.") or not str(data.get("_target_", "")).startswith("tfx_hydra."):
        return
    text_data = data.get("inputs") == "text"
    text_model = target in TEXT_MODELS
    model_said = f"model={choice('model')}" if choice("model") else f"model._target_={target}"
    data_said = f"data={choice('data')}" if choice("data") else f"data._target_={data.get('_target_')}"
    if target == BUILDER:  # a keras-hub preset: model.task says its inputs (null: the data's)
        return require_task_fits(resolve_task(model.get("task"), text_data), text_data, data_said)
    if text_data and not text_model:
        raise ConfigError(f"{data_said} gives raw text, but {model_said} takes numbers.",
                          fix="model=text_baseline (or model=hub_text), or experiment=text_classification "
                          "(the text model and its settings)")
    if text_model and not text_data:
        raise ConfigError(f"{model_said} takes raw text, but {data_said} gives numbers.",
                          fix="data=text_folder or data=text_table (raw text); for numbers: model=mlp, cnn, "
                          "resnet_small, keras_app or hub")


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
    if outputs and len(outputs) == 1 and outputs[0].shape[-1] not in (None, width) and not task.generates:
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
