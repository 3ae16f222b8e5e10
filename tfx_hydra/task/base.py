"""What every task answers: what its labels are, the head that predicts them, what a served model
returns, how an export's predictions are scored against Keras', and which reports a run logs.

A task is a small frozen object built from the `task` config group (task=classification |
binary | multilabel | regression). It travels with the data: `DataSpec.task`, so every step that
holds the datasets (the model's head, the exports, mode=evaluate, the reports) asks the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tfx_hydra.errors import DataError


@dataclass(frozen=True)
class Task:
    threshold: float | None = None  # binary and multilabel: the probability from which a label counts as 1
    standardize_targets: bool = False  # regression: the targets' mean and std learned from the training split

    name: ClassVar[str]
    head: ClassVar[str]  # the output layer's activation
    output: ClassVar[str]  # the serving signature's main output: the head's values
    quality_name: ClassVar[str]  # what an export's predictions are scored by against Keras' (higher is better)
    label_dtype: ClassVar[str]

    # --- labels ---------------------------------------------------------------------------------
    def labels(self, y: Any, split: str, width: int, first_row: int | None = None) -> np.ndarray:
        """The labels of one split (`split`: its name, or a file's path with `first_row` the file's row of its
        first label), checked and in the dtype and shape the loss takes; a bad label is one DataError naming
        the split and example, or the file and row."""
        raise NotImplementedError

    def describe(self, width: int) -> str:
        """The labels as the data step says them: '10 classes', '1 target'."""
        raise NotImplementedError

    # --- predictions ----------------------------------------------------------------------------
    def serving(self, values) -> dict:
        """The serving signature's outputs for the head's values (TensorFlow ops)."""
        raise NotImplementedError

    def decided(self, values: np.ndarray) -> np.ndarray | None:
        """The decision a served model returns beside the head's values (a class, 0/1 labels), or None."""
        return None

    def keras_decision(self, values) -> dict | None:
        """The MLflow model's outputs for the head's symbolic values, where the task decides beside them
        (binary's class, multilabel's labels at task.threshold); None: the model's own output."""
        return None

    def quality(self, values: np.ndarray, labels: np.ndarray) -> float:
        """A score of predictions against labels: what an export's parity report compares with Keras'."""
        raise NotImplementedError

    def evaluated(self, values: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """mode=evaluate's test metrics (test_loss and the task's quality) for a served model's outputs."""
        raise NotImplementedError

    # --- reports --------------------------------------------------------------------------------
    def report(self, values: np.ndarray, labels: np.ndarray, folder: str) -> list[str]:
        """The run's plots and tables of the test split (files written into `folder`)."""
        raise NotImplementedError


class Thresholded(Task):
    """Sigmoid tasks (binary, multilabel): each output a probability, a 0/1 decision from task.threshold on,
    served as `probabilities` and the decision (named by `decision`)."""

    head = "sigmoid"
    output = "probabilities"
    decision: ClassVar[str]

    def serving(self, values):
        import tensorflow as tf

        return {"probabilities": values, self.decision: tf.cast(values >= self.threshold, tf.int64)}

    def decided(self, values):
        return (np.asarray(values) >= self.threshold).astype("int64")

    def keras_decision(self, values):
        import keras

        decided = keras.ops.cast(keras.ops.greater_equal(values, self.threshold), "int32")
        return {"probabilities": values, self.decision: decided}


def row_error(task: str, split: str, row: int, first_row: int | None, what: str, fix: str) -> DataError:
    """One DataError for a bad label: the task, then the split's example (counted from 0) or the file's row."""
    where = f"example {row} of the {split} split" if first_row is None else f"{split}, row {row + first_row},"
    return DataError(f"task={task}: {where} {what}.", fix=fix)


def require_numbers(task: str, y: np.ndarray, split: str, first_row: int | None, fix: str) -> np.ndarray:
    """Labels that must be numbers: strings or objects are named by their first example."""
    if y.dtype.kind in "biuf":
        return y
    for row, value in enumerate(y.reshape(len(y), -1)):
        for cell in value:
            try:
                float(cell)
            except (TypeError, ValueError):
                raise row_error(task, split, row, first_row, f"has label {cell!r}, not a number", fix) from None
    return y.astype("float64")
