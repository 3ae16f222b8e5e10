"""Faults caused for real, and what survives them: a tracking server killed mid-run, many parallel
jobs on one SQLite store, an interrupted sweep re-run. (Planted secrets: tests/e2e/test_sweeps.py;
a NaN loss: tests/unit/test_run.py; MLflow failing in-process: tests/unit/test_tracking.py.)"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import cli_env, free_ports, mlflow_runs, run_cli, wait_for_backup_of_epoch, wait_for_http

pytestmark = pytest.mark.slow


def start_server(store: Path, port: int, cwd: Path) -> subprocess.Popen:
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{store}",
                               "--host", "127.0.0.1", "--port", str(port)], cwd=cwd, env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for_http(f"http://127.0.0.1:{port}/health", server, timeout=120, what="mlflow server")
    return server


def stop_server(server: subprocess.Popen, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(server.pid, sig)  # the server's workers share its process group
    except ProcessLookupError:
        pass
    server.wait(timeout=30)


def test_a_tracking_server_killed_mid_run_loses_nothing(tmp_path):
    (port,) = free_ports(1)
    store = tmp_path / "server.db"
    server = start_server(store, port, tmp_path)
    command = [sys.executable, "-m", "tfx_hydra", f"tracking.uri=http://127.0.0.1:{port}", "data=synthetic",
               "data.num_examples=20000", "data.input_shape=[16,16]", "trainer.epochs=4",
               "trainer.steps_per_execution=1", "export.mlflow_model=true"]
    run = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        lines = []
        for line in run.stdout:  # kill the server once epoch 1 is logged: during epoch 2
            lines.append(line)
            if line.startswith("epoch 1/4"):
                stop_server(server)
                break
        out = "".join(lines) + run.stdout.read()
        err = run.stderr.read()
        assert run.wait(timeout=300) == 0, err[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
        stop_server(server)
    assert "epoch 4/4" in out  # training went on to the end
    assert out.count("stopped taking this run's records") == 1
    (output_dir,) = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert f"python -m tfx_hydra.sync {output_dir}" in out
    assert (output_dir / "mlflow_offline" / "journal.jsonl").exists()

    server = start_server(store, port, tmp_path)  # the server is back, on the same store
    try:
        done = subprocess.run([sys.executable, "-m", "tfx_hydra.sync", str(output_dir)], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
        (run_info,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
        run_id = run_info.info.run_id
        assert run_info.info.status == "FINISHED"
        for key in ("loss", "val_accuracy", "examples_per_sec"):
            assert [m.step for m in client.get_metric_history(run_id, key)] == [0, 1, 2, 3], key
        assert {"test_accuracy", "objective", "train_seconds"} <= set(run_info.data.metrics)
        assert {"plots", "export", "model", ".hydra", "config_resolved.yaml"} <= {
            a.path for a in client.list_artifacts(run_id)}
        assert run_info.data.tags["export.savedmodel.path"].startswith(str(output_dir))
    finally:
        stop_server(server, signal.SIGTERM)


def test_an_interrupted_sweep_rerun_skips_finished_jobs_and_resumes_the_killed_one(tmp_path):
    command = [sys.executable, "-m", "tfx_hydra", "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "model.units=32,48,64",
               "data=synthetic", "data.num_examples=12000", "data.input_shape=[16,16]", "trainer.epochs=4",
               "trainer.steps_per_execution=1", "export=none", "export.mlflow_model=false"]
    sweep = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    seen_job_1 = False
    for line in sweep.stdout:  # Ctrl-C early in job 1's third epoch, once epoch 2's backup is written
        seen_job_1 = seen_job_1 or "#1 : model.units=48" in line
        if seen_job_1 and line.startswith("epoch 2/4"):
            wait_for_backup_of_epoch(tmp_path / "sweep" / "1" / "backup", 2)
            sweep.send_signal(signal.SIGINT)
            break
    rest = sweep.stdout.read()
    assert sweep.wait(timeout=120) == 130  # Ctrl-C's conventional status, and one line instead of a traceback
    assert "Traceback" not in rest
    assert "resume the sweep (finished jobs are skipped) with: python -m tfx_hydra -m " \
           f"hydra.sweep.dir={tmp_path / 'sweep'} model.units=32,48,64" in rest
    runs = {r.info.run_name: r for r in mlflow_runs(tmp_path)}
    assert runs["0: model.units=32"].info.status == "FINISHED"
    assert runs["1: model.units=48"].info.status == "KILLED"
    assert "2: model.units=64" not in runs
    parent = next(r for n, r in runs.items() if n.startswith("sweep"))
    assert parent.info.status == "KILLED"  # closed by the exit hook, not left RUNNING

    done = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"sweep job 0 already finished as MLflow run {runs['0: model.units=32'].info.run_id}: skipped" in done.stdout
    assert f"resuming MLflow run {runs['1: model.units=48'].info.run_id}" in done.stdout
    after = {r.info.run_name: r for r in mlflow_runs(tmp_path)}
    assert len(after) == 4  # the same parent, the same three children: nothing ran twice
    assert {r.info.status for r in after.values()} == {"FINISHED"}
    assert after["0: model.units=32"].info.end_time == runs["0: model.units=32"].info.end_time  # not re-run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    resumed = after["1: model.units=48"].info.run_id
    assert [m.step for m in client.get_metric_history(resumed, "val_accuracy")] == [0, 1, 2, 3]
    finished = client.get_run(resumed).data.tags  # the interruption is history once the run has finished
    assert "error" not in finished and finished["resume.interrupted_by"] == "interrupted (SIGINT)"
    assert after[parent.info.run_name].data.tags["sweep.finished"] == "3"


def test_eight_parallel_jobs_on_one_fresh_sqlite_store_land_with_every_metric(tmp_path):
    assert not (tmp_path / "mlflow.db").exists()  # a fresh store: the first-use migration happens once, first
    done = run_cli(["hydra/launcher=parallel", "hydra.launcher.n_jobs=4", "model.units=16,32,48,64",
                    "optimizer.learning_rate=0.01,0.001", "trainer.epochs=2", "data.limit=200", "export=none",
                    "export.mlflow_model=false"], cwd=tmp_path, multirun=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "database is locked" not in done.stdout + done.stderr
    runs = mlflow_runs(tmp_path)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 8 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["sweep.launcher"] for r in runs if "sweep.dir" in r.data.tags} == {
        "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    assert parent.data.tags["command"] == (  # the record re-runs the same sweep, launcher included
        "python -m tfx_hydra -m hydra/launcher=parallel hydra.launcher.n_jobs=4 model.units=16,32,48,64 "
        "optimizer.learning_rate=0.01,0.001 trainer.epochs=2 data.limit=200 export=none export.mlflow_model=false")
    per_epoch = {"loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec", "epoch_seconds"}
    once = {"test_loss", "test_accuracy", "train_seconds", "train_examples_per_sec", "objective"}
    with sqlite3.connect(tmp_path / "mlflow.db") as db:  # every metric row, counted in the store itself
        rows = db.execute("SELECT run_uuid, key, step FROM metrics").fetchall()
    for child in children:
        mine = [(key, step) for run, key, step in rows if run == child.info.run_id]
        assert sorted(mine) == sorted([(k, s) for k in per_epoch for s in (0, 1)] + [(k, 0) for k in once])
    assert len(rows) == 8 * (2 * len(per_epoch) + len(once)) + 4  # + the parent's jobs, finished, failed, best


def test_weights_that_turn_nan_end_the_run_failed_with_the_last_good_backup_kept(tmp_path):
    """The CPU-independent form of a divergence the loss does not show (tests/planted.py): the
    weights turn NaN in epoch 3 while every reported loss stays finite."""
    import json

    done = run_cli(["trainer.epochs=4", "data.limit=320", "trainer.batch_size=32", "export=none",
                    "trainer.steps_per_execution=1", "model._target_=tests.planted.mlp_with_nan_after",
                    "+model.nan_after_batches=21"], cwd=tmp_path)  # 10 batches an epoch: NaN in epoch 3
    assert done.returncode == 1
    assert "TrainingError: the model's weights became NaN/inf in epoch 3 (nan_after/planted), while the reported " \
           "training loss was" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and "weights became NaN/inf in epoch 3" in run.data.tags["error"]
    backup = Path(run.data.tags["resume.backup_dir"])
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2  # epochs 1-2 kept
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [0, 1]  # epoch 3 not logged


# A run that SIGKILLs itself at an exact point of epoch 2's end (fault injection: no outside kill can hit
# a window of microseconds reliably), then the same config run again.
KILLED_AT = """
import os, signal, sys
from tests.helpers import compose
from tfx_hydra import tracking
from tfx_hydra.run import run

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
run(compose(["trainer.epochs=3", "data.limit=300", "export=none", "export.mlflow_model=false",
             "trainer.tensorboard=false"], launch_dir=launch))
