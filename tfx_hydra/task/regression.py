"""task=regression: one or more numbers per example, a linear head. Served as `predictions` in the
target's units (with task.standardize_targets the model's last layer undoes the standardisation, so
no export needs to); reported as predicted-against-true scatter and a residual histogram."""

from __future__ import annotations

import json
import os

import numpy as np

from tfx_hydra.task.base import Task, require_numbers, row_error


class Regression(Task):
    name = "regression"
    head = "linear"
    output = "predictions"
    outputs = ("predictions",)
    quality_name = "neg_mae"  # the parity report's score: minus the mean absolute error (higher is better)
    label_dtype = "float32"

    def labels(self, y, split, width, first_row=None):
        y = require_numbers(self.name, np.asarray(y), split, first_row,
                            fix="numeric targets (task=classification for classes)")
        y = y.reshape(len(y), -1).astype(self.label_dtype)
        bad = np.argwhere(~np.isfinite(y))
        if len(bad):
            row, column = (int(i) for i in bad[0])
            raise row_error(self.name, split, row, first_row,
                            f"has target {y[row, column]} (column {column}): targets must be "
                            "finite numbers", fix="drop or fill the examples with missing targets")
        return y

    def describe(self, width):
        return f"{width} target{'s' if width != 1 else ''}"

    def answers(self, values, names):
        return {"predictions": values}

    def quality(self, values, labels):
        return -float(np.mean(np.abs(np.asarray(values) - np.asarray(labels).reshape(np.shape(values)))))

    def evaluated(self, values, labels):
        errors = np.asarray(values, "float64") - np.asarray(labels, "float64").reshape(np.shape(values))
        return {"test_loss": float(np.mean(errors ** 2)), "test_mae": float(np.mean(np.abs(errors))),
                "test_rmse": float(np.sqrt(np.mean(errors ** 2)))}

    def report(self, values, labels, folder, names=()):
        from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

        from tfx_hydra.plots import plot_regression

        predicted = np.asarray(values, "float64")
        truth = np.asarray(labels, "float64").reshape(predicted.shape)
        plot_regression(truth, predicted, os.path.join(folder, "predicted_vs_true.png"),
                        os.path.join(folder, "residuals.png"))
        figures = {"mae": mean_absolute_error(truth, predicted),
                   "rmse": float(np.sqrt(mean_squared_error(truth, predicted))),
                   "r2": r2_score(truth, predicted) if len(truth) > 1 else float("nan")}
        with open(os.path.join(folder, "regression_report.json"), "w", encoding="utf-8") as out:
            json.dump({k: float(v) for k, v in figures.items()}, out, indent=2)
        return ["predicted_vs_true.png", "residuals.png", "regression_report.json"]
