"""Sweeps through the real CLI: `python -m tfx_hydra -m ...` with Hydra's basic and submitit_local
launchers and the Optuna sweeper (joblib: tests/e2e/test_faults.py, eight jobs on four workers), read back
from the MLflow store: one parent run
per sweep, every job a child run nested under it, the objective on each child and the best on
the parent, failures counted."""

from __future__ import annotations

import csv
import os
import re
import statistics

import pytest

from tests.helpers import mlflow_client, mlflow_runs, sweep_parent_and_children
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

FAST = ["trainer.epochs=1", "data.limit=200", "export=none", "export.mlflow_model=false"]


def assert_best_on_parent(parent, children):
    finished = [c for c in children if c.info.status == "FINISHED"]
    best = max(finished, key=lambda c: c.data.metrics["objective"])
    assert parent.data.metrics["best_val_accuracy"] == best.data.metrics["objective"]
    assert parent.data.tags["sweep.best_run_id"] == best.info.run_id
    for child in finished:  # the objective is sweep.metric's final value
        assert child.data.metrics["objective"] == child.data.metrics["val_accuracy"]


# Credentials planted in the sweep below: none may reach MLflow or the saved configs.
SECRETS = {"TOKEN_SECRET_1": "+tracking.tags.api_token=TOKEN_SECRET_1",
           "PASS_SECRET_2": "+credentials.db_password=PASS_SECRET_2",
           "URLPASS_SECRET_3": "+source.url=https://alice:URLPASS_SECRET_3@example.com/data"}


@pytest.mark.fresh_store
def test_basic_launcher_sweep_nests_every_job_under_one_parent(tmp_path):
    done = run_cli_in_process(["model.units=32,64", "trainer.batch_size=16,32", *FAST, *SECRETS.values()],
                              cwd=tmp_path, multirun=True,
                              env={"AWS_SECRET_ACCESS_KEY": "ENV_SECRET_4"})  # environment variables are never logged
    assert done.returncode == 0, done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "multirun").glob("*/*") if p.is_dir()]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    assert not (tmp_path / "outputs").exists()
    parent, children = sweep_parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name == "sweep " + "/".join(sweep_dir.parts[-2:])
    assert parent.data.tags["sweep.launcher"].endswith("BasicLauncher")
    assert parent.data.tags["sweep.overrides"].startswith("model.units=32,64 trainer.batch_size=16,32")
    assert [c.info.run_name for c in children] == [
        "job 0: units 32, batch 16", "job 1: units 32, batch 32", "job 2: units 64, batch 16",
        "job 3: units 64, batch 32"]
    assert sorted((c.data.params["model.units"], c.data.params["trainer.batch_size"]) for c in children) == [
        ("32", "16"), ("32", "32"), ("64", "16"), ("64", "32")]
    assert {c.info.status for c in children} == {"FINISHED"}
    digests = [{(i.dataset.name, i.dataset.digest) for i in c.inputs.dataset_inputs} for c in children]
    assert len(digests[0]) == 3 and all(d == digests[0] for d in digests)  # the same data: the same digests
    assert_best_on_parent(parent, children)
    assert parent.data.tags["sweep.jobs"] == "4" and parent.data.tags["sweep.failed"] == "0"
    client = mlflow_client(tmp_path)
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
        "sweep_summary.txt", "sweep_summary.csv", "sweep_summary.png", "multirun.yaml", "sweep.log"}
    # MLflow's own lines as it created the store are in the sweep's log, not after the summary on the terminal
    assert "Creating initial MLflow database tables" in (sweep_dir / "sweep.log").read_text()
    assert "mlflow.store.db.utils" not in done.stderr + done.stdout
    summary = done.stdout[done.stdout.index("tfx_hydra: sweep complete"):]  # the sweep's end, on the terminal
    best = next(c for c in children if c.info.run_id == parent.data.tags["sweep.best_run_id"])
    for row in ("jobs              │ 4 finished, 0 failed, 0 killed", f"best job          │ {best.info.run_name}",
                f"parent run        │ {parent.info.run_id}", f"sweep dir         │ {sweep_dir}"):
        assert row in summary
    assert summary.rstrip().endswith(f"browse: cd {tmp_path} && mlflow ui")
    assert summary.startswith((sweep_dir / "sweep_summary.txt").read_text())
    with open(sweep_dir / "sweep_summary.csv", encoding="utf-8") as table:
        rows = list(csv.DictReader(table))
    assert [r["run_id"] for r in rows] == [c.info.run_id for c in children]
    assert_no_secret_anywhere(tmp_path, children[0])


