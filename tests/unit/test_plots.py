"""The PNGs a run and a sweep leave: written, and with one panel per compared metric."""

from __future__ import annotations

import struct

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
