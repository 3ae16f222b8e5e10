"""journal: when MLflow goes away the run goes on, and the replay sends the rest once."""

from __future__ import annotations

import logging

from mlflow.tracking import MlflowClient

from tests.helpers import free_ports, mlflow_client
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.sync import main as sync_main
from tfx_hydra.tracking import replay_journal, tracked_run


def test_when_mlflow_goes_away_the_run_goes_on_offline_and_sync_sends_the_rest(tmp_path, monkeypatch, caplog):
    """The fault is real: the tracker's client is pointed at a port nothing listens on (connection
    refused), as when the tracking server dies; tests/e2e/test_faults.py kills a real server."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    out = tmp_path / "out"
    artifact = tmp_path / "curve.txt"
    artifact.write_text("epochs 1-3\n")
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}, offline_dir=str(out / "mlflow_offline")) as tracker:
        tracker.log_params({"model.units": "64"})
        tracker.log_epoch(0, {"loss": 1.0})
        tracker.client = MlflowClient(tracking_uri=f"http://127.0.0.1:{free_ports(1)[0]}")  # the server is gone
        tracker.log_epoch(1, {"loss": 0.5})
        tracker.log_epoch(2, {"loss": 0.25})
        tracker.set_tags({"phase": "after the outage"})
        tracker.log_artifact(str(artifact), "notes")
        run_id = tracker.run_id
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("stopped taking this run's records" in line for line in warned) == 1  # said once, not per write
    assert any(f"python -m tfx_hydra.sync {out}" in line for line in warned)
    client = mlflow_client(tmp_path)
    assert client.get_run(run_id).info.status == "RUNNING"  # nothing after the outage reached the store
    assert [m.step for m in client.get_metric_history(run_id, "epoch/loss")] == [0]

    assert replay_journal(str(out)) == 5  # 2 epochs, 1 tag batch, 1 artifact, the end
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "after the outage"
    history = client.get_metric_history(run_id, "epoch/loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert [a.path for a in client.list_artifacts(run_id, "notes")] == ["notes/curve.txt"]
    assert replay_journal(str(out)) == 0  # a second sync sends nothing twice


def test_sync_without_a_journal_says_there_is_nothing_to_send(tmp_path, capsys):
    assert sync_main([str(tmp_path)]) == 1
    assert "has nothing to sync (no mlflow_offline/ folder)" in capsys.readouterr().out
