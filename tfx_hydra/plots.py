"""plots: the pictures a run and a sweep leave in MLflow, drawn with matplotlib's file backend.

Training curves (train vs validation per epoch, one panel per metric), the test split's
confusion matrix, ROC and precision-recall curves, predicted-against-true and residuals (a sweep's own
plot is the sweeps package's). Each function writes one PNG and
returns its path; they take plain numbers, so they are easy to test and reuse.
"""

from __future__ import annotations

from typing import Sequence


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in CI
    import matplotlib.pyplot as plt

    return plt


def plot_training_curves(history: dict[str, Sequence[float]], path: str) -> str:
    """One panel per metric (loss, accuracy, ...), train and val_ lines over epochs."""
    plt = pyplot()
    # the training metrics that have a validation twin (throughput and timings are not curves to compare)
    names = [k for k in history
             if not k.startswith("val_") and history.get(k) and (k == "loss" or f"val_{k}" in history)]
    if len(set(history.get("lr") or [])) > 1:  # a schedule's rate, beside the curves it shaped
        names.append("lr")
    figure, axes = plt.subplots(1, max(1, len(names)), figsize=(5 * max(1, len(names)), 4), squeeze=False)
    for axis, name in zip(axes[0], names):
        epochs = range(1, len(history[name]) + 1)
        axis.plot(epochs, history[name], marker="o", label="train")
        if history.get(f"val_{name}"):
            axis.plot(range(1, len(history[f"val_{name}"]) + 1), history[f"val_{name}"], marker="o",
                      label="validation")
        axis.set(title=name, xlabel="epoch")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def plot_confusion_matrix(matrix: Sequence[Sequence[int]], path: str, names: Sequence[str] = ()) -> str:
    """Rows are true classes, columns predicted ones (named by `names`, else numbered as the labels are); each
    cell shows its count."""
    plt = pyplot()
    size = len(matrix)
    names = list(names) or [str(i) for i in range(size)]
    room = 0.5 + 0.08 * max((len(name) for name in names), default=1)  # inches a tick's name needs
    figure, axis = plt.subplots(figsize=(max(4, 0.5 * size + 1 + room), max(4, 0.5 * size + 1 + room)))
    image = axis.imshow(matrix, cmap="Blues")
    figure.colorbar(image, ax=axis, fraction=0.046)
    axis.set(xticks=range(size), yticks=range(size), xlabel="predicted", ylabel="true",
             title="confusion matrix (test split)")
    axis.set_xticklabels(names, rotation=45 if max(len(name) for name in names) > 2 else 0, ha="right")
    axis.set_yticklabels(names)
    if size <= 30:  # beyond that the numbers would not fit
        peak = max((max(row) for row in matrix), default=0)
        for i, row in enumerate(matrix):
            for j, count in enumerate(row):
                axis.text(j, i, str(count), ha="center", va="center", fontsize=8,
                          color="white" if count > peak / 2 else "black")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def plot_curve(x: Sequence[float], y: Sequence[float], title: str, xlabel: str, ylabel: str, path: str,
               diagonal: bool = False) -> str:
    """One curve (a ROC or a precision-recall curve), with the chance diagonal where it means something."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5, 5))
    axis.plot(x, y, linewidth=2)
    if diagonal:
        axis.plot([0, 1], [0, 1], linestyle="--", color="grey", label="chance")
        axis.legend()
    axis.set(title=f"{title} (test split)", xlabel=xlabel, ylabel=ylabel, xlim=(0, 1), ylim=(0, 1.02))
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


SCATTERED = 10_000  # points a scatter draws: more cost seconds and megabytes and show no more


def plot_regression(truth, predicted, scatter_path: str, residuals_path: str) -> tuple[str, str]:
    """Predicted against true values (one colour per target, the identity line to compare with) and
    a histogram of the residuals (predicted - true), both on the test split. A test split of millions
    of rows (a table that streams) is drawn as SCATTERED examples evenly spaced through it, said in the
    title; the histogram counts them all."""
    import numpy as np

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5, 5))
    shown = np.linspace(0, len(truth) - 1, SCATTERED).astype(int) if len(truth) > SCATTERED else slice(None)
    for column in range(truth.shape[1]):
        axis.scatter(truth[shown, column], predicted[shown, column], s=10, alpha=0.6, label=f"target {column}")
    low, high = float(min(truth.min(), predicted.min())), float(max(truth.max(), predicted.max()))
    axis.plot([low, high], [low, high], linestyle="--", color="grey", label="predicted = true")
    sample = f", {SCATTERED:,} of {len(truth):,} examples" if len(truth) > SCATTERED else ""
    axis.set(title=f"predicted vs true (test split{sample})", xlabel="true", ylabel="predicted")
    axis.legend(loc="upper left")  # "best" searches every point for the emptiest corner
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(scatter_path, dpi=100)
    plt.close(figure)
    figure, axis = plt.subplots(figsize=(5, 4))
    axis.hist((predicted - truth).reshape(-1), bins=30)
    axis.set(title="residuals: predicted - true (test split)", xlabel="residual", ylabel="examples")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(residuals_path, dpi=100)
    plt.close(figure)
    return scatter_path, residuals_path
