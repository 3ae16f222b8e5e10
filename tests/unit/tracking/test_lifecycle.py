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


def test_a_run_shorter_than_one_sampling_interval_still_has_system_metrics_from_start_to_end(tmp_path):
    """MLflow's monitor drops the sample it took at the start when it stops within its interval (10 s by
    default): a run of a few seconds, a digits run or a search's trial, would have no series at all."""
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as tracker:
        tracker.log_epoch(0, {"loss": 1.0})
    client, (run,) = mlflow_client(tmp_path), mlflow_runs(tmp_path)
    cpu = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert [m.step for m in cpu] == [0, 1]  # the start's sample and the end's
    assert cpu[0].timestamp <= cpu[1].timestamp
    assert {"system/system_memory_usage_megabytes", "system/disk_usage_percentage"} <= set(run.data.metrics)
