"""reports: a run's pictures and tables of its test split, beside its metrics (records.py's sibling).

    record_plots        training curves and the task's reports of the test split, into the run's
                        output dir and MLflow's `plots/` (a search's leading trial: only their inputs)
    draw_pending_plots  what a search draws at its end for its best trial, from those inputs
    predictions         the model's outputs and the labels over a split, as arrays

matplotlib and TensorFlow are imported inside the functions (plots.py draws; the tasks write their tables).
"""

from __future__ import annotations

import json
import os

from tfx_hydra.process import stop_now, stop_requested, stopped_at_a_step
from tfx_hydra.tracking import Tracker

PLOTS_PENDING = "plots.pending"  # tag: the folder where a search trial's plot inputs wait for the search's end
PENDING_FILE = "pending_plots.npz"


def record_plots(tracker: Tracker, model, datasets, history, output_dir: str, pending: bool = False) -> None:
    """Training curves and the task's reports of the test split (a confusion matrix and per-class table;
    ROC and precision-recall curves; a per-label table; predicted-against-true and residuals), in the
    run's output dir and MLflow's `plots/`: what a reader of the run looks at first.

    `pending` (a search's trial leading so far): only what they are drawn from is kept, in the output
    dir, and the run tagged with where. Drawing is most of a small trial's cost beyond its epochs (~0.3 s
    of ~1 s), and a later trial often overtakes this one: the search draws its best trial's at its end."""
    if tracker.run_id is None:  # tracking off, or a non-chief worker
        return
    folder = os.path.join(output_dir, "plots")
    os.makedirs(folder, exist_ok=True)
    if datasets.spec.task.generates:  # a language model: its curves are its report
        draw_plots(datasets.spec.task, None, None, history.history, folder)
        tracker.log_artifacts(folder, "plots")
        return
    values, labels = predictions(model, datasets.test)
    if pending:
        import numpy as np

        curves = {name: [float(v) for v in series] for name, series in history.history.items()}
        np.savez(os.path.join(folder, PENDING_FILE), values=values, labels=labels, history=json.dumps(curves),
                 names=np.asarray(datasets.spec.names, dtype=str))
        tracker.set_tags({PLOTS_PENDING: folder})
        return
    draw_plots(datasets.spec.task, values, labels, history.history, folder, datasets.spec.names)
    tracker.log_artifacts(folder, "plots")


def draw_plots(task, values, labels, history: dict, folder: str, names: tuple[str, ...] = ()) -> None:
    from tfx_hydra.plots import plot_training_curves

    plot_training_curves(history, os.path.join(folder, "training_curves.png"))
    task.report(values, labels, folder, names)


def draw_pending_plots(folder: str, task) -> bool:
    """Draw the plots a search trial kept the inputs of (record_plots' `pending`) into `folder`; False
    when there is nothing to draw here: drawn already, being drawn by another command of the study
    ending at the same time, or the folder is on a machine this one cannot see. The inputs are claimed
    by renaming them (one rename wins), so two commands never draw, or remove, the same file."""
    import numpy as np

    claimed = os.path.join(folder, f"{PENDING_FILE}.{os.getpid()}.drawing")
    try:
        os.rename(os.path.join(folder, PENDING_FILE), claimed)
    except FileNotFoundError:
        return False
    with np.load(claimed) as saved:
        values, labels, history = saved["values"], saved["labels"], json.loads(str(saved["history"]))
        names = tuple(str(name) for name in saved["names"]) if "names" in saved.files else ()
    draw_plots(task, values, labels, history, folder, names)
    os.remove(claimed)
    return True


def predictions(model, dataset):
    """The model's outputs and the labels over `dataset` (batches of inputs and labels), as arrays. A signal waits
    for the batch in flight, then stops the run, as in training (raised inside Keras' call it could leave
    TensorFlow's state half changed: process/signals.py)."""
    import numpy as np

    values, labels = [], []
    with stopped_at_a_step():
        for inputs, batch_labels in dataset:
            values.append(np.asarray(model(inputs, training=False), dtype="float32"))
            labels.append(np.asarray(batch_labels))
            if stop_requested():
                stop_now()
    return np.concatenate(values), np.concatenate(labels)
