"""The metric names a run produces, spelled once: what preflight accepts as sweep.metric is what a
finished run reports, for every kind of name (val_, test_, training timing, fine-tuning)."""

from __future__ import annotations

import math

import pytest

from tests.helpers import compose, mlflow_runs, save_tiny_hub_model
from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import end_of_run_names, summary_names
from tfx_hydra.run import preflight, run
from tfx_hydra.settings.schemas import TrainerConfig

FINETUNING = ["model=hub", "data=synthetic", "data.num_examples=256", "trainer.epochs=1", "trainer.finetune_epochs=1",
              "export=none", "tracking=none", "trainer.tensorboard=false", "trainer.backup=false"]


def test_the_names_cover_each_kind_and_fine_tuning_only_when_it_runs():
    plain = end_of_run_names(TrainerConfig(metrics=["accuracy"]))
    assert {"val_accuracy", "val_loss", "accuracy", "loss", "test_accuracy", "test_loss", "epoch_seconds",
            "examples_per_sec", "lr", "train_seconds", "train_examples_per_sec", "parameters"} == set(plain)
    assert {"finetune_seconds", "finetune_examples_per_sec"} <= set(end_of_run_names(TrainerConfig(finetune_epochs=2)))
    assert summary_names({"loss": 1, "test_loss": 2, "val_loss": 3, "train_seconds": 4}) == ["test_loss", "val_loss"]


def test_preflight_refuses_a_fine_tuning_metric_for_a_run_that_does_not_fine_tune(tmp_path):
    with pytest.raises(ConfigError, match=r"sweep.metric=finetune_seconds is not a metric this run logs"):
        preflight(compose(["sweep.metric=finetune_seconds", "tracking=none"], launch_dir=tmp_path))


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_every_name_preflight_accepts_is_what_a_run_logs_and_a_sweep_gets_its_objective(tmp_path):
    """One fine-tuning run (both phases) tracked to a real store: each name end_of_run_names gives
    preflight is a metric of the run, and the objective is the one sweep.metric names."""
    handle = save_tiny_hub_model(tmp_path / "hub", input_shape=(8, 8))
    cfg = compose([*FINETUNING, "tracking=mlflow", f"model.handle={handle}", "data.input_shape=[8,8]",
                   "sweep.metric=finetune_seconds"], launch_dir=tmp_path)
    settings = preflight(cfg)  # accepted
    result = run(cfg)
    objective = result.objective
    (tracked,) = mlflow_runs(tmp_path)
    logged = tracked.data.metrics
    for name in end_of_run_names(settings.trainer):
        assert name in logged and math.isfinite(logged[name]), name
    assert objective == logged["finetune_seconds"] and objective != logged["test_accuracy"]
    assert result.run_id == tracked.info.run_id and result.ended is None
