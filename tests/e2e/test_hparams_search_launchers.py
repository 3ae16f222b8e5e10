"""hparams_search=optuna end to end under the process launchers (joblib, submitit_local), and a
team's setup: PostgreSQL for an MLflow server's store and the study, optuna-dashboard over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import cli_env, free_ports, run_cli, wait_for_http
from tests.search import assert_pruned_trials_look_pruned, parent_and_children, search, study_of

pytestmark = pytest.mark.slow


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
