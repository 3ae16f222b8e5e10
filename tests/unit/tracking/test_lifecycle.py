"""lifecycle: a run on a real store ends FINISHED, FAILED (with its error) or KILLED."""

from __future__ import annotations

import pytest

from tests.helpers import mlflow_client, mlflow_runs
from tfx_hydra.settings.schemas import TrackingConfig
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
    history = client.get_metric_history(run.info.run_id, "epoch/accuracy")  # an epoch's curve: metrics.py
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


def counting_requests(tracker) -> list[tuple[int, int, int]]:
    """Each log_batch request the tracker's client sends, as (params, tags, metrics) counts; the
    request itself still goes to the real store (a spy, not a stand-in)."""
    sent, send = [], tracker.client.log_batch

    def log_batch(run_id, metrics=(), params=(), tags=(), **kwargs):
        sent.append((len(params), len(tags), len(metrics)))
        return send(run_id, metrics=metrics, params=params, tags=tags, **kwargs)

    tracker.client.log_batch = log_batch
    return sent


def test_records_are_held_until_a_flush_then_sent_in_as_few_requests_as_mlflows_limits_allow(tmp_path):
    """MLflow takes at most 100 params, 100 tags and 1000 records in one log_batch request."""
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as tracker:
        sent = counting_requests(tracker)
        tracker.log_params({f"p{i:03d}": str(i) for i in range(250)})
        tracker.set_tags({f"t{i:03d}": i for i in range(150)})
        tracker.log_metrics({f"m{i:04d}": float(i) for i in range(1200)})
        run = mlflow_client(tmp_path).get_run(tracker.run_id)
        assert not run.data.params and "t000" not in run.data.tags and not run.data.metrics  # held, not sent
        tracker.flush()
        assert sent == [(100, 100, 800), (100, 50, 400), (50, 0, 0)]
        tracker.flush()
        assert len(sent) == 3  # nothing held: nothing sent
    (run,) = mlflow_runs(tmp_path)
    assert len(run.data.params) == 250 and run.data.params["p249"] == "249"
    mine = {k: v for k, v in run.data.metrics.items() if not k.startswith("system/")}  # beside the machine's
    assert run.data.tags["t149"] == "149" and len(mine) == 1200 and mine["m1199"] == 1199.0


def test_an_epoch_carries_what_was_held_in_one_request_and_the_end_sends_the_rest(tmp_path):
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as tracker:
        sent = counting_requests(tracker)
        tracker.set_tags({"data.num_train": 100})
        tracker.set_tags({"xla": "off"})
        tracker.set_tags({"xla": "on"})  # set twice: sent once, with its last value
        tracker.log_epoch(0, {"loss": 1.0})
        assert sent == [(0, 2, 1)]
        run = mlflow_client(tmp_path).get_run(tracker.run_id)
        assert run.data.tags["xla"] == "on" and run.data.metrics["epoch/loss"] == 1.0  # in the store as the epoch ends
        tracker.log_metrics({"test_accuracy": 0.9})
        tracker.set_tags({"optuna.state": "COMPLETE"})
    (run,) = mlflow_runs(tmp_path)
    assert len(sent) == 2 and run.info.status == "FINISHED"
    assert run.data.metrics["test_accuracy"] == 0.9 and run.data.tags["optuna.state"] == "COMPLETE"


def test_a_failed_run_still_sends_what_it_held_with_its_error(tmp_path):
    with pytest.raises(ValueError):
        with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as tracker:
            tracker.set_tags({"data.num_train": 100})
            raise ValueError("the data step failed")
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["data.num_train"] == "100" and run.data.tags["error"] == "ValueError: the data step failed"
