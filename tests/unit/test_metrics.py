"""The metric names a run produces, spelled once: what preflight accepts as sweep.metric is what a
finished run reports, for every kind of name (val_, test_, training timing, fine-tuning)."""

from __future__ import annotations

import math

import pytest

from tests.helpers import compose, save_tiny_hub_model
from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import end_of_run_names, summary_names
from tfx_hydra.run import preflight, run
from tfx_hydra.schemas import TrainerConfig

FINETUNING = ["model=hub", "data=synthetic", "data.num_examples=256", "trainer.epochs=1", "trainer.finetune_epochs=1",
              "export=none", "tracking=none", "trainer.tensorboard=false", "trainer.backup=false"]


def test_the_names_cover_each_kind_and_fine_tuning_only_when_it_runs():
    plain = end_of_run_names(TrainerConfig(metrics=["accuracy"]))
    assert {"val_accuracy", "val_loss", "accuracy", "loss", "test_accuracy", "test_loss", "epoch_seconds",
            "examples_per_sec", "train_seconds", "train_examples_per_sec", "parameters"} == set(plain)
    assert {"finetune_seconds", "finetune_examples_per_sec"} <= set(end_of_run_names(TrainerConfig(finetune_epochs=2)))
    assert summary_names({"loss": 1, "test_loss": 2, "val_loss": 3, "train_seconds": 4}) == ["test_loss", "val_loss"]


def test_preflight_refuses_a_fine_tuning_metric_for_a_run_that_does_not_fine_tune(tmp_path):
    with pytest.raises(ConfigError, match=r"sweep.metric=finetune_seconds is not a metric this run logs"):
        preflight(compose(["sweep.metric=finetune_seconds", "tracking=none"], launch_dir=tmp_path))


@pytest.mark.parametrize("metric", ["val_accuracy", "test_loss", "train_examples_per_sec", "finetune_seconds", "parameters"])
def test_a_sweep_on_any_name_preflight_accepts_gets_its_objective(metric, tmp_path):
    handle = save_tiny_hub_model(tmp_path / "hub", input_shape=(8, 8))
    cfg = compose([*FINETUNING, f"model.handle={handle}", "data.input_shape=[8,8]", f"sweep.metric={metric}"],
                  launch_dir=tmp_path)
    preflight(cfg)  # accepted
    objective = run(cfg)
    assert math.isfinite(objective) and objective > 0
