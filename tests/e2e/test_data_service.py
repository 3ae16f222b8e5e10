"""data.service=local: the training split read from a real tf.data service -- a dispatcher and worker processes
started for the run -- through the command a user types: it trains, a worker killed mid-epoch is started again
and the run goes on, a stopped run resumes as the same run; and, through the module's own API, what tf.data
service guarantees (each example at most once per epoch, exactly once without a failure)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import cli_env, free_ports, mlflow_client, mlflow_runs
from tests.helpers.in_process import run_cli_in_process
from tests.unit.test_data_sources import write_images

pytestmark = pytest.mark.slow

# A user's callback, outside the package. Fault injection (the kills are real, sent to real processes, but at
# chosen batches, which signals from outside cannot be timed to): at KILL_WORKER_AT (epoch:batch, counted from 0)
# it kills one of the run's tf.data service worker processes with SIGKILL; at STOP_AT it sends the run SIGTERM.
FAULTS = '''
import os, signal
import keras, psutil

class Faults(keras.callbacks.Callback):
    def __init__(self, log):
        super().__init__()
        self.log = log
        self.kill_worker_at = os.environ.get("KILL_WORKER_AT")
        self.stop_at = os.environ.get("STOP_AT")
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        at = f"{self.epoch}:{batch}"
        if at == self.kill_worker_at:
            (worker, *_) = [p for p in psutil.Process().children()
                            if "tfx_hydra.data.service_servers" in " ".join(p.cmdline()) and "worker" in p.cmdline()]
            worker.kill()
            with open(self.log, "a") as file:
                file.write(f"{worker.pid}\\n")
        if at == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
'''


def service_processes(launch_dir: Path) -> list[psutil.Process]:
    """tf.data service processes a run launched in `launch_dir` started (none should outlive the run)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if "tfx_hydra.data.service_servers" in " ".join(process.info["cmdline"] or []) and \
                process.info["cwd"] == str(launch_dir):
            found.append(process)
    return found


