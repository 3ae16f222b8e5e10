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
    outputs: ClassVar[tuple[str, ...]]  # every output a served model answers with (answers())
    named_outputs: ClassVar[tuple[str, ...]] = ()  # those holding names (strings): answered only when given names
    decision: ClassVar[str | None] = None  # the output holding the task's decision: a class index, 0/1 labels
    quality_name: ClassVar[str]  # what an export's predictions are scored by against Keras' (higher is better)
    label_dtype: ClassVar[str]
    generates: ClassVar[bool] = False  # a language model: served as generated text (export/generate.py)

    # --- labels ---------------------------------------------------------------------------------
    def labels(self, y: Any, split: str, width: int, first_row: int | None = None) -> np.ndarray:
        """The labels of one split (`split`: its name, or a file's path with `first_row` the file's row of its
        first label), checked and in the dtype and shape the loss takes; a bad label is one DataError naming
        the split and example, or the file and row."""
        raise NotImplementedError

    def describe(self, width: int) -> str:
        """The labels as the data step says them: '10 classes', '1 target'."""
        raise NotImplementedError

    def classes(self, width: int) -> int:
        """How many names the labels have (DataSpec.names): one per class, label or tag; binary's two."""
        return width

    # --- predictions ----------------------------------------------------------------------------
    def answers(self, values, names: tuple[str, ...]) -> dict:
        """What a served model answers for the head's symbolic `values` (Keras ops and layers, so the SavedModel
        and the MLflow model answer alike): the values, the decision and, given `names`, the names beside the
        indices (without: the numbers only, as TF.js takes them)."""
        raise NotImplementedError

    def answered(self, named: bool = True) -> set[str]:
        """The outputs answers() gives, with names or without."""
        return set(self.outputs) - (set() if named else set(self.named_outputs))

    def decided(self, values: np.ndarray) -> np.ndarray | None:
        """The decision a served model returns beside the head's values (a class, 0/1 labels), or None."""
        return None

    def quality(self, values: np.ndarray, labels: np.ndarray) -> float:
        """A score of predictions against labels: what an export's parity report compares with Keras'."""
        raise NotImplementedError

    def evaluated(self, values: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """mode=evaluate's test metrics (test_loss and the task's quality) for a served model's outputs."""
        raise NotImplementedError

    # --- reports --------------------------------------------------------------------------------
    def report(self, values: np.ndarray, labels: np.ndarray, folder: str, names: tuple[str, ...] = ()) -> list[str]:
        """The run's plots and tables of the test split (files written into `folder`), the classes called by
        their `names` (DataSpec.names; () : numbered)."""
        raise NotImplementedError


class Thresholded(Task):
    """Sigmoid tasks (binary, multilabel): each output a probability, a 0/1 decision from task.threshold on,
    served as `probabilities`, the decision (named by `decision`) and its names (`named`)."""

    head = "sigmoid"
    output = "probabilities"
    decision: ClassVar[str]

    def answers(self, values, names):
        import keras

        decided = keras.ops.cast(keras.ops.greater_equal(values, self.threshold), "int32")
        return {"probabilities": values, self.decision: decided, **(self.named(decided, names) if names else {})}

    def named(self, decided, names: tuple[str, ...]) -> dict:
        """The names of the decision's 0/1 values, as the task answers them."""
        raise NotImplementedError

    def decided(self, values):
        return (np.asarray(values) >= self.threshold).astype("int64")


def name_of_index(index, names: tuple[str, ...], layer: str = "class_names"):
    """The name of each class index (Keras' StringLookup, inverted: a layer every Keras loads, no code of ours)."""
    import keras

    return keras.layers.StringLookup(vocabulary=list(names), num_oov_indices=0, invert=True, name=layer)(index)


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


def one_label_each(task: str, y: np.ndarray, split: str, fix: str) -> np.ndarray:
    """One label per example (a column of one is one): the labels as a vector, or one DataError in one wording
    for the tasks that take a single label (classification: a class index; binary: 0 or 1)."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.reshape(-1)
    if y.ndim != 1:
        raise DataError(f"task={task}: the {split} split's labels have shape {list(y.shape)}: expected one label per "
                        "example.", fix=fix)
    return y
