"""The PNGs a run and a sweep leave: written, and with one panel per compared metric."""

from __future__ import annotations

import struct

import pytest

from tfx_hydra import plots
from tfx_hydra.sweeps import summary


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as image:
        header = image.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_training_curves_have_a_panel_per_metric_with_a_validation_twin(tmp_path):
    history = {"loss": [1.0, 0.5], "accuracy": [0.5, 0.8], "val_loss": [1.1, 0.6], "val_accuracy": [0.4, 0.7],
               "examples_per_sec": [100.0, 120.0], "epoch_seconds": [1.0, 0.9]}  # timings are not curves
    width, height = png_size(plots.plot_training_curves(history, str(tmp_path / "curves.png")))
    assert (width, height) == (1000, 400)  # two 5x4-inch panels at 100 dpi: loss and accuracy
    width, _ = png_size(plots.plot_training_curves({"loss": [1.0, 0.5]}, str(tmp_path / "loss.png")))
    assert width == 500


def test_confusion_matrix_and_sweep_plots_are_written(tmp_path):
    matrix = [[5, 1, 0], [0, 4, 2], [1, 0, 6]]
    assert png_size(plots.plot_confusion_matrix(matrix, str(tmp_path / "cm.png")))[0] >= 400
    jobs = [{"name": "0: a=1", "run_id": "r0", "status": "FINISHED", "objective": 0.5},
            {"name": "1: a=2", "run_id": "r1", "status": "FAILED", "objective": None}]
    assert png_size(summary.plot_objectives(jobs, "val_accuracy", "r0", str(tmp_path / "sweep.png")))[0] >= 600


def test_the_sweep_plot_draws_a_pruned_trial_as_pruned_with_what_it_last_reported(tmp_path):
    jobs = [{"name": "0: lr=0.01", "run_id": "r0", "status": "FINISHED", "objective": 0.91, "state": "COMPLETE",
             "last": 0.91},
            {"name": "1: lr=1e-05", "run_id": "r1", "status": "FINISHED", "objective": None, "state": "PRUNED",
             "last": 0.1234},
            {"name": "2: lr=0.1", "run_id": "r2", "status": "FAILED", "objective": None, "state": "", "last": None}]
    path = summary.plot_objectives(jobs, "val_accuracy", "r0", str(tmp_path / "sweep.png"))
    from PIL import Image

    with Image.open(path) as image:
        described = image.text["Description"].splitlines()
    assert described == ["0: lr=0.01: FINISHED, 0.91 (best)", "1: lr=1e-05: PRUNED, 0.1234 (last reported)",
                         "2: lr=0.1: FAILED, no value"]



def test_the_sweep_table_shows_a_pruned_trials_last_report_and_no_best_mark():
    jobs = [{"job": 0, "name": "0: lr=0.01", "run_id": "r0", "status": "FINISHED", "objective": 0.91,
             "state": "COMPLETE", "epochs": "3", "last": 0.91},
            {"job": 1, "name": "1: lr=1e-05", "run_id": "r1", "status": "FINISHED", "objective": None,
             "state": "PRUNED", "epochs": "1", "last": 0.1234}]
    counts = {"FINISHED": 2, "FAILED": 0, "KILLED": 0}
    table = summary.summary_table(jobs, counts, "val_accuracy", "maximize", summary.best_job(jobs, "maximize"),
                                  "p", "/s", "FINISHED", 2)
    rows = [" ".join(line.split()) for line in table.splitlines()]
    assert "0 FINISHED 3 0.9100 * 0: lr=0.01" in rows
    assert "1 PRUNED 1 0.1234 (last) 1: lr=1e-05" in rows
    assert any("2 finished (1 pruned), 0 failed, 0 killed" in row for row in rows)


def test_a_searchs_table_fits_a_120_column_terminal():
    """Optuna samples floats at full precision (0.0005180169728534583): the names round them, the
    objective shows four decimals, so a 4-key search's table fits 120 columns."""
    from tfx_hydra.sweeps import launch

    keys = ["optimizer.learning_rate", "model.units", "model.dropout", "trainer.batch_size"]
    jobs = [{"job": n, "name": launch.job_name(n, [f"optimizer.learning_rate={lr!r}", "model.units=512",
                                                    f"model.dropout={dropout!r}", "trainer.batch_size=128"],
                                               keys, trial=True),
             "run_id": f"{n:032x}", "status": "FINISHED", "objective": 0.97222222222, "state": "COMPLETE",
             "epochs": "10", "last": 0.97222222222}
            for n, (lr, dropout) in enumerate([(0.0005180169728534583, 0.31234567891234), (0.00999, 0.0123)])]
    assert jobs[0]["name"] == "trial 0: lr 5.2e-4, units 512, dropout 0.31, batch 128"
    table = summary.summary_table(jobs, {"FINISHED": 2, "FAILED": 0, "KILLED": 0}, "val_accuracy", "maximize",
                                  summary.best_job(jobs, "maximize"), "f" * 32,
                                  "/home/you/experiments/multirun/mlp-digits", "FINISHED", 2)
    assert max(len(line) for line in table.splitlines()) <= 120, table
    assert "0.9722 *" in table and "0.97222222222" not in table


