"""The sweep callback on a real MLflow store: parent run, child runs nested under it, failures
counted, best job and summary artifacts. Hydra's calls are made by hand here, in the order Hydra
makes them; tests/e2e/test_sweeps.py runs the same through real multiruns and launchers."""

from __future__ import annotations

import csv
import os
import shlex

import pytest
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from tests.helpers import mlflow_client
from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import OBJECTIVE, objective
from tfx_hydra.settings.schemas import SweepConfig, TrackingConfig
from tfx_hydra.sweeps import job as sweep_job
from tfx_hydra.sweeps import launch, summary
from tfx_hydra.sweeps.callback import SweepCallback
from tfx_hydra.sweeps.parent import SWEEP_LOG
from tfx_hydra.tracking import tracked_run


def sweep_config(tmp_path, overrides=("model.units=32,64", "trainer.epochs=1"), direction="maximize", job_num=0,
                 job_overrides=("model.units=32", "trainer.epochs=1"), params=None):
    """The parts of a multirun's config the callback reads, as Hydra fills them in."""
    return OmegaConf.create({
        "tracking": {"enabled": True, "experiment": "sweeps"},
        "sweep": {"metric": "val_accuracy", "direction": direction},
        "hydra": {"runtime": {"cwd": str(tmp_path)}, "mode": RunMode.MULTIRUN,
                  "sweep": {"dir": str(tmp_path / "multirun" / "s1")},
                  "overrides": {"task": list(overrides if job_num is None else job_overrides)},
                  "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"},
                  "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                              "params": params},
                  "job": {"num": job_num}},
    })


def child_job(tmp_path, callback, num, job_overrides, objective=None, fail=None):
    """One job as Hydra runs it: on_job_start, the run, on_job_end."""
    config = sweep_config(tmp_path, job_num=num, job_overrides=job_overrides)
    callback.on_job_start(config)
    job = sweep_job.current_job()
    result = JobReturn(status=JobStatus.COMPLETED, _return_value=objective)
    if fail == "before_run":
        result = JobReturn(status=JobStatus.FAILED, _return_value=ConfigError("model.units=-1 must be positive.",
                                                                              fix="model.units=128"))
    else:
        try:
            with tracked_run(TrackingConfig(experiment="sweeps"), str(tmp_path), tags={}, sweep_job=job) as tracker:
                if fail == "in_run":
                    raise RuntimeError("the loss became NaN")
                tracker.log_metrics({OBJECTIVE: objective})
        except RuntimeError as err:
            result = JobReturn(status=JobStatus.FAILED, _return_value=err)
    callback.on_job_end(config, result)
    return job


@pytest.fixture
def client(tmp_path):
    return mlflow_client(tmp_path)


