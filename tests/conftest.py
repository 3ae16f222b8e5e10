"""Fixtures shared by unit and end-to-end tests (helpers live in tests/helpers.py)."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from tests.helpers import write_mnist_npz

# tests.helpers.global_state: what a test leaves in the process's globals (MLflow's URIs, the environment) is put
# back; pytester: a test of that plugin runs two tests with and without it
pytest_plugins = ["tests.helpers.global_state", "pytester"]


def pytest_configure(config):
    """A user cache and state folder of the tests' own (tfx_hydra keeps TFRecord counts in the one,
    record_index.py, and the stores runs were recorded in in the other, tracking/known_stores.py): the suite
    leaves nothing in the home folder, and no test finds what an earlier run of the suite kept."""
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tfx_hydra-tests-cache-")
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tfx_hydra-tests-state-")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """The test modules import TensorFlow, Keras, MLflow and Hydra: with the garbage collector paused
    while they load, and their objects then frozen out of its scans, as tfx_hydra does for its own
    process (tfx_hydra.process.long_lived). Without it every full collection of a test process,
    Keras' clear_session after each in-process run among them, scans ~500k objects that never die."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


@pytest.fixture(scope="session", autouse=True)
def two_logical_cpus():
    """Split the CPU into 2 logical devices before TensorFlow initialises, so MirroredStrategy
    has 2 replicas on a machine without GPUs (ARCHITECTURE.md: multi-device behaviour is tested on CPU)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    return tf.config.list_logical_devices("CPU")


@pytest.fixture
def mnist_npz(tmp_path) -> Path:
    return write_mnist_npz(tmp_path / "mnist.npz")


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """An empty MLflow store (SQLite), created and migrated once per test process: creating one runs
    MLflow's ~50 schema migrations, about 1.5 s of CPU and a few seconds of disk syncs a store, paid once
    here instead of by every test that runs a command."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("migrated_store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(autouse=True)
def store_in_the_launch_dir(request, tmp_path, migrated_store):
    """Every test's tmp_path holds a copy of the migrated, empty store at the default place
    (<launch dir>/mlflow.db), as a user's launch dir does from their second run on. A test of what
    happens without one (a fresh store's first use, a command that must not create one) is marked
    `fresh_store` and gets an empty tmp_path."""
    if "fresh_store" not in request.keywords:
        shutil.copyfile(migrated_store, tmp_path / "mlflow.db")


@pytest.fixture(autouse=True)
def ctrl_c_as_a_terminal_sends_it():
    """Every test starts with Python's own SIGINT handler, as a command started from a terminal has it,
    however the suite itself was started. A job started in the background (`python -m pytest > log &` from a
    script) inherits SIGINT ignored, and Python then installs no handler of its own: a Ctrl-C a test plants
    (`os.kill(os.getpid(), SIGINT)`) did nothing there, and a test of what Python's handler does failed in
    the background only. The commands a test starts inherit the same (a Python handler becomes the default
    disposition across exec, and their Python installs its own). The handler the test found is put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
