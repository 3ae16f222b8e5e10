"""task=classification: one class per example (integer labels 0..n-1), a softmax over the classes.
Served as `probabilities`, the predicted `class` (its name) and `class_index`; reported as a confusion matrix
and scikit-learn's per-class precision, recall and F1, under the classes' names."""

from __future__ import annotations

import csv
import os

import numpy as np

from tfx_hydra.errors import DataError
from tfx_hydra.task.base import Task, name_of_index, one_label_each, require_numbers, row_error


class Classification(Task):
    name = "classification"
    head = "softmax"
    output = "probabilities"
    outputs = ("probabilities", "class", "class_index")
    named_outputs = ("class",)
    decision = "class_index"
    quality_name = "accuracy"
    label_dtype = "int64"

    def labels(self, y, split, width, first_row=None):
        y = require_numbers(self.name, np.asarray(y), split, first_row,
                            fix="class indices 0..n-1, or class names in a CSV")
        y = one_label_each(self.name, y, split, fix="task=multilabel for several labels per example, "
                           "task=regression for numbers")
        fractional = np.flatnonzero(y != np.round(y))
        if len(fractional):
            row = int(fractional[0])
            raise row_error(self.name, split, row, first_row,
                            f"has label {y[row]}, not a class index",
                            fix="task=regression for numeric targets")
        if len(y) and (y.min() < 0 or y.max() >= width):
            distinct = len(np.unique(y))
            if looks_continuous(distinct, len(y), width):  # a target to predict, not class indices
                raise DataError(f"task=classification: the {split} labels look like numbers to predict, not "
                                f"classes: {distinct} distinct values over [{y.min():g}, {y.max():g}], and "
                                f"data.num_classes={width}.", fix=f"task=regression (numeric targets), or "
                                f"data.num_classes={int(y.max()) + 1} if they are class indices")
            raise DataError(f"data.num_classes={width} does not match the data: {split} labels range over "
                            f"[{int(y.min())}, {int(y.max())}].", fix=f"data.num_classes={int(y.max()) + 1}")
        return y.astype(self.label_dtype)

    def describe(self, width):
        return f"{width} classes"

    def answers(self, values, names):
        import keras

        # top_k, not argmax: Keras' argmax bitcasts to tell -0.0 from 0.0, an op TF.js does not have
        index = keras.ops.squeeze(keras.ops.top_k(values, k=1)[1], axis=-1)
        return {"probabilities": values, "class_index": index, **({"class": name_of_index(index, names)} if names
                                                                    else {})}

    def decided(self, values):
        return np.argmax(values, axis=-1)

    def quality(self, values, labels):
        return float(np.mean(np.argmax(values, axis=-1) == np.asarray(labels).reshape(-1)))

    def evaluated(self, values, labels):
        import keras

        loss = keras.losses.sparse_categorical_crossentropy(np.asarray(labels).reshape(-1), values)
        return {"test_accuracy": self.quality(values, labels), "test_loss": float(np.mean(np.asarray(loss)))}

    def report(self, values, labels, folder, names=()):
        from sklearn.metrics import classification_report, confusion_matrix

        from tfx_hydra.plots import plot_confusion_matrix

        classes = list(range(values.shape[-1]))
        names = list(names) or [str(c) for c in classes]
        truth, predicted = np.asarray(labels).reshape(-1).astype(int), np.argmax(values, axis=-1)
        matrix = confusion_matrix(truth, predicted, labels=classes)
        with open(os.path.join(folder, "confusion_matrix.csv"), "w", encoding="utf-8", newline="") as out:
            rows = csv.writer(out)  # true class per row, predicted per column, each headed by its name
            rows.writerow(["true \\ predicted", *names])
            rows.writerows([name, *row] for name, row in zip(names, matrix.tolist()))
        plot_confusion_matrix(matrix.tolist(), os.path.join(folder, "confusion_matrix.png"), names)
        table = classification_report(truth, predicted, labels=classes, target_names=names, zero_division=0,
                                      digits=4)
        with open(os.path.join(folder, "classification_report.txt"), "w", encoding="utf-8") as out:
            out.write(table)
        return ["confusion_matrix.csv", "confusion_matrix.png", "classification_report.txt"]


def looks_continuous(distinct: int, examples: int, width: int) -> bool:
    """Integer labels that read as a measured quantity rather than classes: more distinct values than a
    classifier's (over 50), most of them more than the declared classes, and few examples per value."""
    return distinct > max(50, 4 * width) and examples / distinct < 5