def wait_listening(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("localhost", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port} after {timeout} s"
            time.sleep(0.3)


def served_run(pets: Path, tmp_path: Path, **faults: str) -> subprocess.CompletedProcess:
    args = ["data=image_folder", f"data.directory={pets}", "data.input_shape=[8,8,3]", "data.num_classes=2",
            "data.validation_split=0.1", "data.test_split=0.1", "data.service=local", "data.service_workers=2",
            "trainer.batch_size=8", "trainer.epochs=4", "trainer.steps_per_execution=1", "export=none",
            f"trainer.callbacks=[{{_target_: faults.Faults, log: {tmp_path / 'killed.txt'}}}]"]
    env = cli_env() | {"PYTHONPATH": f"{tmp_path}:{cli_env()['PYTHONPATH']}"} | {
        key.upper(): value for key, value in faults.items()}
    return subprocess.run([sys.executable, "-m", "tfx_hydra", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=400)


def test_a_run_fed_by_a_local_service_survives_a_killed_worker_and_resumes_as_the_same_run(tmp_path):
    pets = write_images(tmp_path / "pets", {"cats": [(12, 10)] * 40, "dogs": [(10, 12)] * 40})
    (tmp_path / "faults.py").write_text(FAULTS)
    # 64 training images (80 less validation and test) in batches of 8. Epoch 2: a worker killed after its 3rd
    # batch; epoch 3: the run stopped (SIGTERM) after its 2nd
    stopped = served_run(pets, tmp_path, kill_worker_at="1:2", stop_at="2:1")
    assert stopped.returncode != 0, stopped.stdout[-3000:]
    assert "data: image_folder, 64 train" in stopped.stdout
    assert "train: decoded by the tf.data service workers each epoch" in stopped.stdout
    assert "backups: at epoch ends only, the training split is read from tf.data service" in stopped.stdout
    killed_pid = (tmp_path / "killed.txt").read_text().split()[0]
    said = stopped.stdout + stopped.stderr
    assert f"(pid {killed_pid}) ended with code -9; started again at localhost:" in said, said[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"
    client = mlflow_client(tmp_path)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "epoch/loss")] == [0, 1]  # epochs 1 and 2
    tags = run.data.tags
    assert tags["data.service"].startswith("grpc://localhost:") and tags["data.service.workers"] == "2"
    assert tags["data.service.sharding"] == "dynamic" and tags["data.service.started_by"] == "this run"
    assert tags["data.service.worker_restarts"] == "1"
    assert service_processes(tmp_path) == []  # the dispatcher and workers (the restarted one too) ended with the run

    resumed = served_run(pets, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming MLflow run {run.info.run_id}" in resumed.stdout + resumed.stderr
    (again,) = mlflow_runs(tmp_path)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    # each epoch logged once: the third (stopped mid-way) trained again from its start, then the fourth
    assert [m.step for m in client.get_metric_history(run.info.run_id, "epoch/loss")] == [0, 1, 2, 3]
    assert again.data.tags["data.service"] != tags["data.service"]  # a new local service, on the ports free now
    assert "test_accuracy" in again.data.metrics
    assert service_processes(tmp_path) == []


def test_the_service_reads_each_example_once_per_epoch_and_at_most_once_when_a_worker_dies(tmp_path):
    """The guarantee the run relies on, read through the module's API as a user's own code would: 3 epochs of 600
    numbers, each worker's batches re-cut to 16; a worker killed with -9 in epoch 2 is started again."""
    import tensorflow as tf

    from tfx_hydra.data import service

    def slow(x):  # a decode's worth of work per example, in graph ops (a worker cannot run Python)
        work = tf.reduce_sum(tf.linalg.matmul(tf.ones([96, 96]), tf.ones([96, 96])))
        return x + tf.cast(work * 0, tf.int64)

    numbers = tf.data.Dataset.range(600).map(slow).shuffle(64).batch(16)
    with service.serving("local", 2, str(tmp_path)) as running:
        pids = [p.popen.pid for p in running.processes]
        served = service.distributed(numbers, running.address, 16)
        epochs, sizes = [], []
        for epoch in range(3):
            seen = []
            for step, batch in enumerate(served):
                seen += batch.numpy().tolist()
                sizes.append(len(batch))
                if epoch == 1 and step == 4:
                    psutil.Process(running.processes[1].popen.pid).send_signal(signal.SIGKILL)
            epochs.append(seen)
        assert running.restarts == 1
    assert sorted(epochs[0]) == list(range(600)) and sorted(epochs[2]) == list(range(600))  # exactly once
    assert len(epochs[1]) == len(set(epochs[1])) and set(epochs[1]) <= set(range(600))  # never twice
    # lost: what the killed worker held (its shuffle buffer of 64, the batches it had ready), no more
    assert len(epochs[1]) >= 600 - 64 - 16 * 8, len(epochs[1])
    assert sizes[:37] == [16] * 37 and sizes[37] == 600 - 16 * 37  # epoch 1: the workers' batches re-cut to 16
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    logs = sorted(p.name for p in (tmp_path / "data_service").iterdir())
    assert logs == ["dispatcher.log", "worker_0.log", "worker_1.log"]


def test_a_run_reads_from_a_dispatcher_started_outside_it(tmp_path):
    """The documented commands start a dispatcher and a worker as a user would on machines of their own; the run
    (data.service=grpc://...) reads its training split from them, says so in MLflow, and leaves them running."""
    pets = write_images(tmp_path / "pets", {"cats": [(12, 10)] * 20, "dogs": [(10, 12)] * 20})
    dispatcher_port, worker_port = free_ports(2)
    module = [sys.executable, "-m", "tfx_hydra.data.service_servers"]
    servers = [subprocess.Popen([*module, "dispatcher", "--port", str(dispatcher_port)], env=cli_env()),
               subprocess.Popen([*module, "worker", "--dispatcher", f"localhost:{dispatcher_port}", "--port",
                                 str(worker_port)], env=cli_env())]
    try:
        for port in (dispatcher_port, worker_port):  # as a user would: once both say they listen
            wait_listening(port)
        done = run_cli_in_process(["data=image_folder", f"data.directory={pets}", "data.input_shape=[8,8,3]",
                                   "data.num_classes=2", f"data.service=grpc://localhost:{dispatcher_port}",
                                   "trainer.batch_size=8", "trainer.epochs=2", "export=none"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        (run,) = mlflow_runs(tmp_path)
        assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics
        assert run.data.tags["data.service"] == f"grpc://localhost:{dispatcher_port}"
        assert run.data.tags["data.service.workers"] == "?"  # not the run's to count
        assert run.data.tags["data.service.started_by"] == "outside the run"
        assert all(server.poll() is None for server in servers)  # still serving: not the run's to stop
    finally:
        for server in servers:
            server.kill()
            server.wait()
