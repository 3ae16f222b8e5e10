"""Tracking: store resolution, fail-fast reachability, secret masking and run end states, on a real store."""

from __future__ import annotations

import os
import signal
import time

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import free_ports
from tfx_hydra.errors import TrackingError
from tfx_hydra.schemas import TrackingConfig
from tfx_hydra.tracking import (
    check_store_reachable,
    flatten,
    mask_secrets,
    resolve_artifact_location,
    resolve_tracking_uri,
    tracked_run,
    ui_command,
)


def test_default_store_is_sqlite_in_the_launch_dir(tmp_path):
    assert resolve_tracking_uri(TrackingConfig(), str(tmp_path)) == f"sqlite:///{tmp_path}/mlflow.db"
    relative = TrackingConfig(uri="sqlite:///stores/team.db")
    assert resolve_tracking_uri(relative, str(tmp_path)) == f"sqlite:///{tmp_path}/stores/team.db"
    assert resolve_tracking_uri(TrackingConfig(uri="http://mlflow:5000"), str(tmp_path)) == "http://mlflow:5000"
    uri = resolve_tracking_uri(TrackingConfig(), str(tmp_path))
    assert resolve_artifact_location(TrackingConfig(), str(tmp_path), uri) == f"{tmp_path}/mlruns/tfx_hydra"
    assert ui_command(uri, str(tmp_path)) == f"cd {tmp_path} && mlflow ui"


def test_an_unreachable_server_fails_at_once_with_the_fix():
    uri = f"http://127.0.0.1:{free_ports(1)[0]}"
    started = time.perf_counter()
    with pytest.raises(TrackingError) as caught:
        check_store_reachable(uri, timeout=5)
    assert time.perf_counter() - started < 5
    message = str(caught.value)
    assert f"tracking.uri={uri} is unreachable" in message and "Connection refused" in message
    assert "tracking=none" in message


def test_an_unwritable_sqlite_folder_is_reported(tmp_path):
    with pytest.raises(TrackingError, match=r"the folder .*missing does not exist or is not writable"):
        check_store_reachable(f"sqlite:///{tmp_path}/missing/mlflow.db", timeout=1)


def test_flatten_and_mask_credentials():
    flat = flatten({"db": {"password": "hunter2", "host": "x"}, "tracking": {"uri": "http://bob:s3cr3t@host:5000"},
                    "api_key": "abc", "layers": [1, 2], "token": None})
    masked = mask_secrets(flat)
    assert masked == {"db.password": "***", "db.host": "x", "tracking.uri": "http://***@host:5000",
                      "api_key": "***", "layers": "[1, 2]", "token": "None"}


def _runs(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("tfx_hydra")
    return client, client.search_runs([experiment.experiment_id])


def test_a_successful_run_ends_finished_with_batched_epoch_metrics(tmp_path):
    with tracked_run(TrackingConfig(), str(tmp_path), tags={"command": "python -m tfx_hydra"}) as tracker:
        tracker.log_params({"trainer.epochs": "2", "db.password": "hunter2"})
        for epoch, accuracy in enumerate([0.5, 0.75]):
            tracker.log_epoch(epoch, {"accuracy": accuracy, "loss": 1 - accuracy})
    client, (run,) = _runs(tmp_path)
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
    _, (run,) = _runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "ValueError: boom in epoch 2"


def test_ctrl_c_ends_the_run_killed(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with tracked_run(TrackingConfig(), str(tmp_path), tags={}):
            raise KeyboardInterrupt
    _, (run,) = _runs(tmp_path)
    assert run.info.status == "KILLED"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_store_write_waits_for_it_then_ends_the_run_killed(tmp_path, signum):
    # Fault injection: the signal is sent from inside MLflow's write, where a real Ctrl-C or
    # Slurm's SIGTERM lands now and then. Raised there, it left SQLite locked by the torn
    # commit and the run RUNNING (CI saw it); it must wait for the write to finish.
    with pytest.raises(KeyboardInterrupt, match=signal.Signals(signum).name):
        with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as tracker:
            real_log_batch = tracker.client.log_batch

            def log_batch_hit_by_a_signal(*args, **kwargs):
                os.kill(os.getpid(), signum)
                return real_log_batch(*args, **kwargs)

            tracker.client.log_batch = log_batch_hit_by_a_signal
            tracker.log_epoch(0, {"loss": 0.5})
            raise AssertionError("the signal should have ended the run after the write")
    client, (run,) = _runs(tmp_path)
    assert run.info.status == "KILLED"
    assert run.data.tags["error"] == f"interrupted ({signal.Signals(signum).name})"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [0.5]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers are the run's only
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_tracking_none_writes_nothing(tmp_path):
    with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}) as tracker:
        tracker.log_epoch(0, {"loss": 1.0})
        assert tracker.run_id is None
    assert list(tmp_path.iterdir()) == []