def test_a_test_split_of_millions_of_rows_is_drawn_from_an_even_sample_without_matplotlibs_slow_legend(tmp_path):
    """A table that streams can hold 2,000,000 test rows: the scatter draws 10,000 of them, evenly spaced, and
    names the sample in its title (matplotlib warned it was slow placing the legend among them all)."""
    import warnings

    import numpy as np
    from matplotlib import pyplot

    truth = np.linspace(0, 100, 2_000_000, dtype="float32").reshape(-1, 1)
    drawn = []
    with warnings.catch_warnings(record=True) as caught, \
            _kept_figures(pyplot, drawn):
        warnings.simplefilter("always")
        scatter, residuals = plots.plot_regression(truth, truth + 1, str(tmp_path / "s.png"), str(tmp_path / "r.png"))
    assert not [str(w.message) for w in caught], [str(w.message) for w in caught]
    assert png_size(scatter) == (500, 500) and png_size(residuals) == (500, 400)
    axis = drawn[0].axes[0]
    assert axis.get_title() == "predicted vs true (test split, 10,000 of 2,000,000 examples)"
    (points,) = axis.collections
    assert len(points.get_offsets()) == plots.SCATTERED and points.get_offsets()[-1][0] == 100.0  # through the end
    assert sum(patch.get_height() for patch in drawn[1].axes[0].patches) == 2_000_000  # the histogram counts all


def _kept_figures(pyplot, drawn: list):
    """The figures plot_regression closes, kept for reading (pyplot.close wrapped, not replaced)."""
    from unittest import mock

    close = pyplot.close
    return mock.patch.object(pyplot, "close", lambda figure=None: (drawn.append(figure), close(figure)))


def draw_when_released(folder: str, together, results) -> None:
    """One command of a study at its end (report.draw_best_trials_plots): draws its best trial's plots,
    once every command has imported what it draws with (`together`, a barrier), so they start at once."""
    from tfx_hydra import reports, task

    classification = task.get("classification")
    together.wait(timeout=120)
    results.put(reports.draw_pending_plots(folder, classification))


@pytest.mark.slow  # two processes of their own
def test_two_commands_ending_at_once_draw_a_trials_pending_plots_once(tmp_path):
    """A search trial leading when it ended keeps its plots' inputs; every command of the study draws
    its best trial's at its end. Two ending at the same instant (two processes released together) draw
    them once: one draws, the other is told there was nothing left to draw, and neither fails on the
    file the other took."""
    import multiprocessing
    from types import SimpleNamespace

    import keras
    import numpy as np
    import tensorflow as tf

    from tfx_hydra import reports, task

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    x, y = np.random.default_rng(0).normal(size=(30, 4)).astype("float32"), np.arange(30) % 3
    datasets = SimpleNamespace(test=tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
                               spec=SimpleNamespace(task=task.get("classification"), names=("a", "b", "c")))
    tags = {}
    tracker = SimpleNamespace(run_id="trial-run", set_tags=tags.update)  # only where the inputs wait is asked of it
    history = SimpleNamespace(history={"loss": [1.2, 0.9], "val_loss": [1.3, 1.0]})
    reports.record_plots(tracker, model, datasets, history, str(tmp_path), pending=True)
    folder = tmp_path / "plots"
    assert tags == {reports.PLOTS_PENDING: str(folder)} and (folder / reports.PENDING_FILE).is_file()

    spawn = multiprocessing.get_context("spawn")
    together, results = spawn.Barrier(2), spawn.Queue()
    commands = [spawn.Process(target=draw_when_released, args=(str(folder), together, results)) for _ in range(2)]
    for command in commands:
        command.start()
    for command in commands:
        command.join(timeout=120)
    assert [command.exitcode for command in commands] == [0, 0]
    assert sorted(results.get(timeout=5) for _ in commands) == [False, True]
    drawn = sorted(path.name for path in folder.iterdir())  # the plots, and nothing pending or half claimed
    assert "training_curves.png" in drawn and "confusion_matrix.png" in drawn, drawn
    assert not [name for name in drawn if reports.PENDING_FILE in name], drawn
