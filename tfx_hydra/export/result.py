"""What every exporter shares: the `ExportResult` tracking logs, the parity check against the Keras
model on the validation split, and the folder it writes to made first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tfx_hydra.errors import ExportError


@dataclass
class ExportResult:
    kind: str  # the export option's name, e.g. "savedmodel"
    path: str  # where the artifact was written
    metrics: dict[str, float] = field(default_factory=dict)  # verification figures


def folder_size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


PARITY = 1e-5  # largest absolute difference from Keras' output an unquantized export may show


def compare_on_validation(model, datasets, predict) -> tuple[float, float, float]:
    """Accuracy of `predict` and of Keras on the validation split, and their largest output difference."""
    import numpy as np

    hits = keras_hits = total = 0
    diff = 0.0
    for inputs, labels in datasets.validation:
        inputs = np.asarray(inputs, dtype="float32")
        exported = np.asarray(predict(inputs))
        expected = np.asarray(model(inputs, training=False), dtype="float32")
        diff = max(diff, float(np.max(np.abs(exported - expected))))
        hits += int(np.sum(np.argmax(exported, axis=-1) == np.asarray(labels)))
        keras_hits += int(np.sum(np.argmax(expected, axis=-1) == np.asarray(labels)))
        total += len(inputs)
    return hits / total, keras_hits / total, diff


def require_parity(kind: str, diff: float, limit: float) -> None:
    if diff > limit:
        raise ExportError(f"the {kind} export's outputs differ from the Keras model's by {diff:.3g} "
                          f"(more than {limit:g}).")


def make_parent(path: str, key: str) -> None:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        reason = err.strerror
    else:
        if os.access(folder, os.W_OK):
            return
        reason = "Permission denied"
    raise ExportError(f"cannot write to {key}={folder} ({reason}).", fix=f"{key}=<a writable folder>")
