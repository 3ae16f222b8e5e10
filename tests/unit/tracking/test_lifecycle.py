"""lifecycle: a run on a real store ends FINISHED, FAILED (with its error) or KILLED."""

from __future__ import annotations

import pytest

from tests.helpers import mlflow_client, mlflow_runs
from tfx_hydra.schemas import TrackingConfig
from tfx_hydra.tracking import tracked_run


def test_a_successful_run_ends_finished_with_batched_epoch_metrics(tmp_path):
    with tracked_run(TrackingConfig(), str(tmp_path), tags={"command": "python -m tfx_hydra"}) as tracker:
        tracker.log_params({"trainer.epochs": "2", "db.password": "hunter2"})
        for epoch, accuracy in enumerate([0.5, 0.75]):
            tracker.log_epoch(epoch, {"accuracy": accuracy, "loss": 1 - accuracy})
    client, (run,) = mlflow_client(tmp_path), mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"trainer.epochs": "2", "db.password": "***"}
    assert run.data.tags["command"] == "python -m tfx_hydra"
    history = client.get_metric_history(run.info.run_id, "accuracy")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.75)]
    assert run.info.artifact_uri.startswith(f"{tmp_path}/mlruns/tfx_hydra/")


def test_an_error_ends_the_run_failed_with_the_error_recorded(tmp_path):
    with pytest.raises(ValueError):
        with tracked_run(TrackingConfig(), str(tmp_path), tags={}):
            raise ValueError("boom in epoch 2")
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "ValueError: boom in epoch 2"


def test_ctrl_c_ends_the_run_killed(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with tracked_run(TrackingConfig(), str(tmp_path), tags={}):
            raise KeyboardInterrupt
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"


@pytest.mark.fresh_store
def test_tracking_none_writes_nothing(tmp_path):
    with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}) as tracker:
        tracker.log_epoch(0, {"loss": 1.0})
        assert tracker.run_id is None
    assert list(tmp_path.iterdir()) == []
