"""What every exporter shares: the `ExportResult` tracking logs, the parity check against the served Keras
model (served.py) on the validation split's raw values, and the folder it writes to made first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tfx_hydra.errors import ExportError
from tfx_hydra.export.served import write_labels


@dataclass
class ExportResult:
    kind: str  # the export option's name, e.g. "savedmodel"
    path: str  # where the artifact was written
    figures: dict[str, float] = field(default_factory=dict)  # what it is: size, parity, version (tags, not metrics)
    beside: list[str] = field(default_factory=list)  # files written next to the artifact (its labels file)


def figure_text(value: float) -> str:
    """A figure as a tag holds it: an integer as one (a size, a version), else 6 significant digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def labels_beside(export_dir: str, model_name: str, spec) -> list[str]:
    """`<export_dir>/<model_name>.labels.txt`, the classes' names one per line in index order, for the formats
    that hold no names of their own (.keras, TFLite; ONNX has them in its metadata too); [] without names."""
    if not spec.names:
        return []
    return [write_labels(os.path.join(export_dir, f"{model_name}.labels.txt"), spec.names)]


def features_beside(export_dir: str, model_name: str, spec) -> list[str]:
    """`<export_dir>/<model_name>.features.txt`, a table's feature columns one per line in the order the model's
    one input takes them, for the formats that take a row by position (.keras, TFLite, ONNX); [] for inputs
    without names."""
    if not spec.feature_names:
        return []
    path = os.path.join(export_dir, f"{model_name}.features.txt")
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(f"{name}\n" for name in spec.feature_names))
    return [path]


def folder_size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


PARITY = 1e-5  # largest difference from Keras' output an unquantized export may show, relative to outputs above 1


def compare_on_validation(served, datasets, predict) -> tuple[float, float, float]:
    """The task's score (accuracy; for regression minus the MAE) of `predict` and of the served Keras model
    on the validation split's raw values, and their largest output difference (output_difference)."""
    import numpy as np

    from tfx_hydra.export.served import raw_batches

    task = datasets.spec.task
    exported, expected, labels = [], [], []
    for inputs, batch_labels in raw_batches(datasets):
        exported.append(np.asarray(predict(inputs)).reshape(len(inputs), -1))
        expected.append(np.asarray(served(inputs, training=False), dtype="float32").reshape(len(inputs), -1))
        labels.append(batch_labels)
    exported, expected, labels = (np.concatenate(parts) for parts in (exported, expected, labels))
    diff = output_difference(exported, expected)
    return task.quality(exported, labels), task.quality(expected, labels), diff


def output_difference(exported, expected) -> float:
    """The largest difference between an export's outputs and Keras', relative where Keras' exceed 1 (a
    regression's targets in the hundreds differ in float32's last digits as probabilities do in theirs)."""
    import numpy as np

    expected = np.asarray(expected, dtype="float32")
    difference = np.max(np.abs(np.asarray(exported, dtype="float32") - expected))
    return float(difference / max(1.0, float(np.max(np.abs(expected)))))


def quality_keys(kind: str, task) -> tuple[str, str]:
    """The names an export logs its score and Keras' under: export.<kind>.accuracy (classification,
    binary, multilabel) or export.<kind>.neg_mae (regression), and keras_<same>."""
    return f"export.{kind}.{task.quality_name}", f"export.{kind}.keras_{task.quality_name}"


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
