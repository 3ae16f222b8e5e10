"""The logged MLflow model serves: `mlflow models serve -m runs:/<id>/model` answers /invocations with the
model's own predictions, and export.register_as adds a registry version. A real server on 127.0.0.1,
stopped by its process group."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import QUICK, REPO, cli_env, mlflow_client, mlflow_runs, serve_on_a_free_port, stop_server
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow


def readme_curl_body(holding: str) -> str:
    """The -d body of the tracking page's `curl .../invocations` line whose body holds `holding`."""
    lines = (REPO / "docs" / "reference" / "tracking.md").read_text().splitlines()
    (line,) = [line for line in lines if "curl -s" in line and "/invocations" in line and holding in line]
    return line.split(" -d '", 1)[1].rstrip("'")


def test_mlflow_models_serve_answers_like_the_trained_model(tmp_path):
    done = run_cli_in_process([*QUICK, "export.mlflow_model=true", "export.register_as=digits_mlp"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["mlflow.model_uri"] == f"runs:/{run.info.run_id}/model"
    assert run.data.tags["mlflow.registered_model"] == "digits_mlp/1"
    versions = mlflow_client(tmp_path).search_model_versions("name='digits_mlp'")
    assert [(str(v.version), v.run_id) for v in versions] == [("1", run.info.run_id)]

    env = cli_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]  # uvicorn, for --env-manager local
    server, port = serve_on_a_free_port(
        lambda port: [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
                      f"runs:/{run.info.run_id}/model", "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        tmp_path, env, tmp_path / "serve.log", "mlflow models serve")
    base = f"http://127.0.0.1:{port}"
    try:
        inputs = np.random.default_rng(0).uniform(0, 16, size=(4, 8, 8)).astype("float32")  # raw digits: 0..16
        request = urllib.request.Request(f"{base}/invocations", data=json.dumps({"inputs": inputs.tolist()}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            served = json.loads(response.read())["predictions"]
        readme_body = readme_curl_body("[[[0, 0, 5, 13")  # the tracking page's curl example, as written
        request = urllib.request.Request(f"{base}/invocations", data=readme_body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            answered = json.loads(response.read())["predictions"]
        probabilities = answered["probabilities"]
        assert np.asarray(probabilities).shape == (1, 10) and abs(sum(probabilities[0]) - 1) < 1e-4
        assert answered["class"] == [str(answered["class_index"][0])]  # the digits' names are their numbers, as text
    finally:
        stop_server(server)
    # The MLflow model takes what the SavedModel takes: the digits' raw pixels (0..16)
    saved_model = tf.saved_model.load(run.data.tags["export.savedmodel.path"])
    expected = saved_model.signatures["serving_default"](inputs=tf.constant(inputs))
    np.testing.assert_allclose(served["probabilities"], expected["probabilities"].numpy(), atol=1e-5)
    assert served["class"] == expected["class"].numpy().astype(str).tolist()
