"""Faults the machine causes, caused for real: a kill -9 at an epoch's end and the resume, a process that
died without closing its run, a full disk (a real small tmpfs), a sweep worker killed mid-training.
(A user's Ctrl-C, a tracking server that goes away, parallel jobs on one store: tests/e2e/test_faults.py.)"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from tests.helpers import cli_env, compose, mlflow_client, mlflow_runs
from tests.helpers.in_process import run_cli_in_process
from tfx_hydra.run import run

pytestmark = pytest.mark.slow


# A run that SIGKILLs itself at an exact point of epoch 2's end (fault injection: no outside kill can hit
# a window of microseconds reliably), then the same config run again.
KILLED_AT = """
import os, signal, sys
from tests.helpers import compose
from tfx_hydra import tracking
from tfx_hydra.console import use_terminal
from tfx_hydra.run import run

use_terminal()  # a Python caller's run shows its lines as the CLI's does
launch, window = sys.argv[1], sys.argv[2]
write = tracking.MlflowTracker.log_epoch

def log_epoch(self, epoch, logs):
    if epoch == 1 and window == "before_the_metric_write":
        os.kill(os.getpid(), signal.SIGKILL)
    write(self, epoch, logs)
    if epoch == 1 and window == "after_the_metric_write":
        os.kill(os.getpid(), signal.SIGKILL)

if window != "none":
    tracking.MlflowTracker.log_epoch = log_epoch
