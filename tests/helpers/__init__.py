"""Helpers the tests share: tiny real data, the CLI in a subprocess, reading the MLflow store. Beside it in
this package: fakes.py (the tracker double), planted.py (planted faults), postgres.py, search.py, training.py,
terminal.py (a command on a pseudo-terminal).

Nothing here reaches the internet: MNIST-shaped data is written by the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[2]

# Small, fast settings for CLI runs: a few hundred digits, 2 epochs, no MLflow model (~4 s per run;
# the tests about it ask for it).
QUICK = ["trainer.epochs=2", "data.limit=300", "trainer.batch_size=32", "export.mlflow_model=false"]


def write_mnist_npz(path: Path, train: int = 400, test: int = 100, seed: int = 0) -> Path:
    """An MNIST-shaped .npz (28x28 uint8 images, labels 0-9) that a simple model can learn."""
    rng = np.random.default_rng(seed)
    def make(n):
        y = rng.integers(0, 10, size=n).astype("uint8")
        x = rng.integers(0, 40, size=(n, 28, 28)).astype("uint8")
        for i, label in enumerate(y):  # a bright bar whose row is the label: learnable
            x[i, 2 + 2 * label: 4 + 2 * label, 4:24] = 255
        return x, y
    x_train, y_train = make(train)
    x_test, y_test = make(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return env


def tracking_server_env() -> dict[str, str]:
    """cli_env() for an `mlflow server` the tests only log to: no server-side jobs, so MLflow 3 does not start
    three job-runner processes (huey consumers) beside it, each importing MLflow on the tests' two cores.
    Not for a server a browser drives: without its jobs, the UI lays an overlay over the page that takes
    the clicks (tests/e2e/test_mlflow_browser.py)."""
    return cli_env() | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def run_cli(args: list[str], cwd: Path, timeout: float = 300, multirun: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m tfx_hydra ARGS` in `cwd` (`env`: variables to set on top of cli_env()); output captured as text."""
    command = [sys.executable, "-m", "tfx_hydra", *(["-m"] if multirun else []), *args]
    return subprocess.run(command, cwd=cwd, env=cli_env() | (env or {}), capture_output=True, text=True,
                          timeout=timeout)


def mlflow_client(launch_dir: Path | str):
    """An MLflow client on the default store of `launch_dir` (<launch dir>/mlflow.db): the one way the
    tests open a local store."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{Path(launch_dir) / 'mlflow.db'}")


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact path of a run, folders and files, walked from `path` (None: the top)."""
    found = set()
    for item in client.list_artifacts(run_id, path):
        found.add(item.path)
        if item.is_dir:
            found |= artifact_paths(client, run_id, item.path)
    return found


def mlflow_runs(launch_dir: Path | str, experiment: str | None = None) -> list:
    """Every run of `experiment` (None: of every experiment tfx_hydra made there: `tfx_hydra`, a project's) in the
    default store of `launch_dir`, newest first ([] when there is no store)."""
    if not (Path(launch_dir) / "mlflow.db").exists():
        return []
    client = mlflow_client(launch_dir)
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        return client.search_runs([found.experiment_id]) if found else []
    ours = [e.experiment_id for e in client.search_experiments() if e.name != "Default"]
    return client.search_runs(ours, order_by=["attributes.start_time DESC"]) if ours else []


def sweep_parent_and_children(launch: Path | str):
    """A `-m` sweep's runs in `launch`'s store: its parent, and its children by job number, each nested under it."""
    runs = mlflow_runs(launch)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = sorted((r for r in runs if r is not parent), key=lambda r: int(r.data.tags["sweep.job_num"]))
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    return parent, children


def required_or_skipped(why: str, variable: str, what: str) -> None:
    """A test whose engine is missing here (`why`): skipped, or failed where CI set `variable`=1 after installing it."""
    if os.environ.get(variable) == "1":
        pytest.fail(f"{what} is required here ({variable}=1) but {why}")
    pytest.skip(why)


