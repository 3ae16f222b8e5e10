"""export: exporters, one per option in conf/export/ (several may be selected at once).

An exporter is built from its config, then called with the trained model and the
datasets; it writes its artifact, verifies it and returns an `ExportResult` that
tracking logs. TensorFlow is imported inside the methods (validation must not pay for it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from tfx_hydra.errors import ExportError


@dataclass
class ExportResult:
    kind: str  # the export option's name, e.g. "savedmodel"
    path: str  # where the artifact was written
    metrics: dict[str, float] = field(default_factory=dict)  # verification figures


class SavedModelExport:
    """A SavedModel in TensorFlow Serving's layout: <export_dir>/<model_name>/<version>/.

    The version is one more than the highest integer version already in the folder,
    so pointing several runs at one export_dir gives TF Serving versions 1, 2, 3...
    and it hot-swaps to the newest. The SavedModel is written to a hidden temporary
    folder first and renamed into place, so a serving process never sees half a model
    and two runs exporting at once cannot take the same version.
    """

    kind = "savedmodel"

    def __init__(self, export_dir: str, model_name: str) -> None:
        self.export_dir = export_dir
        self.model_name = model_name

    def __call__(self, model, datasets) -> ExportResult:
        model_dir = os.path.join(self.export_dir, self.model_name)
        try:
            os.makedirs(model_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".staging-", dir=model_dir)
        except OSError as err:
            raise ExportError(f"cannot write to export.savedmodel.export_dir={self.export_dir} ({err.strerror}).",
                              fix="export.savedmodel.export_dir=<a writable folder>") from None
        try:
            model.export(os.path.join(staging, "model"), format="tf_saved_model", verbose=False)
            max_abs_diff = _check_parity(model, os.path.join(staging, "model"), datasets.validation)
            version_dir = _move_to_next_version(os.path.join(staging, "model"), model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return ExportResult(self.kind, version_dir, {"export.savedmodel.max_abs_diff": max_abs_diff,
                                                     "export.savedmodel.version": float(os.path.basename(version_dir))})


def next_version(model_dir: str) -> int:
    """One more than the highest integer-named folder in `model_dir` (1 for an empty one)."""
    versions = [int(n) for n in os.listdir(model_dir) if n.isdigit()] if os.path.isdir(model_dir) else []
    return max(versions, default=0) + 1


def _move_to_next_version(source: str, model_dir: str) -> str:
    for _ in range(100):  # another run may take the version between our listing and our rename
        target = os.path.join(model_dir, str(next_version(model_dir)))
        try:
            os.rename(source, target)  # atomic; fails if target exists (as a non-empty dir)
            return target
        except OSError:
            if not os.path.exists(target):
                raise
    raise ExportError(f"could not claim a new version folder in {model_dir} after 100 tries.")


def _check_parity(model, saved_model_dir: str, dataset) -> float:
    """Load the SavedModel back and compare its serving_default output with Keras' on one batch."""
    import numpy as np
    import tensorflow as tf

    inputs, _ = next(iter(dataset))
    loaded = tf.saved_model.load(saved_model_dir)
    serve = loaded.signatures["serving_default"]
    (input_name,) = serve.structured_input_signature[1].keys()
    served = list(serve(**{input_name: tf.constant(inputs)}).values())[0].numpy()
    expected = np.asarray(model(inputs, training=False))
    diff = float(np.max(np.abs(served - expected)))
    if diff > 1e-4:
        raise ExportError(f"the SavedModel's serving_default output differs from the Keras model's by {diff:.3g}.")
    return diff
