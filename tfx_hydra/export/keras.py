"""export=keras: the served model (raw inputs in: served.py) as one `.keras` file, reloaded and checked
against it.

The file names the classes of ours it was built and compiled with (a hub or preprocessing layer, the
smoothed loss, the warmup schedule); another program loads it after `register_keras_classes()`, or with
`keras.models.load_model(path, compile=False)` when it only predicts.
"""

from __future__ import annotations

import os

from tfx_hydra.export.result import (
    PARITY,
    ExportResult,
    features_beside,
    labels_beside,
    make_parent,
    output_difference,
    require_parity,
)
from tfx_hydra.export.served import raw_batches, served_model


class KerasExport:
    """The native Keras file, <export_dir>/<model_name>.keras, verified by loading it back; the classes' names
    beside it (<model_name>.labels.txt)."""

    kind = "keras"

    def __init__(self, export_dir: str, model_name: str) -> None:
        self.path = os.path.join(export_dir, f"{model_name}.keras")
        self.model_name = model_name

    def __call__(self, model, datasets) -> ExportResult:
        import keras

        make_parent(self.path, "export.keras.export_dir")
        served = served_model(model, datasets.spec)  # raw inputs in: the data's scaling is its first layer
        compiled_as(served, model)
        served.save(self.path)
        inputs, _ = next(raw_batches(datasets))
        register_keras_classes()
        reloaded = keras.models.load_model(self.path)
        diff = output_difference(reloaded(inputs), served(inputs, training=False))
        require_parity("keras", diff, PARITY)
        return ExportResult(self.kind, self.path, {"export.keras.max_abs_diff": diff,
                                                   "export.keras.size_bytes": float(os.path.getsize(self.path))},
                            beside=labels_beside(os.path.dirname(self.path), self.model_name, datasets.spec)
                            + features_beside(os.path.dirname(self.path), self.model_name, datasets.spec))


def compiled_as(served, model) -> None:
    """`served` compiled as the trained model is (its loss, metrics, and an optimizer of its settings holding its
    state: the step count, the moments), so the .keras file loads ready to train on, on raw inputs like
    everything else it is handed. The optimizer is a copy: Keras saves an object shared by two models once,
    under the inner one, and the outer one then loads without its state."""
    if served is model or not getattr(model, "compiled", False) or model.optimizer is None:
        return
    served.compile_from_config(model.get_compile_config())
    served.optimizer.build(served.trainable_variables)
    state, copy = model.optimizer.variables, served.optimizer.variables
    if len(state) == len(copy) and all(tuple(a.shape) == tuple(b.shape) for a, b in zip(state, copy)):
        for source, target in zip(state, copy):
            target.assign(source)


def register_keras_classes() -> None:
    """Make every Keras class of tfx_hydra's known to `keras.models.load_model` (each module registers its
    own on import): the layers, the label-smoothed loss, the warmup schedule."""
    import tfx_hydra.lr_schedule.warmup  # noqa: F401
    import tfx_hydra.models.layers  # noqa: F401  (a keras-hub preset's layers import keras-hub as they load)
    import tfx_hydra.trainer.losses  # noqa: F401