def assert_no_secret_anywhere(launch, child):
    assert child.data.params["credentials.db_password"] == "***"
    assert child.data.params["source.url"] == "https://***@example.com/data"
    assert child.data.tags["api_token"] == "***"
    assert "+credentials.db_password=***" in child.data.tags["command"]
    searched, leaks = 0, []
    for path in launch.rglob("*"):  # the SQLite store, every artifact, every saved config and log
        if path.is_file():
            searched += 1
            content = path.read_bytes()
            leaks += [f"{secret} in {path}" for secret in [*SECRETS, "ENV_SECRET_4"] if secret.encode() in content]
    assert leaks == []
    assert searched > 40 and (launch / "mlflow.db").exists()


def test_submitit_local_jobs_nest_under_the_parent_and_a_failed_job_is_counted(tmp_path):
    done = run_cli_in_process(["hydra/launcher=local_gpus", "trainer.loss=sparse_categorical_crossentropy,no_such_loss",
                               *FAST], cwd=tmp_path, multirun=True)  # the jobs: processes submitit starts
    assert done.returncode == 1  # Hydra reports the failed job once all jobs of the batch have run
    assert "ConfigError: trainer.loss: Keras does not know 'no_such_loss'." in done.stderr
    assert "ConfigError: ConfigError" not in done.stderr  # the error came back pickled from the job's process
    assert "Error executing job" not in done.stderr and "HYDRA_FULL_ERROR" not in done.stderr
    # submitit's jobs print to their own files: the terminal has the sweep's first line and its end
    assert "each job's log: " in done.stdout and "tfx_hydra.log" in done.stdout
    assert "jobs              │ 1 finished, 1 failed, 0 killed" in done.stdout
    parent, children = sweep_parent_and_children(tmp_path)
    assert parent.data.tags["sweep.launcher"].endswith("submitit_launcher.LocalLauncher")
    assert [c.info.status for c in children] == ["FINISHED", "FAILED"]
    assert "Keras does not know 'no_such_loss'" in children[1].data.tags["error"]
    assert parent.info.status == "FAILED"  # closed with the sweep's error, not left RUNNING
    assert (parent.data.tags["sweep.failed"], parent.data.tags["sweep.finished"]) == ("1", "1")
    assert_best_on_parent(parent, children)
    sweep_dir = parent.data.tags["sweep.dir"]
    assert all(c.data.params["paths.output_dir"].startswith(sweep_dir) for c in children)


def test_the_slurm_launcher_off_a_cluster_is_one_message_and_leaves_no_parent(tmp_path):
    # off a cluster: a PATH without Slurm's commands (this machine may have them: tests/e2e/test_slurm.py)
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not os.path.exists(os.path.join(d, "srun")))
    done = run_cli_in_process(["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "model.units=16,32", *FAST],
                              cwd=tmp_path, multirun=True, env={"PATH": path})
    assert done.returncode == 1
    assert done.stderr.startswith("ConfigError: hydra/launcher=slurm submits every job to Slurm, but this machine "
                                  "has no Slurm (`srun` is not on PATH).\n  Fix: run the sweep on the cluster's login "
                                  "node"), done.stderr
    assert "hydra/launcher=local_gpus" in done.stderr and "Traceback" not in done.stderr
    assert mlflow_runs(tmp_path) == [] and not (tmp_path / "multirun").exists()


def test_kfold_runs_a_job_per_fold_and_the_parent_reports_mean_and_std(tmp_path):
    done = run_cli_in_process(["cv=kfold", "cv.folds=3", *FAST, "trainer.tensorboard=false"], cwd=tmp_path,
                              multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    parent, children = sweep_parent_and_children(tmp_path)
    assert [c.data.tags["cv.fold"] for c in children] == ["0", "1", "2"] and parent.data.tags["sweep.planned"] == "3"
    digests = [{i.dataset.name: i.dataset.digest for i in c.inputs.dataset_inputs} for c in children]
    validation = [next(d for name, d in found.items() if "validation" in name) for found in digests]
    test = [next(d for name, d in found.items() if "test" in name) for found in digests]
    assert len(set(validation)) == 3 and len(set(test)) == 1  # a fold each; the test split the same for all
    from sklearn.datasets import load_digits

    pool = len(load_digits().target) - int(children[0].data.tags["data.num_test"])  # training + validation
    assert sum(int(c.data.tags["data.num_validation"]) for c in children) == pool  # the folds cover the pool
    for metric in ("val_accuracy", "test_accuracy", "val_loss"):
        values = [c.data.metrics[metric] for c in children]
        assert parent.data.metrics[f"cv_mean_{metric}"] == pytest.approx(statistics.mean(values))
        assert parent.data.metrics[f"cv_std_{metric}"] == pytest.approx(statistics.stdev(values))
    mean, std = parent.data.metrics["cv_mean_val_accuracy"], parent.data.metrics["cv_std_val_accuracy"]
    assert re.search(rf"cross-validation +│ val_accuracy {mean:.4f} ± {std:.4f}, test_accuracy", done.stdout)
    assert "(3 folds)" in done.stdout
    assert "best job" not in done.stdout and "sweep.best_run_id" not in parent.data.tags  # no fold is "the best"
