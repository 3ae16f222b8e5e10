"""`mlflow ui` started in the launch directory serves the run: params, per-epoch metrics, tags, artifacts.

Starts a real MLflow UI server on 127.0.0.1 (it takes ~20 s to come up here), asks its REST API what
the browser would show, and stops it by its process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import QUICK, cli_env, free_ports, run_cli, wait_for_http

pytestmark = pytest.mark.slow


def get(base: str, endpoint: str, **params) -> dict:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    with urllib.request.urlopen(f"{base}{endpoint}?{query}", timeout=10) as response:
        return json.loads(response.read())


def post(base: str, endpoint: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base}{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def ui_server(tmp_path):
    done = run_cli(QUICK, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (port,) = free_ports(1)
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "ui", "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path,
                              env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/health", server, timeout=90, what="mlflow ui")
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_bare_mlflow_ui_in_the_launch_dir_shows_the_run(ui_server):
    base = ui_server
    experiment = get(base, "/api/2.0/mlflow/experiments/get-by-name", experiment_name="tfx_hydra")["experiment"]
    (run,) = post(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
    run_id = run["info"]["run_id"]
    assert run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert params["trainer.epochs"] == "2" and params["model.units"] == "128"
    assert tags["hydra.overrides"] == " ".join(QUICK) and tags["env.tensorflow"].startswith("2.")
    history = get(base, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key="val_accuracy")["metrics"]
    assert [m["step"] for m in history] == [0, 1]
    listed = {f["path"] for f in get(base, "/api/2.0/mlflow/artifacts/list", run_id=run_id)["files"]}
    assert {".hydra", "config_resolved.yaml", "environment", "export"} <= listed
    exported = {f["path"] for f in get(base, "/api/2.0/mlflow/artifacts/list", run_id=run_id,
                                        path="export/mlp/1")["files"]}
    assert "export/mlp/1/saved_model.pb" in exported
    with urllib.request.urlopen(f"{base}/", timeout=10) as page:  # the UI itself is served
        assert b"MLflow" in page.read()
