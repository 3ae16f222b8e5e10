"""task=binary: a 0/1 label per example, one sigmoid output (the probability of 1). Served as
`probabilities`, `class_index` (1 where the probability reaches task.threshold) and `class` (its name: the
second class folder's, or "1"); reported as ROC and precision-recall curves with their areas, at the
threshold used."""

from __future__ import annotations

import json
import os

import numpy as np

from tfx_hydra.task.base import Thresholded, name_of_index, one_label_each, require_numbers, row_error


class Binary(Thresholded):
    name = "binary"
    outputs = ("probabilities", "class", "class_index")
    named_outputs = ("class",)
    decision = "class_index"
    quality_name = "accuracy"
    label_dtype = "float32"

    def labels(self, y, split, width, first_row=None):
        y = require_numbers(self.name, np.asarray(y), split, first_row,
                            fix="labels 0 and 1 (task=classification for names)")
        y = one_label_each(self.name, y, split, fix="task=multilabel for several 0/1 labels per example")
        wrong = np.flatnonzero((y != 0) & (y != 1))
        if len(wrong):
            row = int(wrong[0])
            more = f" ({len(wrong):,} such labels in all)" if len(wrong) > 1 else ""
            raise row_error(self.name, split, row, first_row,
                            f"has label {y[row]:g}, not 0 or 1{more}",
                            fix="task=classification data.num_classes=<n> for more than two classes")
        return y.astype(self.label_dtype).reshape(-1, 1)

    def describe(self, width):
        return "binary labels (0/1)"

    def classes(self, width):
        return 2  # 0 and 1, from one output

    def named(self, decided, names):
        return {"class": name_of_index(decided, names)}

    def quality(self, values, labels):
        return float(np.mean(self.decided(values).reshape(-1) == np.asarray(labels).reshape(-1)))

    def evaluated(self, values, labels):
        import keras

        loss = keras.losses.binary_crossentropy(np.asarray(labels, "float32").reshape(-1, 1), values)
        return {"test_accuracy": self.quality(values, labels), "test_loss": float(np.mean(np.asarray(loss)))}

    def report(self, values, labels, folder, names=()):
        from sklearn.metrics import auc, precision_recall_curve, roc_curve

        from tfx_hydra.plots import plot_curve

        truth, scores = np.asarray(labels).reshape(-1).astype(int), np.asarray(values).reshape(-1)
        if len(set(truth)) < 2:  # one class only in the test split: neither curve is defined
            return []
        fpr, tpr, _ = roc_curve(truth, scores)
        precision, recall, _ = precision_recall_curve(truth, scores)
        roc_auc, pr_auc = float(auc(fpr, tpr)), float(auc(recall, precision))
        plot_curve(fpr, tpr, f"ROC (AUC {roc_auc:.3f})", "false positive rate", "true positive rate",
                   os.path.join(folder, "roc_curve.png"), diagonal=True)
        plot_curve(recall, precision, f"precision-recall (AUC {pr_auc:.3f})", "recall", "precision",
                   os.path.join(folder, "precision_recall_curve.png"))
        with open(os.path.join(folder, "binary_report.json"), "w", encoding="utf-8") as out:
            json.dump({"classes": list(names) or ["0", "1"], "threshold": self.threshold, "roc_auc": roc_auc,
                       "pr_auc": pr_auc, "accuracy_at_threshold": self.quality(values, labels)}, out, indent=2)
        return ["roc_curve.png", "precision_recall_curve.png", "binary_report.json"]