@pytest.mark.fresh_store
def test_a_sweep_is_a_parent_run_with_its_jobs_nested_under_it(tmp_path, capsys):
    callback = SweepCallback()
    callback.on_multirun_start(sweep_config(tmp_path, job_num=None))
    client = mlflow_client(tmp_path)  # after the sweep made the store
    experiment = client.get_experiment_by_name("sweeps")
    assert experiment.artifact_location == f"{tmp_path}/mlruns/sweeps"  # the store exists before any job
    (parent,) = client.search_runs([experiment.experiment_id])
    assert parent.info.status == "RUNNING"
    assert parent.data.tags["sweep.overrides"] == "model.units=32,64 trainer.epochs=1"
    assert parent.data.tags["sweep.launcher"].endswith("BasicLauncher")
    # what the MLflow UI's run page shows: Created by, the sweep's own params and a description
    assert parent.data.tags["mlflow.user"] and parent.data.tags["mlflow.source.name"]
    assert parent.data.params == {"space.model.units": "32,64"}
    assert parent.data.tags["mlflow.note.content"] == (
        "Grid sweep of 2 jobs over model.units, each a child run, ranked by val_accuracy (maximize). Run it again, "
        "or resume it, with `python -m tfx_hydra -m model.units=32,64 trainer.epochs=1`.")

    first = child_job(tmp_path, callback, 0, ["model.units=32", "trainer.epochs=1"], objective=0.5)
    child_job(tmp_path, callback, 1, ["model.units=64", "trainer.epochs=1"], objective=0.75)
    assert first.parent_run_id == parent.info.run_id and first.name == "job 0: units 32"
    assert sweep_job.JOB_ENV not in os.environ  # the job's announcement ends with the job
    callback.on_multirun_end(sweep_config(tmp_path, job_num=None))

    parent = client.get_run(parent.info.run_id)
    children = client.search_runs([experiment.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.info.run_name for c in children) == ["job 0: units 32", "job 1: units 64"]
    best = next(c for c in children if c.info.run_name == "job 1: units 64")
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best_val_accuracy"] == 0.75
    assert parent.data.tags["sweep.best_run_id"] == best.info.run_id
    assert (parent.data.tags["sweep.jobs"], parent.data.tags["sweep.failed"]) == ("2", "0")
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {summary.SUMMARY_CSV, summary.SUMMARY_PNG,
                                                                          summary.SUMMARY_TXT, SWEEP_LOG}
    # MLflow's lines as it created the store went to the sweep's log (the launching process has no job log)
    assert "Creating initial MLflow database tables" in (tmp_path / "multirun" / "s1" / SWEEP_LOG).read_text()
    # the sweep ends as a single run does: a table with the counts, the best job, the parent, the dir
    shown = capsys.readouterr().out
    sweep_dir = str(tmp_path / "multirun" / "s1")
    assert f"jobs under MLflow parent run {parent.info.run_id}" in shown.splitlines()[0]
    table = shown[shown.index("tfx_hydra: sweep complete"):]
    for row in ("jobs              │ 2 finished, 0 failed, 0 killed", "best job          │ job 1: units 64",
                "best val_accuracy │ 0.7500", f"best run          │ {best.info.run_id}",
                f"parent run        │ {parent.info.run_id}", f"sweep dir         │ {sweep_dir} "):
        assert row in table
    assert "0    FINISHED  0.5000        job 0: units 32" in table
    assert "1    FINISHED  0.7500 *      job 1: units 64" in table
    assert table.rstrip().splitlines()[-1] == f"browse: cd {tmp_path} && mlflow ui"
    assert (tmp_path / "multirun" / "s1" / summary.SUMMARY_TXT).read_text() in table + "\n"
    # (a real sweep also logs Hydra's multirun.yaml: tests/e2e/test_sweeps.py)
    with open(tmp_path / "multirun" / "s1" / summary.SUMMARY_CSV, encoding="utf-8") as table:
        rows = list(csv.DictReader(table))
    assert [(r["job"], r["status"], float(r["objective"])) for r in rows] == [("0", "FINISHED", 0.5),
                                                                             ("1", "FINISHED", 0.75)]
    assert (tmp_path / "multirun" / "s1" / summary.SUMMARY_PNG).read_bytes()[:4] == b"\x89PNG"


def test_failed_jobs_are_counted_even_when_they_fail_before_their_run_starts(tmp_path, client):
    callback = SweepCallback()
    callback.on_multirun_start(sweep_config(tmp_path, job_num=None))
    child_job(tmp_path, callback, 0, ["model.units=32"], objective=0.25, fail="in_run")
    child_job(tmp_path, callback, 1, ["model.units=-1"], fail="before_run")
    child_job(tmp_path, callback, 2, ["model.units=64"], objective=0.5)
    callback.on_multirun_end(sweep_config(tmp_path, job_num=None))

    experiment = client.get_experiment_by_name("sweeps")
    runs = {r.data.tags.get("sweep.job_num", "parent"): r for r in client.search_runs([experiment.experiment_id])}
    assert runs["0"].info.status == "FAILED" and "the loss became NaN" in runs["0"].data.tags["error"]
    assert runs["1"].info.status == "FAILED"
    assert runs["1"].data.tags["error"].startswith("ConfigError: model.units=-1 must be positive.")
    assert runs["1"].data.tags["mlflow.parentRunId"] == runs["parent"].info.run_id
    parent = runs["parent"]
    assert parent.info.status == "FINISHED"  # the sweep ran to its end; the failures are counted
    assert (parent.data.tags["sweep.failed"], parent.data.tags["sweep.finished"]) == ("2", "1")
    assert parent.data.metrics["jobs_failed"] == 2
    assert parent.data.tags["sweep.best_run_id"] == runs["2"].info.run_id


def test_a_sweep_stopped_early_closes_its_parent_failed_not_running(tmp_path, client):
    callback = SweepCallback()
    callback.on_multirun_start(sweep_config(tmp_path, job_num=None))
    child_job(tmp_path, callback, 0, ["model.units=32"], fail="in_run")
    callback._parent.close_unfinished()  # what the exit hook does when Hydra's sweeper raised
    experiment = client.get_experiment_by_name("sweeps")
    parent = next(r for r in client.search_runs([experiment.experiment_id]) if "sweep.dir" in r.data.tags)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["error"].startswith("the sweep ended with an error")
    assert "best_val_accuracy" not in parent.data.metrics


def test_minimize_picks_the_lowest_objective():
    jobs = [{"run_id": "a", "status": "FINISHED", "objective": 0.3}, {"run_id": "b", "status": "FINISHED",
            "objective": 0.1}, {"run_id": "c", "status": "FAILED", "objective": None}]
    assert summary.best_job(jobs, "minimize")["run_id"] == "b"
    assert summary.best_job(jobs, "maximize")["run_id"] == "a"
    assert summary.best_job(jobs[2:], "maximize") is None


def test_a_job_is_named_by_what_the_sweep_varies():
    config = OmegaConf.create({"hydra": {"overrides": {"task": ["model.units=32,64", "trainer.epochs=1"]},
                                         "sweeper": {"params": {"optimizer.learning_rate": "interval(0.1, 1)"}}}})
    keys = launch.swept_keys(config)
    assert keys == ["model.units", "optimizer.learning_rate"]
    assert launch.job_name(3, ["model.units=64", "trainer.epochs=1", "optimizer.learning_rate=0.5"], keys) == \
        "job 3: units 64, lr 0.5"
    assert launch.job_name(0, ["trainer.epochs=1"], keys) == "job 0"
    # a search's trial, as Optuna samples it: rounded for the MLflow UI's list (the params keep the exact value)
    assert launch.job_name(7, ["optimizer.learning_rate=0.0005180169728534583", "+model.units=512"], keys,
                           trial=True) == "trial 7: lr 5.2e-4, units 512"


def test_one_keys_numbers_are_written_one_way_in_every_job_of_a_sweep():
    """`lr 0.01` beside `lr 1e-3` in one table reads as two scales: a key whose sweep reaches below 0.01 (or to
    1e5) is written 1e-2 in every job, 1e-2 and 1e-3 alike; a key that stays in between keeps 0.5."""
    space = {"optimizer.weight_decay": "tag(log, interval(1e-5, 0.1))"}
    grid = ["optimizer.learning_rate=0.01,1e-3", "model.dropout=0.1,0.5"]
    config = OmegaConf.create({"hydra": {"overrides": {"task": grid}, "sweeper": {"params": space}}})
    scientific = launch.scientific_keys(config)
    assert scientific == ["optimizer.learning_rate", "optimizer.weight_decay"]
    keys = launch.swept_keys(config)
    names = [launch.job_name(n, [f"optimizer.learning_rate={lr}", f"model.dropout={d}", f"optimizer.weight_decay={w}"],
                             keys, scientific=scientific) for n, (lr, d, w) in enumerate([("0.01", "0.1", "0.05"),
                                                                                         ("0.001", "0.5", "0.002")])]
    assert names == ["job 0: lr 1e-2, dropout 0.1, wd 5e-2", "job 1: lr 1e-3, dropout 0.5, wd 2e-3"]


@pytest.mark.parametrize(("written", "shown"), [
    ("0.0005180169728534583", "5.2e-4"), ("0.01", "0.01"), ("0.001", "1e-3"), ("0.123456", "0.12"), ("0.0", "0"),
    ("1e30", "1e30"), ("-0.004", "-4e-3"), ("512", "512"), ("cnn", "cnn"), ("inf", "inf")])
def test_a_job_names_numbers_with_two_significant_digits(written, shown):
    assert launch.short_value(written) == shown


def test_outside_a_sweep_there_is_no_job(tmp_path, monkeypatch):
    monkeypatch.delenv(sweep_job.JOB_ENV, raising=False)
    assert sweep_job.current_job() is None
    callback = SweepCallback()
    single = sweep_config(tmp_path)
    single.hydra.mode = RunMode.RUN
    callback.on_job_start(single)
    assert sweep_job.current_job() is None


@pytest.mark.fresh_store
def test_the_callback_reports_a_bad_tracking_value_like_a_run_does(tmp_path):
    config = sweep_config(tmp_path, job_num=None)
    config.tracking.connect_timeout = "soon"
    with pytest.raises(ConfigError, match=r"tracking.connect_timeout got 'soon', which has the wrong type"):
        SweepCallback().on_multirun_start(config)
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.fresh_store
def test_tracking_none_makes_no_parent(tmp_path):
    config = sweep_config(tmp_path, job_num=None)
    config.tracking.enabled = False
    callback = SweepCallback()
    callback.on_multirun_start(config)
    callback.on_job_start(sweep_config(tmp_path))
    assert sweep_job.current_job() is None
    assert not (tmp_path / "mlflow.db").exists()


# --- the parent's record re-runs the sweep: Hydra's own overrides are kept ------------------------

def composed_sweep(overrides: list[str]):
    """The launching process's config as Hydra composes it for `-m overrides` (hydra section included)."""
    with initialize_config_module(config_module="tfx_hydra.conf", version_base="1.3"):
        return GlobalHydra.instance().config_loader().load_configuration(
            config_name="config", overrides=[*overrides, launch.MULTIRUN_OVERRIDE], run_mode=RunMode.MULTIRUN)


@pytest.mark.parametrize("overrides, launcher, sweeper", [
    (["hydra/launcher=parallel", "model.units=64,128,256", "trainer.epochs=1"], "JoblibLauncher", "BasicSweeper"),
    (["hydra/launcher=local_gpus", "optimizer.learning_rate=0.01,0.001"], "LocalLauncher", "BasicSweeper"),
    (["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "model.units=64,128"], "SlurmLauncher", "BasicSweeper"),
    (["hparams_search=optuna", "hparams_search.n_trials=5", "hydra.sweep.dir=multirun/search"], "BasicLauncher",
     "OptunaSweeper"),
])
def test_the_parents_command_re_runs_the_same_sweep(overrides, launcher, sweeper, tmp_path):
    config = composed_sweep(overrides)
    tags = launch.sweep_tags(config, str(tmp_path))
    hydra_own = [o for o in overrides if o.startswith("hydra")]
    assert tags["sweep.hydra_overrides"] == " ".join(hydra_own)
    assert tags["command"] == "python -m tfx_hydra -m " + " ".join(hydra_own + [o for o in overrides
                                                                               if o not in hydra_own])
    again = composed_sweep(shlex.split(tags["command"])[4:])  # after `python -m tfx_hydra -m`
    assert again.hydra.launcher._target_.endswith(launcher) and again.hydra.sweeper._target_.endswith(sweeper)
    unresolved = [OmegaConf.to_container(c, resolve=False) for c in (again, config)]  # ${now:} differs
    for part in ("launcher", "sweeper"):
        assert unresolved[0]["hydra"][part] == unresolved[1]["hydra"][part]
    assert unresolved[0]["model"] == unresolved[1]["model"] and unresolved[0]["optimizer"] == unresolved[1]["optimizer"]


def test_the_slurm_launcher_is_refused_only_where_there_is_no_srun(tmp_path, monkeypatch):
    slurm = composed_sweep(["hydra/launcher=slurm", "model.units=64,128"])
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun on it
    with pytest.raises(ConfigError, match=r"hydra/launcher=slurm submits every job to Slurm, but this machine has "
                                          r"no Slurm"):
        launch.require_launcher_runs_here(slurm)
    launch.require_launcher_runs_here(composed_sweep(["hydra/launcher=parallel", "model.units=64,128"]))
    srun = tmp_path / "srun"  # a login node's srun
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    launch.require_launcher_runs_here(slurm)


def test_the_objective_is_the_configured_metric():
    metrics = {"val_accuracy": 0.9, "test_accuracy": 0.8}
    assert objective(metrics, SweepConfig(metric="test_accuracy")) == 0.8
    with pytest.raises(ConfigError, match=r"sweep.metric=val_auc is not a metric this run produced.\n"
                                          r"  Fix: one of: test_accuracy, val_accuracy"):
        objective(metrics, SweepConfig(metric="val_auc"))