run(compose(sys.argv[3:], launch_dir=launch))
"""
KILLED_RUN = ["trainer.epochs=3", "data.limit=300", "export=none", "export.mlflow_model=false",
              "trainer.tensorboard=false"]


@pytest.mark.parametrize("window", ["before_the_metric_write", "after_the_metric_write"])
def test_a_kill_at_an_epochs_end_then_resume_logs_every_epoch_exactly_once(tmp_path, window, caplog):
    def attempt(where: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", KILLED_AT, str(tmp_path), where, *KILLED_RUN], cwd=tmp_path,
                              env=cli_env(), capture_output=True, text=True, timeout=300)

    killed = attempt(window)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    with caplog.at_level(logging.INFO, logger="tfx_hydra"):  # the same call again, in this process: no kill now
        run(compose(KILLED_RUN, launch_dir=tmp_path))
    assert "resuming MLflow run" in caplog.text
    (resumed,) = mlflow_runs(tmp_path)
    assert resumed.info.status == "FINISHED"
    client = mlflow_client(tmp_path)
    for key in ("epoch/loss", "epoch/val_accuracy", "epoch_seconds"):
        assert sorted(m.step for m in client.get_metric_history(resumed.info.run_id, key)) == [0, 1, 2], key


def test_a_run_killed_with_sigkill_is_closed_by_the_next_command_on_its_store(tmp_path):
    command = [sys.executable, "-m", "tfx_hydra", "data=synthetic", "data.num_examples=20000", "trainer.epochs=500",
               "export=none"]
    process = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if line.startswith("epoch 2/500"):
            break
    process.kill()  # SIGKILL: no handler runs, the run cannot close itself
    process.wait(timeout=60)
    (lost,) = mlflow_runs(tmp_path)
    assert lost.info.status == "RUNNING" and lost.data.tags["process.pid"] == str(process.pid)

    other = run_cli_in_process(["trainer.epochs=1", "data.limit=300", "export=none", "export.mlflow_model=false"],
                               cwd=tmp_path)
    assert other.returncode == 0, other.stderr[-2000:]
    runs = {r.info.run_id: r for r in mlflow_runs(tmp_path)}
    closed = runs[lost.info.run_id]
    assert closed.info.status == "KILLED" and closed.data.tags["lost"] == "true"
    assert closed.data.tags["error"].startswith(f"lost: its process (pid {process.pid} on ")
    assert {r.info.status for r in runs.values()} == {"KILLED", "FINISHED"}  # nothing left RUNNING
    assert Path(closed.data.tags["resume.backup_dir"]).is_dir()  # still resumable by its own command


@pytest.mark.fresh_store
def test_a_kill_9_while_the_first_command_creates_the_store_leaves_no_half_made_store(tmp_path):
    """The first command in a folder makes the store under another name and renames it whole into place: a kill -9
    while it creates the tables (seen by the file it makes them in) leaves no mlflow.db, and the next command
    makes a whole one."""
    process = subprocess.Popen([sys.executable, "-m", "tfx_hydra", "trainer.epochs=1", "export=none"], cwd=tmp_path,
                               env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (tmp_path / "mlflow.db.creating").exists():
        assert process.poll() is None and time.time() < deadline, "the store's creation was not seen"
        time.sleep(0.01)
    process.kill()
    process.wait(timeout=60)
    assert not (tmp_path / "mlflow.db").exists()
    again = run_cli_in_process(["trainer.epochs=1", "data.limit=300", "export=none", "export.mlflow_model=false"],
                               cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FINISHED"]
    assert not (tmp_path / "mlflow.db.creating").exists()


@pytest.mark.fresh_store
def test_a_half_made_store_an_older_version_left_is_named_with_its_fix(tmp_path):
    """Planted (an older tfx_hydra created the store in place, and a kill -9 cut its tables' creation short: the
    moment cannot be hit from outside): a whole store with tables taken away, as such a kill leaves it. MLflow
    then fails on every open ('table experiment_tags already exists'): one message, the file and the fix."""
    import sqlite3

    subprocess.run([sys.executable, "-c", "from mlflow.tracking import MlflowClient; MlflowClient(tracking_uri="
                    f"'sqlite:///{tmp_path / 'mlflow.db'}').search_experiments()"], check=True, capture_output=True)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        db.execute("DROP TABLE alembic_version")
        db.execute("DROP TABLE metrics")
    done = run_cli_in_process(["trainer.epochs=1", "export=none"], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        f"TrackingError: the MLflow store {tmp_path / 'mlflow.db'} is half-made: a command was stopped while it "
        "created the store's tables ((sqlite3.OperationalError) table experiment_tags already exists); it holds no "
        "run.")
    assert f"Fix: mv {tmp_path / 'mlflow.db'} {tmp_path / 'mlflow.db'}.broken, then run again" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A real 300 KB filesystem (tmpfs), mounted for the test: root only (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_the_run_with_one_message_and_keeps_the_last_backup_whole(small_disk, tmp_path):
    store = tmp_path / "store"  # the MLflow store on another disk: it can still be written
    store.mkdir()
    done = run_cli_in_process(["trainer.epochs=4", f"tracking.uri=sqlite:///{store}/mlflow.db",
                               f"tracking.artifact_location={store}/mlruns"], cwd=small_disk)
    assert done.returncode == 1
    assert f"DiskFull: no space left on the disk writing {small_disk}/" in done.stderr, done.stderr[-3000:]
    assert f"free of 300.0 KiB on {small_disk})" in done.stderr and f"Fix: free space on {small_disk}" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    client = mlflow_client(store)
    (run,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("DiskFull: no space left on the disk")
    backup = Path(run.data.tags["resume.backup_dir"])
    if "epoch 2/4" in done.stdout:  # epoch 1 was backed up before epoch 2 began: that backup is still whole
        assert (backup / "training_metadata.json").exists()
        with h5py.File(backup / "latest.weights.h5", "r") as weights:
            assert len(weights.keys()) > 0


def test_a_full_disk_under_the_default_store_still_ends_in_one_message(small_disk):
    # the store, the outputs and the journal on one full disk
    done = run_cli_in_process(["trainer.epochs=4"], cwd=small_disk)
    assert done.returncode == 1
    assert "DiskFull: no space left on the disk writing " in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def running_children(launch: Path, epochs: str) -> list:
    return [r for r in mlflow_runs(launch) if "mlflow.parentRunId" in r.data.tags and r.info.status == "RUNNING"
            and r.data.metrics.get("epoch/loss") is not None and r.data.params.get("trainer.epochs") == epochs]


# joblib tears its pool down when a worker dies (the other job dies too, the rest never run); submitit_local
# runs every job as its own process, so only the killed one is lost and the other finishes. The victim is a
# job of 300 epochs seen mid-training: it cannot end before the kill, however slow or fast the machine is.
@pytest.mark.parametrize("launcher, sweep_values, planned", [
    ("parallel", ["model.units=16,32,48,64", "trainer.epochs=300"], 4),
    ("local_gpus", ["trainer.epochs=5,300"], 2),  # the survivor trains 5 epochs
], ids=["parallel", "local_gpus"])
def test_a_sweep_that_loses_a_worker_names_the_lost_jobs_and_the_command_that_resumes(tmp_path, launcher,
                                                                                       sweep_values, planned):
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "-m", "tfx_hydra", "-m", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}",
               *sweep_values, "data=synthetic", "data.num_examples=20000", "export=none",
               "export.mlflow_model=false", "trainer.tensorboard=false"]
    sweep = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.time() + 240
    while not (sweep_dir / "mlflow_parent_run.json").exists():  # the store is created (and migrated) by then
        assert sweep.poll() is None and time.time() < deadline, "the sweep did not start"
        time.sleep(0.5)
    while not (training := running_children(tmp_path, epochs="300")):  # a job mid-training, an epoch logged
        assert sweep.poll() is None and time.time() < deadline, "no job started training"
        time.sleep(1)
    victim = training[0]
    os.kill(int(victim.data.tags["process.pid"]), signal.SIGKILL)  # what the out-of-memory killer does
    out, _ = sweep.communicate(timeout=600)
    assert sweep.returncode != 0
    assert "Traceback" not in out, out[-3000:]
    assert "tfx_hydra: the sweep lost " in out
    assert f"{victim.info.run_name} (MLflow run {victim.info.run_id})" in out
    assert f"resume the sweep (finished jobs are skipped) with: python -m tfx_hydra -m hydra/launcher={launcher}" in out
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = [r for r in runs if r is not parent]
    assert "RUNNING" not in {r.info.status for r in runs}  # nothing left RUNNING, the parent included
    lost = [c for c in children if c.data.tags.get("lost") == "true"]
    assert victim.info.run_id in {c.info.run_id for c in lost}
    tags = parent.data.tags
    assert int(tags["sweep.lost"]) == len(lost) and tags["sweep.planned"] == str(planned)
    assert int(tags["sweep.never_ran"]) == planned - len(children)
    assert f"{tags['sweep.never_ran']} job(s) never ran" in out
    if launcher == "local_gpus":  # its own process: the other job is not taken down with the victim
        assert [c.info.status for c in children if c.info.run_id != victim.info.run_id] == ["FINISHED"]