def compose(overrides: list[str] = (), launch_dir: Path | str = "/tmp") -> DictConfig:
    """The real config tree composed as the CLI composes it (tfx_hydra.settings.compose.compose), with the
    paths Hydra would fill in pointed at `launch_dir`."""
    from tfx_hydra.settings.compose import compose as compose_config

    paths = [f"paths.launch_dir={launch_dir}", f"paths.output_dir={Path(launch_dir) / 'out'}"]
    return compose_config([*paths, *overrides])


def free_ports(count: int = 1) -> list[int]:
    """Ports on 127.0.0.1 that nothing listens on right now."""
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def wait_for_http(url: str, process: subprocess.Popen, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll `url` until it answers; fail at once if `process` (the server) exits, or after `timeout` s.
    `log`: the file the server writes to, whose end the failure shows."""
    import time
    import urllib.request

    deadline = time.time() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            said = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            assert process.poll() is None, f"{what} exited ({process.returncode}):\n{said}"
            assert time.time() < deadline, f"{what} did not come up in {timeout:.0f} s"
            time.sleep(1)


def serve_on_a_free_port(command: Callable[[int], list[str]], cwd: Path, env: dict[str, str], log: Path, what: str,
                         timeout: float = 120, attempts: int = 3) -> tuple[subprocess.Popen, int]:
    """Start the server `command(port)` makes on a free port and wait until it answers; another test's server
    may take the port between our check and its bind (a tracking server restarted on its old port), so a
    server that exits saying the address is in use is started again on another port."""
    for attempt in range(attempts):
        (port,) = free_ports(1)
        with open(log, "w") as output:
            server = subprocess.Popen(command(port), cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/ping", server, timeout=timeout, what=what, log=log)
            return server, port
        except AssertionError:
            if server.poll() is None or "address already in use" not in log.read_text().lower() \
                    or attempt == attempts - 1:
                stop_server(server)
                raise
    raise AssertionError("unreachable")


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (it and its workers), then wait for it."""
    import contextlib
    import signal

    with contextlib.suppress(ProcessLookupError):  # the server (and any child) may be gone already
        os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


def wait_for_backup_of_epoch(backup: Path, epoch: int, timeout: float = 120) -> None:
    """Until BackupAndRestore has completely written `epoch` (its metadata follows the weights)."""
    import json
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if json.loads((backup / "training_metadata.json").read_text()).get("epoch", 0) >= epoch:
                return
        except (OSError, ValueError):  # not there yet, or being written
            pass
        time.sleep(0.05)
    raise AssertionError(f"no backup of epoch {epoch} in {backup} after {timeout} s")


def save_tiny_hub_model(path, input_shape=(8, 8), units=16, seed=0) -> str:
    """A SavedModel in TF Hub's Reusable SavedModel form, like a feature-vector model:
    `__call__(inputs, training)` returning (batch, units) features, `.variables` and
    `.trainable_variables`, and a non-trainable batch statistic that only a training call
    updates (like batch norm's moving mean)."""
    import tensorflow as tf

    size = int(np.prod(input_shape))
    rng = np.random.default_rng(seed)
    kernel = tf.Variable(rng.normal(0, 0.3, (size, units)).astype("float32"), name="dense/kernel")
    bias = tf.Variable(np.zeros(units, "float32"), name="dense/bias")
    moving_mean = tf.Variable(np.zeros(units, "float32"), trainable=False, name="bn/moving_mean")

    @tf.function
    def call(inputs, training=False):
        features = tf.matmul(tf.reshape(inputs, (-1, size)), kernel) + bias
        if training:
            moving_mean.assign(0.9 * moving_mean + 0.1 * tf.reduce_mean(features, axis=0))
        return tf.nn.relu(features - moving_mean)

    spec = tf.TensorSpec((None, *input_shape), tf.float32)
    for training in (True, False):
        call.get_concrete_function(spec, training=training)
    root = tf.train.Checkpoint()
    root.__call__ = call
    root.kernel, root.moving_mean = kernel, moving_mean
    root.variables = [kernel, bias, moving_mean]
    root.trainable_variables = [kernel, bias]
    tf.saved_model.save(root, str(path))
    return str(path)


def tensorboard_runs(launch_dir: Path) -> list[str]:
    """The run names TensorBoard shows for the MLflow UI page's one command in `launch_dir`
    (`tensorboard --logdir_spec name:folder,...`), through TensorBoard's own multiplexer."""
    import re

    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    page = (REPO / "docs" / "how-to" / "mlflow-ui.md").read_text()
    spec = re.search(r"tensorboard --logdir_spec (\S+)", page).group(1)
    multiplexer = EventMultiplexer()
    for entry in spec.split(","):
        name, folder = entry.split(":", 1)
        multiplexer.AddRunsFromDirectory(str(Path(launch_dir) / folder), name)
    return sorted(multiplexer.Runs())


TEXT_SEQUENCE, TEXT_VOCABULARY = 16, 101


def save_tiny_text_hub_models(folder: Path, units: int = 12, seed: int = 0) -> tuple[str, str]:
    """A BERT-shaped pair of SavedModels in TF Hub's form, made of plain TensorFlow ops: a preprocessing
    model (strings -> input_word_ids, input_mask, input_type_ids: lower-cased words hashed into a small
    vocabulary, padded to 16) and an encoder (those -> pooled_output, sequence_output) with `.variables`
    and `.trainable_variables`, as the real small BERTs have. Returns (preprocessor, encoder) folders."""
    import tensorflow as tf

    class Preprocessor(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts):
            words = tf.strings.split(tf.strings.lower(texts))
            ids = tf.strings.to_hash_bucket_fast(words, TEXT_VOCABULARY - 1) + 1  # 0 is padding
            ids = tf.cast(ids.to_tensor(default_value=0, shape=[None, TEXT_SEQUENCE]), tf.int32)
            return {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
                    "input_type_ids": tf.zeros_like(ids)}

    preprocessor = str(folder / "preprocess")
    tf.saved_model.save(Preprocessor(), preprocessor)

    rng = np.random.default_rng(seed)
    embedding = tf.Variable(rng.normal(0, 0.5, (TEXT_VOCABULARY, units)).astype("float32"), name="embeddings")
    kernel = tf.Variable(rng.normal(0, 0.3, (units, units)).astype("float32"), name="pooler/kernel")
    bias = tf.Variable(np.zeros(units, "float32"), name="pooler/bias")

    @tf.function
    def encode(inputs, training=False):
        mask = tf.cast(inputs["input_mask"], tf.float32)[..., None]
        sequence = tf.gather(embedding, inputs["input_word_ids"]) * mask
        mean = tf.reduce_sum(sequence, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        return {"pooled_output": tf.tanh(tf.matmul(mean, kernel) + bias), "sequence_output": sequence}

    spec = {name: tf.TensorSpec([None, TEXT_SEQUENCE], tf.int32)
            for name in ("input_word_ids", "input_mask", "input_type_ids")}
    for training in (True, False):
        encode.get_concrete_function(spec, training=training)
    root = tf.train.Checkpoint()
    root.__call__ = encode
    root.embedding, root.kernel, root.bias = embedding, kernel, bias
    root.variables = [embedding, kernel, bias]
    root.trainable_variables = [embedding, kernel, bias]
    encoder = str(folder / "encoder")
    tf.saved_model.save(root, encoder)
    return preprocessor, encoder


def write_text_folder(folder: Path, per_class: int = 40, seed: int = 0) -> Path:
    """folder/<neg|pos>/<n>.txt: short reviews whose words say their class (learnable by a bag of words)."""
    import random

    rng = random.Random(seed)
    words = {"neg": "awful terrible boring dull poor sad".split(), "pos": "great superb lovely fine happy warm".split()}
    filler = "the film was and it a plot acting story really".split()
    for name, own in words.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            text = " ".join(rng.choice(filler + own + own) for _ in range(12))
            (folder / name / f"{i:03d}.txt").write_text(text.capitalize() + ".\n")
    return folder


def page_commands(page: Path) -> list[str]:
    """The commands of a documentation page's ```bash blocks, in order, each without its trailing comment: what a
    test of a tutorial runs, so the page and the test cannot drift apart."""
    import re

    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]
