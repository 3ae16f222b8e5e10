"""A team's search end to end: one PostgreSQL holds an MLflow server's store and the Optuna study,
a joblib-parallel search tracks to the server, optuna-dashboard reads the study over HTTP.
(A file of its own: the suite's two workers take a file each at a time.)
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

from tests.helpers import free_ports, run_cli, tracking_server_env, wait_for_http
from tests.helpers.search import assert_pruned_trials_look_pruned, search

pytestmark = pytest.mark.slow


def test_a_team_search_on_postgresql_with_an_mlflow_server_and_the_dashboard(tmp_path):
    """One PostgreSQL holds the MLflow server's store and the Optuna study; a joblib-parallel search
    tracks to the server; optuna-dashboard reads the study over HTTP."""
    from tests.helpers.postgres import postgres_server

    mlflow_port, dashboard_port = free_ports(2)
    with postgres_server(("mlflow", "optuna")) as database:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", database + "mlflow",
             "--default-artifact-root", str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port",
             str(mlflow_port), "--workers", "1"],
            cwd=tmp_path, env=tracking_server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        dashboard = None
        try:
            wait_for_http(f"http://127.0.0.1:{mlflow_port}/health", server, timeout=180, what="mlflow server")
            done = run_cli(["hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
                            f"tracking.uri=http://127.0.0.1:{mlflow_port}",
                            # the password stays in the environment, as the README tells a team to keep it
                            *search(2, "hparams_search.n_jobs=2", "hparams_search.storage=${oc.env:TEAM_STUDIES}",
                                    "hparams_search.study_name=team")], cwd=tmp_path, multirun=True, timeout=600,
                           env={"TEAM_STUDIES": database + "optuna"})
            assert done.returncode == 0, done.stderr[-3000:]
            assert "tfx-secret-pw" not in done.stdout + done.stderr  # not on the terminal, not in a job's line
            assert "postgresql://***@127.0.0.1" in done.stdout

            study = optuna.load_study(study_name="team", storage=database + "optuna")
            assert len(study.trials) == 2
            assert {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
            from mlflow.tracking import MlflowClient

            client = MlflowClient(f"http://127.0.0.1:{mlflow_port}")
            runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
            children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
            parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
            assert len(children) == 2 and len(runs) == 3  # nothing lost, nothing twice
            for trial in study.trials:
                run = next(c for c in children if c.data.tags["optuna.trial"] == str(trial.number))
                for key, value in trial.params.items():
                    assert float(run.data.params[key]) == pytest.approx(float(value))
                history = client.get_metric_history(run.info.run_id, "epoch/val_accuracy")
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
            assert len(detail["trials"]) == 2
            assert {t["state"] for t in detail["trials"]} <= {"Complete", "Pruned"}
        finally:
            for process in (dashboard, server):
                if process is not None:
                    try:
                        os.killpg(process.pid, signal.SIGKILL) if process is server else process.kill()
                    except ProcessLookupError:
                        pass
                    process.wait(timeout=30)
