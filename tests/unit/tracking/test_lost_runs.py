"""lost_runs: runs whose process died without a word are closed by the next command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.helpers import mlflow_client
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.tracking import close_lost_runs, process_is_gone, process_tags, tracked_run


def test_a_runs_process_is_gone_when_its_pid_ended_or_was_reused_on_this_host():
    mine = process_tags()
    assert mine["process.host"] == socket.gethostname() and not process_is_gone(mine)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_is_gone(mine | {"process.pid": finished.stdout.strip()})
    assert process_is_gone(mine | {"process.started": str(float(mine["process.started"]) - 3600)})  # pid reused
    assert not process_is_gone(mine | {"process.host": "another-node", "process.pid": "1"})  # not ours to judge


def test_a_new_run_closes_the_runs_a_killed_process_left_running_but_not_live_ones(tmp_path):
    client = mlflow_client(tmp_path)
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


def test_a_resumed_run_names_its_new_process_before_it_is_running_again_so_no_other_command_closes_it(
        tmp_path, monkeypatch):
    """Another command's close_lost_runs may come at any instant. Planted at the worst one, right after the
    resumed run's status flips back to RUNNING (a spy on the real client: the instant cannot be caused
    otherwise), it must find the run naming this live process, not the dead one it was interrupted in."""
    from mlflow.tracking import MlflowClient

    from tfx_hydra.tracking.tracker import BACKUP_TAG

    client, backup = mlflow_client(tmp_path), tmp_path / "backup"
    backup.mkdir()
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}) as first:
        pass
    experiment = client.get_run(first.run_id).info.experiment_id
    interrupted = client.create_run(experiment, tags=process_tags() | {
        "process.pid": "999999999", "resume.key": "k1", BACKUP_TAG: str(backup)})
    client.set_terminated(interrupted.info.run_id, status="KILLED")
    update_run = MlflowClient.update_run

    def and_another_command_looks_for_lost_runs(self, run_id, status=None, **kwargs):
        update_run(self, run_id, status=status, **kwargs)
        if status == "RUNNING":
            close_lost_runs(self, [experiment])

    monkeypatch.setattr(MlflowClient, "update_run", and_another_command_looks_for_lost_runs)
    with tracked_run(TrackingConfig(), str(tmp_path), tags={}, resume_key="k1") as resumed:
        assert resumed.run_id == interrupted.info.run_id
        assert client.get_run(resumed.run_id).info.status == "RUNNING"
    resumed = client.get_run(interrupted.info.run_id)
    assert resumed.info.status == "FINISHED" and "lost" not in resumed.data.tags
    assert resumed.data.tags["process.pid"] == str(os.getpid())
