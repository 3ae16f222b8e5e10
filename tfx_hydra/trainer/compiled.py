"""compiled: what model.compile gets besides the optimizer -- the loss and the metrics -- and the
callbacks of the user's that fit runs after ours.

Each is a Keras name (`trainer.loss=sparse_categorical_crossentropy`, `trainer.metrics=[accuracy]`)
or a `_target_` node naming a class or factory of the user's (or of Keras):

    trainer:
      loss: {_target_: myproj.losses.focal, gamma: 2.0}
      metrics: [accuracy, {_target_: keras.metrics.SparseTopKCategoricalAccuracy, k: 3, name: top3}]
      callbacks: [{_target_: myproj.callbacks.LogGradients, every: 10}]

A metric node needs `name`: it is the name the metric is logged, monitored and swept under, known
before anything is built (preflight checks `sweep.metric` against it). Names are checked against
Keras before fit, which would fail only at the first batch.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.compose import build

# Names model.compile resolves itself (from the loss) that keras.metrics.get does not know.
KERAS_COMPILE_METRIC_ALIASES = ("acc", "crossentropy", "ce")


def loss(value: Any):
    """trainer.loss as model.compile takes it: a checked Keras name, or the built `_target_`."""
    import keras

    if isinstance(value, dict):
        return build(OmegaConf.create(value), "trainer.loss")
    require_keras_name("trainer.loss", value, keras.losses, "sparse_categorical_crossentropy")
    return value


def metrics(values: list) -> list:
    """trainer.metrics as model.compile takes them: checked Keras names and built `_target_`s."""
    import keras

    compiled = []
    for index, value in enumerate(values):
        if isinstance(value, dict):
            compiled.append(build(OmegaConf.create(value), f"trainer.metrics[{index}]"))
            continue
        if value not in KERAS_COMPILE_METRIC_ALIASES:
            require_keras_name("trainer.metrics", value, keras.metrics, "[accuracy]")
        compiled.append(value)
    return compiled


def user_callbacks(nodes: list) -> list:
    """trainer.callbacks, built: Keras callbacks fit runs after tfx_hydra's own."""
    import keras

    built = []
    for index, node in enumerate(nodes):
        callback = build(OmegaConf.create(node), f"trainer.callbacks[{index}]")
        if not isinstance(callback, keras.callbacks.Callback):
            raise ConfigError(f"trainer.callbacks[{index}] ({node['_target_']}) built a {type(callback).__name__}, "
                              "not a keras.callbacks.Callback.",
                              fix="subclass keras.callbacks.Callback (or return an instance of one)")
        built.append(callback)
    return built


def require_keras_name(key: str, name: str, module, example: str) -> None:
    try:
        module.get(name)
    except ValueError:
        raise ConfigError(f"{key}: Keras does not know '{name}'.",
                          fix=f"{key}={example} (or another name from {module.__name__}, or a _target_ node of "
                          "your own)") from None