"""


@pytest.mark.parametrize("window", ["before_the_metric_write", "after_the_metric_write"])
def test_a_kill_at_an_epochs_end_then_resume_logs_every_epoch_exactly_once(tmp_path, window):
    def attempt(where: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", KILLED_AT, str(tmp_path), where], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=300)

    killed = attempt(window)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = attempt("none")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming MLflow run" in resumed.stdout
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED"
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for key in ("loss", "val_accuracy", "epoch_seconds"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == [0, 1, 2], key


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

    other = run_cli(["trainer.epochs=1", "data.limit=300", "export=none", "export.mlflow_model=false"], cwd=tmp_path)
    assert other.returncode == 0, other.stderr[-2000:]
    runs = {r.info.run_id: r for r in mlflow_runs(tmp_path)}
    closed = runs[lost.info.run_id]
    assert closed.info.status == "KILLED" and closed.data.tags["lost"] == "true"
    assert closed.data.tags["error"].startswith(f"lost: its process (pid {process.pid} on ")
    assert {r.info.status for r in runs.values()} == {"KILLED", "FINISHED"}  # nothing left RUNNING
    assert Path(closed.data.tags["resume.backup_dir"]).is_dir()  # still resumable by its own command


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
    import h5py

    store = tmp_path / "store"  # the MLflow store on another disk: it can still be written
    store.mkdir()
    done = run_cli(["trainer.epochs=4", f"tracking.uri=sqlite:///{store}/mlflow.db",
                    f"tracking.artifact_location={store}/mlruns"], cwd=small_disk)
    assert done.returncode == 1
    assert f"DiskFull: no space left on the disk writing {small_disk}/" in done.stderr, done.stderr[-3000:]
    assert f"free of 300.0 KB on {small_disk})" in done.stderr and f"Fix: free space on {small_disk}" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("DiskFull: no space left on the disk")
    backup = Path(run.data.tags["resume.backup_dir"])
    if (backup / "training_metadata.json").exists():  # an epoch was backed up before the disk filled: still whole
        with h5py.File(backup / "latest.weights.h5", "r") as weights:
            assert len(weights.keys()) > 0


def test_a_full_disk_under_the_default_store_still_ends_in_one_message(small_disk):
    done = run_cli(["trainer.epochs=4"], cwd=small_disk)  # the store, the outputs and the journal on one full disk
    assert done.returncode == 1
    assert "DiskFull: no space left on the disk writing " in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def running_children(launch: Path) -> list:
    return [r for r in mlflow_runs(launch) if "mlflow.parentRunId" in r.data.tags and r.info.status == "RUNNING"
            and r.data.metrics.get("loss") is not None]


# joblib tears its pool down when a worker dies (the other job dies too, the rest never run); submitit_local
# runs every job as its own process, so only the killed one is lost and the others finish (fewer epochs).
@pytest.mark.parametrize("launcher, epochs", [("parallel", 300), ("local_gpus", 40)])
def test_a_sweep_that_loses_a_worker_names_the_lost_jobs_and_the_command_that_resumes(tmp_path, launcher, epochs):
    import time

    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "-m", "tfx_hydra", "-m", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}",
               "model.units=16,32,48,64", "data=synthetic", "data.num_examples=20000", f"trainer.epochs={epochs}",
               "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"]
    sweep = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.time() + 240
    while not (sweep_dir / "mlflow_parent_run.json").exists():  # the store is created (and migrated) by then
        assert sweep.poll() is None and time.time() < deadline, "the sweep did not start"
        time.sleep(0.5)
    while not running_children(tmp_path):  # a job mid-training, its first epoch logged
        assert sweep.poll() is None and time.time() < deadline, "no job started training"
        time.sleep(1)
    victim = running_children(tmp_path)[0]
    os.kill(int(victim.data.tags["process.pid"]), signal.SIGKILL)  # what the out-of-memory killer does
    out, _ = sweep.communicate(timeout=600)
    assert sweep.returncode != 0
    assert "Traceback" not in out, out[-3000:]
    assert "tfx_hydra: the sweep lost " in out and f"job {victim.info.run_name} (MLflow run {victim.info.run_id})" in out
    assert f"resume the sweep (finished jobs are skipped) with: python -m tfx_hydra -m hydra/launcher={launcher}" in out
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = [r for r in runs if r is not parent]
    assert "RUNNING" not in {r.info.status for r in runs}  # nothing left RUNNING, the parent included
    lost = [c for c in children if c.data.tags.get("lost") == "true"]
    assert victim.info.run_id in {c.info.run_id for c in lost}
    tags = parent.data.tags
    assert int(tags["sweep.lost"]) == len(lost) and tags["sweep.planned"] == "4"
    assert int(tags["sweep.never_ran"]) == 4 - len(children)
    assert f"{tags['sweep.never_ran']} job(s) never ran" in out
