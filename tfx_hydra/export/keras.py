"""export=keras: the model as one `.keras` file, reloaded and checked against the trained model.

The file names the classes of ours it was built and compiled with (a hub or preprocessing layer, the
smoothed loss, the warmup schedule); another program loads it after `register_keras_classes()`, or with
`keras.models.load_model(path, compile=False)` when it only predicts.
"""

from __future__ import annotations

import os

from tfx_hydra.export.result import PARITY, ExportResult, make_parent, output_difference, require_parity


class KerasExport:
    """The native Keras file, <export_dir>/<model_name>.keras, verified by loading it back."""

    kind = "keras"

    def __init__(self, export_dir: str, model_name: str) -> None:
        self.path = os.path.join(export_dir, f"{model_name}.keras")

    def __call__(self, model, datasets) -> ExportResult:
        import keras

        make_parent(self.path, "export.keras.export_dir")
        model.save(self.path)
        inputs, _ = next(iter(datasets.validation))
        register_keras_classes()
        reloaded = keras.models.load_model(self.path)
        diff = output_difference(reloaded(inputs), model(inputs, training=False))
        require_parity("keras", diff, PARITY)
        return ExportResult(self.kind, self.path, {"export.keras.max_abs_diff": diff,
                                                   "export.keras.size_bytes": float(os.path.getsize(self.path))})


def register_keras_classes() -> None:
    """Make every Keras class of tfx_hydra's known to `keras.models.load_model` (each module registers its
    own on import): the layers, the label-smoothed loss, the warmup schedule."""
    import tfx_hydra.losses  # noqa: F401
    import tfx_hydra.lr_schedule.warmup  # noqa: F401
    import tfx_hydra.models.layers  # noqa: F401
