"""A real TensorFlow Serving, where there is one: `tensorflow_model_server` on our models.config (two versions,
labelled stable and canary), asked with the REST and gRPC requests tfx_hydra.export.requests builds, answers
what those helpers answer offline. The binary is not on PyPI or in Debian (Docker images and Google's apt
repository only), so without it on PATH the test is skipped with that reason; the README shows the Docker
command. Everything short of the binary (the config's proto, the requests, the warm-up records) is tested in
tests/unit/test_export.py and tests/e2e/test_tasks.py."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.slow

SERVER = "tensorflow_model_server"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.skipif(shutil.which(SERVER) is None, reason=f"{SERVER} is not on PATH (TF Serving ships as Docker images "
                    "and from Google's apt repository, not from PyPI or Debian)")
def test_tf_serving_serves_our_models_config_by_label_over_rest_and_grpc(tmp_path):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    from tfx_hydra.data import digits
    from tfx_hydra.export import SavedModelExport
    from tfx_hydra.export.requests import answer_grpc, answer_rest, predict_request, rest_body, signature_of
    from tfx_hydra.models import mlp

    data = digits([8, 8], 10, batch_size=32, seed=0, limit=200)
    model = mlp(name="digits_mlp", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(data.train, epochs=1, verbose=0)
    stable = SavedModelExport(export_dir=str(tmp_path), model_name="digits_mlp")(model, data).path
    model.fit(data.train, epochs=1, verbose=0)
    canary = SavedModelExport(export_dir=str(tmp_path), model_name="digits_mlp", version_label="canary")(model,
                                                                                                       data).path
    rest, grpc_port = free_port(), free_port()
    server = subprocess.Popen([SERVER, f"--port={grpc_port}", f"--rest_api_port={rest}",
                               f"--model_config_file={tmp_path / 'models.config'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{rest}/v1/models/digits_mlp"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base, timeout=5) as response:
                    states = [v["state"] for v in json.loads(response.read())["model_version_status"]]
                if states and all(state == "AVAILABLE" for state in states) and len(states) == 2:
                    break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "TF Serving did not load both versions"
            time.sleep(0.5)
        examples = np.random.default_rng(0).uniform(0, 16, (3, 8, 8)).astype("float32")
        signature = signature_of(stable)
        for label, path in (("stable", stable), ("canary", canary)):
            for columnar in (False, True):
                body = rest_body(signature, examples, columnar=columnar)
                served = post(f"{base}/labels/{label}:predict", body)
                offline = answer_rest(path, body)
                key = "outputs" if columnar else "predictions"
                if columnar:
                    np.testing.assert_allclose(served[key]["probabilities"], offline[key]["probabilities"], atol=1e-5)
                else:
                    np.testing.assert_allclose([p["probabilities"] for p in served[key]],
                                               [p["probabilities"] for p in offline[key]], atol=1e-5)
            request = predict_request(signature, examples, "digits_mlp", version_label=label)
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
            np.testing.assert_allclose(tf.make_ndarray(response.outputs["probabilities"]),
                                       tf.make_ndarray(answer_grpc(path, request).outputs["probabilities"]), atol=1e-5)
    finally:
        server.terminate()
        server.wait(timeout=30)
