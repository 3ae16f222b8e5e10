"""task=multilabel: any number of labels per example (multi-hot rows, one 0/1 per label), one sigmoid
per label. Served as `probabilities`, `labels` (1 where a label's probability reaches task.threshold) and
`tags` (each label's name where it is 1, "" where it is 0); reported as a per-label table of precision,
recall, F1 and support, under the tags' names."""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.errors import DataError
from tfx_hydra.task.base import Thresholded, require_numbers, row_error


class Multilabel(Thresholded):
    name = "multilabel"
    outputs = ("probabilities", "labels", "tags")
    named_outputs = ("tags",)
    decision = "labels"
    quality_name = "accuracy"  # per label: the share of 0/1 decisions that are right
    label_dtype = "float32"

    def labels(self, y, split, width, first_row=None):
        y = require_numbers(self.name, np.asarray(y), split, first_row,
                            fix="one 0/1 column per label")
        if y.ndim != 2:
            raise DataError(f"task=multilabel: the {split} split's labels have shape {list(y.shape)}: expected "
                            "multi-hot rows, one 0/1 per label.",
                            fix="several 0/1 label columns (data.label_columns=[...]) or one delimited column "
                            "(data.label_delimiter=';')")
        if y.shape[1] != width:
            raise DataError(f"data.num_classes={width} does not match the data: its rows have {y.shape[1]} labels.",
                            fix=f"data.num_classes={y.shape[1]}")
        wrong = np.argwhere((y != 0) & (y != 1))
        if len(wrong):
            row, column = (int(i) for i in wrong[0])
            raise row_error(self.name, split, row, first_row,
                            f"has {y[row, column]:g} for label {column}: a multi-hot row holds "
                            "only 0 and 1", fix="one 0/1 per label (1: the label applies)")
        return y.astype(self.label_dtype)

    def describe(self, width):
        return f"{width} labels"

    def named(self, decided, names):
        """Each label's name where it is 1 and "" where it is 0: StringLookup reads 0 as its mask token ("")
        and i + 1 as the i-th name."""
        import keras

        positions = decided * keras.ops.arange(1, len(names) + 1, dtype="int32")
        return {"tags": keras.layers.StringLookup(vocabulary=list(names), mask_token="", num_oov_indices=0,
                                                  invert=True, name="tag_names")(positions)}

    def quality(self, values, labels):
        return float(np.mean(self.decided(values) == np.asarray(labels)))

    def evaluated(self, values, labels):
        import keras

        loss = keras.losses.binary_crossentropy(np.asarray(labels, "float32"), values)
        return {"test_accuracy": self.quality(values, labels), "test_loss": float(np.mean(np.asarray(loss)))}

    def report(self, values, labels, folder, names=()):
        from sklearn.metrics import classification_report

        names = list(names) or [f"label_{i}" for i in range(np.asarray(values).shape[-1])]
        table = classification_report(np.asarray(labels).astype(int), self.decided(values), target_names=names,
                                      zero_division=0, digits=4)
        with open(os.path.join(folder, "per_label_report.txt"), "w", encoding="utf-8") as out:
            out.write(f"threshold {self.threshold}\n\n{table}")
        return ["per_label_report.txt"]
