"""Faults caused for real, and what survives them: a tracking server killed mid-run, many parallel
jobs on one SQLite store, an interrupted sweep re-run, weights that turn NaN. (The machine's faults, a
kill -9, a full disk, a lost worker: tests/e2e/test_machine_faults.py; planted secrets:
tests/e2e/test_sweeps.py; MLflow failing in-process: tests/unit/test_tracking.py.)"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import (
    cli_env,
    free_ports,
    mlflow_client,
    mlflow_runs,
    run_cli,
    tracking_server_env,
    wait_for_backup_of_epoch,
    wait_for_http,
)
from tests.helpers.in_process import run_cli_in_process, run_in_process
from tfx_hydra import sync

pytestmark = pytest.mark.slow


def start_server(store: Path, port: int, cwd: Path) -> subprocess.Popen:
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{store}",
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], cwd=cwd,
                              env=tracking_server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
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
               "data.num_examples=6000", "data.input_shape=[16,16]", "trainer.epochs=4",
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
        done = run_in_process(sync.main, ["python -m tfx_hydra.sync", str(output_dir)], cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
        (run_info,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
        run_id = run_info.info.run_id
        assert run_info.info.status == "FINISHED"
        for key in ("epoch/loss", "epoch/val_accuracy", "examples_per_sec"):
            assert [m.step for m in client.get_metric_history(run_id, key)] == [0, 1, 2, 3], key
        assert {"test_accuracy", "objective", "train_seconds"} <= set(run_info.data.metrics)
        assert {"plots", "export", "model", ".hydra", "config_resolved.yaml"} <= {
            a.path for a in client.list_artifacts(run_id)}
        assert run_info.data.tags["export.savedmodel.path"].startswith(str(output_dir))
    finally:
        stop_server(server, signal.SIGTERM)


def test_an_interrupted_sweep_rerun_skips_finished_jobs_and_resumes_the_killed_one(tmp_path):
    command = [sys.executable, "-m", "tfx_hydra", "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "model.units=32,48,64",
               "data=synthetic", "data.num_examples=6000", "data.input_shape=[16,16]", "trainer.epochs=4",
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
    assert sweep.wait(timeout=120) == 130, rest[-4000:]  # Ctrl-C's conventional status, one line not a traceback
    assert "Traceback" not in rest
    assert "resume the sweep (finished jobs are skipped) with: python -m tfx_hydra -m " \
           f"hydra.sweep.dir={tmp_path / 'sweep'} model.units=32,48,64" in rest
    runs = {r.info.run_name: r for r in mlflow_runs(tmp_path)}
    assert runs["job 0: units 32"].info.status == "FINISHED"
    assert runs["job 1: units 48"].info.status == "KILLED"
    assert "job 2: units 64" not in runs
    parent = next(r for n, r in runs.items() if n.startswith("sweep"))
    assert parent.info.status == "KILLED"  # closed by the exit hook, not left RUNNING

    done = run_cli_in_process(command[4:], cwd=tmp_path, multirun=True)  # the same command again (no kill this time)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"sweep job 0 already finished as MLflow run {runs['job 0: units 32'].info.run_id}: skipped" in done.stdout
    assert f"resuming MLflow run {runs['job 1: units 48'].info.run_id}" in done.stdout
    after = {r.info.run_name: r for r in mlflow_runs(tmp_path)}
    assert len(after) == 4  # the same parent, the same three children: nothing ran twice
    assert {r.info.status for r in after.values()} == {"FINISHED"}
    assert after["job 0: units 32"].info.end_time == runs["job 0: units 32"].info.end_time  # not re-run
    client = mlflow_client(tmp_path)
    resumed = after["job 1: units 48"].info.run_id
    assert [m.step for m in client.get_metric_history(resumed, "epoch/val_accuracy")] == [0, 1, 2, 3]
    finished = client.get_run(resumed).data.tags  # the interruption is history once the run has finished
    assert "error" not in finished and finished["resume.interrupted_by"] == "interrupted (SIGINT)"
    assert after[parent.info.run_name].data.tags["sweep.finished"] == "3"


@pytest.mark.fresh_store
def test_eight_parallel_jobs_on_one_fresh_sqlite_store_land_with_every_metric(tmp_path):
    assert not (tmp_path / "mlflow.db").exists()  # a fresh store: the first-use migration happens once, first
    done = run_cli(["hydra/launcher=parallel", "hydra.launcher.n_jobs=4", "model.units=16,32,48,64",
                    "optimizer.learning_rate=0.01,0.001", "trainer.epochs=2", "data.limit=200", "export=none",
                    "export.mlflow_model=false", "tracking.system_metrics.interval=1"],  # its writes too
                   cwd=tmp_path, multirun=True, timeout=600)
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
        "optimizer.learning_rate=0.01,0.001 trainer.epochs=2 data.limit=200 export=none export.mlflow_model=false "
        "tracking.system_metrics.interval=1")
    per_epoch = {"epoch/loss", "epoch/accuracy", "epoch/val_loss", "epoch/val_accuracy", "examples_per_sec",
                 "epoch_seconds", "lr", "tflops", "mfu"}
    once = {"test_loss", "test_accuracy", "train_seconds", "train_examples_per_sec", "objective", "parameters",
            "loss", "accuracy", "val_loss", "val_accuracy"}  # the kept weights' figures (metrics.py)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:  # every metric row, counted in the store itself
        rows = db.execute("SELECT run_uuid, key, step FROM metrics WHERE key NOT LIKE 'system/%'").fetchall()
        sampled = db.execute("SELECT COUNT(DISTINCT run_uuid) FROM metrics WHERE key LIKE 'system/%'").fetchone()[0]
    assert sampled == 8  # MLflow's monitor wrote every second beside each job's own writes
    for child in children:
        mine = [(key, step) for run, key, step in rows if run == child.info.run_id]
        assert sorted(mine) == sorted([(k, s) for k in per_epoch for s in (0, 1)] + [(k, 0) for k in once])
    assert len(rows) == 8 * (2 * len(per_epoch) + len(once)) + 4  # + the parent's jobs, finished, failed, best


def test_weights_that_turn_nan_end_the_run_failed_with_the_last_good_backup_kept(tmp_path):
    """The CPU-independent form of a divergence the loss does not show (tests/helpers/planted.py): the
    weights turn NaN in epoch 3 while every reported loss stays finite."""
    done = run_cli_in_process(["trainer.epochs=4", "data.limit=320", "trainer.batch_size=32", "export=none",
                               "trainer.steps_per_execution=1",
                               "model._target_=tests.helpers.planted.mlp_with_nan_after",
                               "+model.nan_after_batches=21"], cwd=tmp_path)  # 10 batches an epoch: NaN in epoch 3
    assert done.returncode == 1
    assert "TrainingError: the model's weights became NaN/inf in epoch 3 (nan_after/planted), while the reported " \
           "training loss was" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and "weights became NaN/inf in epoch 3" in run.data.tags["error"]
    backup = Path(run.data.tags["resume.backup_dir"])
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2  # epochs 1-2 kept
    client = mlflow_client(tmp_path)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "epoch/loss")] == [0, 1]  # epoch 3 not logged
