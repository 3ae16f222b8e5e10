"""hparams_search=optuna end to end: real Hydra multiruns of real (tiny) Keras trials, a real
Optuna study in SQLite, a journal file or PostgreSQL, and a real MLflow store or server.

The space always holds a learning rate that cannot learn in one epoch (1e-5) beside ones that
can, so the seeded pruner has trials to prune; which trials it prunes is the study's business,
what a pruned trial looks like (in Optuna, in MLflow, in the sweep table) is checked on every one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import cli_env, free_ports, mlflow_client, run_cli, wait_for_http

pytestmark = pytest.mark.slow

TINY = ["trainer.epochs=3", "data.limit=300", "export=none", "export.mlflow_model=false",
        "trainer.backup=false", "trainer.tensorboard=false"]
SPACE = ["optimizer.learning_rate=choice(0.00001,0.003,0.01)", "model.units=choice(16,32)"]  # + the preset's
PRUNE_EARLY = ["hparams_search.pruner_args={n_startup_trials:1,n_warmup_steps:0}"]
FAST_HEARTBEAT = ["hparams_search.heartbeat_interval=1", "hparams_search.grace_period=4"]


def search(n_trials: int, *extra: str) -> list[str]:
    pruning = [] if "hparams_search.pruner=none" in extra else PRUNE_EARLY
    return ["hparams_search=optuna", f"hparams_search.n_trials={n_trials}", *TINY, *SPACE, *pruning,
            *FAST_HEARTBEAT, *extra]


def study_of(launch: Path, name: str = "mlp-digits") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{launch / 'optuna.db'}")


def parent_and_children(launch: Path):
    client = mlflow_client(launch)
    runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [p.info.run_name for p in parents]
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags),
                      key=lambda r: int(r.data.tags["optuna.trial"]))
    return client, parents[0], children


def assert_pruned_trials_look_pruned(study, client, children, epochs: int = 3) -> int:
    """Every PRUNED trial: told PRUNED (not FAIL), its MLflow run FINISHED with the epochs it trained,
    tagged PRUNED, no objective, nothing exported. Returns how many there were."""
    by_trial = {int(c.data.tags["optuna.trial"]): c for c in children}
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    for trial in pruned:
        run = by_trial[trial.number]
        trained = int(run.data.tags["epochs_trained"])
        assert run.info.status == "FINISHED" and run.data.tags["optuna.state"] == "PRUNED"
        assert trained < epochs and trained == len(trial.intermediate_values)
        assert len(client.get_metric_history(run.info.run_id, "val_accuracy")) == trained
        assert "objective" not in run.data.metrics and "test_accuracy" not in run.data.metrics
        assert not [a for a in client.list_artifacts(run.info.run_id) if a.path in ("export", "model")]
    for trial in study.trials:
        if trial.state == TrialState.COMPLETE:
            run = by_trial[trial.number]
            assert run.data.tags["optuna.state"] == "COMPLETE" and run.data.tags["epochs_trained"] == str(epochs)
            assert run.data.metrics["objective"] == pytest.approx(trial.value)
            assert len(trial.intermediate_values) == epochs
    return len(pruned)


def test_a_search_prunes_survives_kill_9_and_resumes_in_its_study_and_parent(tmp_path):
    """Basic launcher: trials in the command's own process. The command is killed (-9) during a
    trial; the same command again finds that trial lost (no heartbeat), runs its parameters again,
    and completes the study to its n_trials, under the same parent run."""
    command = [sys.executable, "-m", "tfx_hydra", "-m", *search(5, "export.mlflow_model=true",
                                                                  "export.register_as=digits_best")]
    first = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        victim = wait_for_running_trial(tmp_path, number=2, process=first, with_run=True)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    again = run_cli(search(5, "export.mlflow_model=true", "export.register_as=digits_best"),
                    cwd=tmp_path, multirun=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "study 'mlp-digits' (resumed)" in again.stdout, again.stdout[:3000]
    assert "2 of 5 trials finished, 1 running" in again.stdout
    assert "trial 2 lost its process" in again.stdout + again.stderr

    study = study_of(tmp_path)
    lost = study.trials[2]
    assert lost.state == TrialState.FAIL
    retry = [t for t in study.trials if t.user_attrs.get("tfx_hydra.retry_of") == 2]
    assert len(retry) == 1 and retry[0].params == victim.params  # the same parameters, once more
    counted = [t for t in study.trials if t.number != 2]
    assert len(counted) == 5 and {t.state for t in counted} <= {TrialState.COMPLETE, TrialState.PRUNED}

    client, parent, children = parent_and_children(tmp_path)
    assert {c.data.tags["optuna.trial"] for c in children} == {str(t.number) for t in study.trials}
    lost_run = next(c for c in children if c.data.tags["optuna.trial"] == "2")
    assert lost_run.info.status == "KILLED"  # closed by the next command: its process was gone
    assert_pruned_trials_look_pruned(study, client, children)
    assert parent.info.status == "FINISHED" and parent.data.tags["optuna.study"] == "mlp-digits"
    assert parent.data.tags["optuna.best_trial"] == str(study.best_trial.number)
    assert json.loads(parent.data.tags["optuna.best_params"]) == study.best_trial.params
    assert json.loads(parent.data.tags["optuna.states"]) == {
        s: sum(t.state.name == s for t in counted) for s in {t.state.name for t in counted}}
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"multirun.yaml", "optimization_results.yaml", "sweep_summary.txt"} <= artifacts
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "optuna")}
    assert {"optuna/optuna_optimization_history.png", "optuna/optuna_intermediate_values.png"} <= plots
    best_run = next(c for c in children if c.data.tags["optuna.trial"] == str(study.best_trial.number))
    assert parent.data.tags["sweep.registered_model"] == "digits_best/1"
    version = client.get_model_version("digits_best", "1")
    assert version.run_id == best_run.info.run_id  # the best trial's model, registered once
    assert not [c for c in children if "mlflow.registered_model" in c.data.tags]
    summary = (tmp_path / "multirun" / "mlp-digits" / "sweep_summary.txt").read_text()
    assert f"{len(children) - 1} finished" in summary and "1 killed" in summary


def wait_for_running_trial(launch: Path, number: int, process: subprocess.Popen, timeout: float = 240,
                           with_run: bool = False):
    """Trial `number` RUNNING in the study (`with_run`: and its job's MLflow run started)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.stdout.read()[-3000:]
        if (launch / "optuna.db").exists():
            try:
                trials = study_of(launch).get_trials(deepcopy=False)
            except KeyError:  # the study is being created
                trials = []
            if len(trials) > number and trials[number].state == TrialState.RUNNING and (
                    not with_run or trial_has_run(launch, number)):
                return trials[number]
        time.sleep(0.3)
    raise AssertionError(f"trial {number} never ran")


def trial_has_run(launch: Path, number: int) -> bool:
    client = mlflow_client(launch)
    experiment = client.get_experiment_by_name("tfx_hydra")
    return bool(experiment and client.search_runs([experiment.experiment_id],
                                                  filter_string=f"tags.`optuna.trial` = '{number}'"))


@pytest.mark.parametrize("launcher", ["parallel", "local_gpus"])
def test_pruning_and_resume_work_under_the_process_launchers(launcher, tmp_path):
    """joblib (hydra/launcher=parallel) and submitit_local: each trial in a process of its own, which
    opens the study and reports its epochs there. The idle time of a batch is measured."""
    workers = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"] if launcher == "parallel" else [
        "hydra/launcher=local_gpus", "hydra.launcher.gpus_per_node=0", "hydra.launcher.tasks_per_node=1"]
    first = run_cli([*workers, *search(4, "hparams_search.n_jobs=2")], cwd=tmp_path, multirun=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_cli([*workers, *search(5, "hparams_search.n_jobs=2")], cwd=tmp_path, multirun=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(resumed)" in again.stdout and "4 of 5 trials finished;" in again.stdout
    study = study_of(tmp_path)
    assert len(study.trials) == 5 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert study.trials[4].params not in [t.params for t in study.trials[:4]]  # the resumed sampler goes on
    client, parent, children = parent_and_children(tmp_path)
    assert len(children) == 5 and parent.info.status == "FINISHED"
    assert parent.data.tags["sweep.launcher"].endswith("JoblibLauncher" if launcher == "parallel" else
                                                       "LocalLauncher")
    pruned = assert_pruned_trials_look_pruned(study, client, children)
    assert pruned >= 1, [(t.number, t.state.name, t.params) for t in study.trials]
    assert "sweep.idle_worker_seconds" in parent.data.metrics
    assert all(c.data.params["paths.output_dir"].endswith(f"trial_{c.data.tags['optuna.trial']}") for c in children)


def test_two_commands_on_one_study_share_its_trials_and_its_parent(tmp_path):
    command = [sys.executable, "-m", "tfx_hydra", "-m", *search(6, "hparams_search.pruner=none")]
    first = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    wait_for_running_trial(tmp_path, number=0, process=first)  # the study and the parent exist: the second joins
    second = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs[1][-3000:]
    study = study_of(tmp_path)
    assert len(study.trials) == 6 and all(t.state == TrialState.COMPLETE for t in study.trials)
    client, parent, children = parent_and_children(tmp_path)  # one parent for both
    assert sorted(int(c.data.tags["optuna.trial"]) for c in children) == list(range(6))  # each trial ran once
    pids = {c.data.tags.get("process.pid") for c in children}
    assert len(pids) == 2, "both commands ran trials"


def test_a_team_search_on_postgresql_with_an_mlflow_server_and_the_dashboard(tmp_path):
    """One PostgreSQL holds the MLflow server's store and the Optuna study; a joblib-parallel search
    tracks to the server; optuna-dashboard reads the study over HTTP."""
    from tests.postgres import postgres_server

    mlflow_port, dashboard_port = free_ports(2)
    with postgres_server(("mlflow", "optuna")) as database:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", database + "mlflow",
             "--default-artifact-root", str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port",
             str(mlflow_port), "--workers", "1"],
            cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        dashboard = None
        try:
            wait_for_http(f"http://127.0.0.1:{mlflow_port}/health", server, timeout=180, what="mlflow server")
            done = run_cli(["hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
                            f"tracking.uri=http://127.0.0.1:{mlflow_port}",
                            # the password stays in the environment, as the README tells a team to keep it
                            *search(4, "hparams_search.n_jobs=2", "hparams_search.storage=${oc.env:TEAM_STUDIES}",
                                    "hparams_search.study_name=team")], cwd=tmp_path, multirun=True, timeout=600,
                           env={"TEAM_STUDIES": database + "optuna"})
            assert done.returncode == 0, done.stderr[-3000:]
            assert "tfx-secret-pw" not in done.stdout + done.stderr  # not on the terminal, not in a job's line
            assert "postgresql://***@127.0.0.1" in done.stdout

            study = optuna.load_study(study_name="team", storage=database + "optuna")
            assert len(study.trials) == 4
            assert {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
            from mlflow.tracking import MlflowClient

            client = MlflowClient(f"http://127.0.0.1:{mlflow_port}")
            runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
            children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
            parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
            assert len(children) == 4 and len(runs) == 5  # nothing lost, nothing twice
            for trial in study.trials:
                run = next(c for c in children if c.data.tags["optuna.trial"] == str(trial.number))
                for key, value in trial.params.items():
                    assert float(run.data.params[key]) == pytest.approx(float(value))
                history = client.get_metric_history(run.info.run_id, "val_accuracy")
                assert [round(m.value, 6) for m in history] == [round(v, 6) for v in
                                                                trial.intermediate_values.values()]
            assert_pruned_trials_look_pruned(study, client, children)
            assert "tfx-secret-pw" not in json.dumps([r.data.params | r.data.tags for r in runs])
            assert parent.data.tags["optuna.storage"].startswith("postgresql://***@127.0.0.1")

            dashboard = subprocess.Popen(
                [str(Path(sys.executable).parent / "optuna-dashboard"), database + "optuna", "--host", "127.0.0.1",
                 "--port", str(dashboard_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_http(f"http://127.0.0.1:{dashboard_port}/api/studies", dashboard, 60, "optuna-dashboard")
            studies = json.load(urllib.request.urlopen(f"http://127.0.0.1:{dashboard_port}/api/studies"))
            listed = next(s for s in studies["study_summaries"] if s["study_name"] == "team")
            detail = json.load(urllib.request.urlopen(
                f"http://127.0.0.1:{dashboard_port}/api/studies/{listed['study_id']}?after=0"))
            assert len(detail["trials"]) == 4
            assert {t["state"] for t in detail["trials"]} <= {"Complete", "Pruned"}
        finally:
            for process in (dashboard, server):
                if process is not None:
                    try:
                        os.killpg(process.pid, signal.SIGKILL) if process is server else process.kill()
                    except ProcessLookupError:
                        pass
                    process.wait(timeout=30)


def test_a_journal_file_holds_a_study_and_a_multi_objective_search_marks_its_pareto_front(tmp_path):
    done = run_cli(search(3, "hparams_search.pruner=none", "hparams_search.storage=studies/journal.log",
                          "sweep.metric=[val_accuracy,parameters]", "sweep.direction=[maximize,minimize]"),
                   cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="mlp-digits",
                              storage=JournalStorage(JournalFileBackend(str(tmp_path / "studies/journal.log"))))
    assert len(study.trials) == 3 and all(len(t.values) == 2 for t in study.trials)
    client, parent, children = parent_and_children(tmp_path)
    pareto = {str(t.number) for t in study.best_trials}
    assert set(parent.data.tags["optuna.pareto_trials"].split(",")) == pareto
    assert {c.data.tags["optuna.trial"] for c in children if c.data.tags.get("optuna.pareto") == "true"} == pareto
    for trial in study.trials:
        run = next(c for c in children if c.data.tags["optuna.trial"] == str(trial.number))
        assert trial.values == pytest.approx([run.data.metrics["val_accuracy"], run.data.metrics["parameters"]])
