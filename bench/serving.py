"""Serving latency per export format: one run's SavedModel (TensorFlow), TFLite file (LiteRT), ONNX model
(ONNX Runtime) and .keras model (Keras), loaded side by side in this process, each asked the same requests:
p50 and p99 latency at batch 1, and throughput at batch 32; plus the run's MLflow model behind
`mlflow models serve` on 127.0.0.1, p50/p99 over HTTP at batch 1.

    python bench/serving.py                         # the default MLP on the digits, 1000 requests per measure
    python bench/serving.py --quick                 # 100 requests, no MLflow server: checks the script
    python bench/serving.py model=cnn data=mnist    # extra overrides go to the run whose exports are measured

Every format gets the same requests (random values of the input's shape: the values do not change the
work). Latency is wall time around one call, after 20 warm-up calls; nothing else runs in the process
meanwhile.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness import bench_parser, write_json

EXPORTS = "export=[savedmodel,tflite,onnx,keras]"


def parse_args(argv):
    parser = bench_parser(__doc__, train=0, epochs=2, quick="100 requests per measure, no MLflow server")
    parser.add_argument("--requests", type=int, default=1000, help="timed calls per measure at batch 1")
    parser.add_argument("--no-server", action="store_true", help="skip the MLflow model server")
    parser.add_argument("overrides", nargs="*", help="overrides for the run whose exports are measured")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.no_server = 100, True
    return args


def train_and_export(launch: Path, epochs: int, overrides: list[str]) -> dict:
    """One tfx_hydra run writing every export; its MLflow tags (where each export is)."""
    from mlflow.tracking import MlflowClient

    command = [sys.executable, "-m", "tfx_hydra", EXPORTS, f"trainer.epochs={epochs}", "trainer.tensorboard=false",
               *overrides]
    done = subprocess.run(command, cwd=launch, capture_output=True, text=True)
    if done.returncode:
        sys.exit("the run failed:\n" + done.stderr[-3000:])
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])
    return {"run_id": run.info.run_id, **run.data.tags}


def predictors(tags: dict):
    """format -> call(batch): each export loaded as its runtime loads it."""
    import keras
    import numpy as np
    import onnxruntime
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from tfx_hydra.export.keras import register_keras_classes

    serve = tf.saved_model.load(tags["export.savedmodel.path"]).signatures["serving_default"]
    session = onnxruntime.InferenceSession(tags["export.onnx.path"], providers=["CPUExecutionProvider"])
    onnx_input = session.get_inputs()[0].name
    register_keras_classes()
    model = keras.models.load_model(tags["export.keras.path"], compile=False)
    interpreters: dict[int, Interpreter] = {}

    def tflite(batch):
        interpreter = interpreters.get(len(batch))
        if interpreter is None:
            interpreter = interpreters[len(batch)] = Interpreter(model_path=tags["export.tflite.path"])
            detail = interpreter.get_input_details()[0]
            interpreter.resize_tensor_input(detail["index"], list(batch.shape))
            interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], batch)
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

    return {
        "SavedModel (TensorFlow)": lambda batch: serve(inputs=tf.constant(batch)),
        "TFLite (LiteRT)": tflite,
        "ONNX (ONNX Runtime)": lambda batch: session.run(None, {onnx_input: batch}),
        ".keras (Keras, eager call)": lambda batch: np.asarray(model(batch, training=False)),
    }


def latencies(call, batch, count: int) -> list[float]:
    for _ in range(20):
        call(batch)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call(batch)
        times.append(time.perf_counter() - started)
    return times


def summary(times: list[float], batch_size: int) -> dict:
    ordered = sorted(times)
    return {"p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
            "examples_per_sec": batch_size * len(times) / sum(times)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def mlflow_server_latency(launch: Path, run_id: str, batch, count: int) -> dict:
    """`mlflow models serve` of the run's MLflow model: p50/p99 of POST /invocations at batch 1."""
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{launch}/mlflow.db",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    server = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
                               f"runs:/{run_id}/model", "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
                              cwd=launch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("mlflow models serve did not come up") from None
                time.sleep(0.5)
        body = json.dumps({"inputs": batch.tolist()}).encode()

        def post(_batch):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request) as response:
                response.read()
        return summary(latencies(post, batch, count), len(batch))
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="tfx_hydra-bench-serving-") as folder:
        launch = Path(folder)
        tags = train_and_export(launch, args.epochs, args.overrides)
        from tfx_hydra.export.requests import signature_of

        shape = signature_of(tags["export.savedmodel.path"]).inputs["inputs"].shape[1:]
        rng = np.random.default_rng(0)  # the values do not change the work: the same requests for every format
        batch = {size: rng.uniform(0, 1, size=(size, *shape)).astype("float32") for size in (1, 32)}
        results = {}
        for name, call in predictors(tags).items():
            one = summary(latencies(call, batch[1], args.requests), 1)
            many = summary(latencies(call, batch[32], max(args.requests // 4, 10)), 32)
            results[name] = {"batch1_p50_ms": one["p50_ms"], "batch1_p99_ms": one["p99_ms"],
                             "batch32_examples_per_sec": many["examples_per_sec"]}
            print(f"{name:28s} batch 1: p50 {one['p50_ms']:7.3f} ms  p99 {one['p99_ms']:7.3f} ms   "
                  f"batch 32: {many['examples_per_sec']:12,.0f} examples/s", flush=True)
        if not args.no_server:
            served = mlflow_server_latency(launch, tags["run_id"], batch[1], args.requests)
            results["MLflow model server (HTTP)"] = {"batch1_p50_ms": served["p50_ms"],
                                                     "batch1_p99_ms": served["p99_ms"]}
            print(f"{'MLflow model server (HTTP)':28s} batch 1: p50 {served['p50_ms']:7.3f} ms  "
                  f"p99 {served['p99_ms']:7.3f} ms", flush=True)
    fastest = min((r["batch1_p50_ms"], name) for name, r in results.items())[1]
    print(f"fastest at batch 1: {fastest}")
    report = {"requests": args.requests, "overrides": args.overrides, "results": results, "fastest_batch1": fastest}
    write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