def test_when_mlflow_goes_away_the_run_goes_on_offline_and_sync_sends_the_rest(tmp_path, monkeypatch, capsys):
    """The fault is real: the tracker's client is pointed at a port nothing listens on (connection
    refused), as when the tracking server dies; tests/e2e/test_faults.py kills a real server."""
    from tfx_hydra.sync import sync

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
    printed = capsys.readouterr().out
    assert printed.count("stopped taking this run's records") == 1  # said once, not per write
    assert f"python -m tfx_hydra.sync {out}" in printed
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert client.get_run(run_id).info.status == "RUNNING"  # nothing after the outage reached the store
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [0]

    assert sync(str(out)) == 5  # 2 epochs, 1 tag batch, 1 artifact, the end
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "after the outage"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert [a.path for a in client.list_artifacts(run_id, "notes")] == ["notes/curve.txt"]
    assert sync(str(out)) == 0  # a second sync sends nothing twice


def test_sync_without_a_journal_says_there_is_nothing_to_send(tmp_path, capsys):
    from tfx_hydra.sync import main

    assert main([str(tmp_path)]) == 1
    assert "has nothing to sync (no mlflow_offline/ folder)" in capsys.readouterr().out


# --- runs whose process died without a word ------------------------------------------------------------

def test_a_runs_process_is_gone_when_its_pid_ended_or_was_reused_on_this_host():
    import socket
    import subprocess
    import sys

    from tfx_hydra.tracking import process_is_gone, process_tags

    mine = process_tags()
    assert mine["process.host"] == socket.gethostname() and not process_is_gone(mine)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_is_gone(mine | {"process.pid": finished.stdout.strip()})
    assert process_is_gone(mine | {"process.started": str(float(mine["process.started"]) - 3600)})  # pid reused
    assert not process_is_gone(mine | {"process.host": "another-node", "process.pid": "1"})  # not ours to judge


def test_a_new_run_closes_the_runs_a_killed_process_left_running_but_not_live_ones(tmp_path):
    from mlflow.tracking import MlflowClient

    from tfx_hydra.tracking import process_tags

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as first:
        pass
    experiment = client.get_run(first.run_id).info.experiment_id
    live = client.create_run(experiment, tags=process_tags())  # another run of a process still alive (this one)
    lost = client.create_run(experiment, tags=process_tags() | {"process.pid": "999999999"})
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as second:
        assert client.get_run(second.run_id).data.tags["process.pid"] == str(os.getpid())
    closed = client.get_run(lost.info.run_id)
    assert closed.info.status == "KILLED" and closed.data.tags["lost"] == "true"
    assert closed.data.tags["error"].startswith("lost: its process (pid 999999999 on ")
    assert client.get_run(live.info.run_id).info.status == "RUNNING"


def test_a_full_disk_is_recognised_through_the_errors_libraries_wrap_it_in(tmp_path):
    import errno

    from tfx_hydra.errors import DiskFull
    from tfx_hydra.tracking import disk_full_error, full_disk_path

    raw = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "backup" / "latest.weights.h5"))
    try:
        try:
            raise raw
        except OSError as err:
            raise RuntimeError("Unable to synchronously write (file write failed)") from err
    except RuntimeError as wrapped:
        assert full_disk_path(wrapped) == str(tmp_path / "backup" / "latest.weights.h5")
    assert full_disk_path(RuntimeError("(sqlite3.OperationalError) database or disk is full")) == ""
    assert full_disk_path(OSError(errno.EACCES, "Permission denied")) is None
    error = disk_full_error(str(tmp_path / "backup" / "latest.weights.h5"))
    assert isinstance(error, DiskFull) and " free of " in error.message and "hydra.run.dir=" in error.fix


def test_a_full_disk_is_one_message_with_tracking_off_too(tmp_path):
    import errno

    from tfx_hydra.errors import DiskFull

    with pytest.raises(DiskFull, match=rf"no space left on the disk writing {tmp_path}/out/plots/a.png \("):
        with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}, offline_dir=str(tmp_path / "x")):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "plots" / "a.png"))
    with pytest.raises(ValueError, match="not a disk"):  # anything else goes through as it came
        with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}):
            raise ValueError("not a disk")
