"""data.service: the training split read from tf.data service workers (`tf.data.experimental.service`).

    data.service=off                 the run reads its data itself (the default)
    data.service=local               a dispatcher and data.service_workers worker processes on this machine, started
                                     for the run and stopped with it (to measure, to test, to use spare cores)
    data.service=grpc://host:5050    an existing dispatcher and its workers (started by you, e.g. on CPU machines)

The training split's pipeline (reading, parsing, decoding, shuffling, augmenting, batching) runs on the workers;
validation and test are read by the run itself. What tf.data service guarantees, and so what the run does:

- Dynamic sharding (`ShardingPolicy.DYNAMIC`): the dispatcher hands each worker the next piece of the source as it
  asks, so each example is read **at most once** per epoch. Without a failure, that is exactly once.
- The epoch's order is the workers' (whichever answers first), not data.seed's: a run resumed from a backup reads a
  different order, and trainer.deterministic=true does not make two runs' weights equal. Backups are taken at
  epoch ends only (a resumed epoch could not skip the batches it trained), so a stopped run trains its last
  epoch again from its start.
- The split is not cached: the workers decode it every epoch (that is their work; a cache on a worker would hold
  only the pieces it was handed).
- A worker that dies mid-epoch: with data.service=local the run starts it again at its address (tf.data service
  recovers a worker that comes back where it was); the examples it held in that epoch are skipped, none is read
  twice, and the run goes on as one run. A worker of an existing dispatcher that never comes back stalls the epoch:
  tf.data service waits for it (restarting workers is the job of whatever runs them there).
- The pipeline must be TensorFlow ops only: a `tf.py_function` cannot run in a worker's process.

`python -m tfx_hydra.data.service_servers dispatcher|worker ...` (service_servers.py) is what data.service=local
starts, one process each, and what a user can start on machines of their own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

from tfx_hydra.errors import ConfigError, DataError

log = logging.getLogger(__name__)

OFF_VALUES = (None, False, "off")
SERVERS = "tfx_hydra.data.service_servers"  # the module each process of data.service=local runs
START_SECONDS = 120  # a process of the service importing TensorFlow on a busy machine
WATCH_SECONDS = 0.5  # how often the run looks for a dead worker
SPLIT_EXAMPLES = 32  # examples per piece of a split the dispatcher hands a worker (sliced)
CONNECT_SECONDS = 10  # an existing dispatcher's answer
PYTHON_OPS = (b"EagerPyFunc", b"PyFunc", b"PyFuncStateless")  # Python called from the graph: not on a worker


def check(service, workers) -> None:
    """data.service and data.service_workers, before TensorFlow is imported."""
    if not (service in OFF_VALUES or service == "local" or (isinstance(service, str) and service.startswith(
            "grpc://") and ":" in service[len("grpc://"):])):
        raise ConfigError(f"data.service={service!r}: expected off, local, or a dispatcher's address "
                          "grpc://host:port.", fix="data.service=local (a dispatcher and workers on this machine)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"data.service_workers={workers!r}: expected a number of worker processes (1 or more).",
                          fix="data.service_workers=2")


def require_one_trainer(service) -> None:
    """A multi-worker run with data.service: each trainer would read the whole split (one job each), not a share."""
    if is_on(service):
        raise ConfigError(f"data.service={service} with strategy=multi_worker: tfx_hydra reads tf.data service from "
                          "one trainer; each of several would read every example.",
                          fix="data.service=off with strategy=multi_worker (each worker reads its shard), or one "
                          "trainer (strategy=auto) fed by data.service")


def is_on(service) -> bool:
    return service not in OFF_VALUES


@dataclass
class Service:
    """The service a run reads its training split from: its address (None: off), its workers (None: not ours to
    count), and the worker processes it runs (data.service=local)."""

    address: str | None = None
    workers: int | None = None
    processes: list = field(default_factory=list)  # _Process, dispatcher first
    restarts: int = 0
    tracker: object = None

    def data_arguments(self) -> dict:
        """What the data source is handed: the address to read from (local: the dispatcher started here)."""
        return {"service": self.address} if self.address else {}

    def record(self, tracker) -> None:
        """The address and worker count, as tags; a worker restarted later adds data.service.worker_restarts."""
        if not self.address:
            return
        self.tracker = tracker
        tracker.set_tags({"data.service": self.address, "data.service.sharding": "dynamic",
                          "data.service.workers": "?" if self.workers is None else self.workers,
                          "data.service.started_by": "this run" if self.processes else "outside the run"})


@dataclass
class _Process:
    name: str
    args: list
    port: int
    log_path: str
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.popen = subprocess.Popen([sys.executable, "-m", SERVERS, *self.args, "--port", str(self.port),
                                           "--parent", str(os.getpid())], stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,  # a Ctrl-C is the run's
                                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"})

    def wait_listening(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise DataError(f"data.service=local: the {self.name} (pid {self.popen.pid}) ended with code "
                                f"{self.popen.returncode} as it started: {last_lines(self.log_path)}",
                                fix="see its log; data.service=off reads the data in the run's own process")
            with contextlib.closing(socket.socket()) as probe:
                if probe.connect_ex(("localhost", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise DataError(f"data.service=local: the {self.name} did not listen on port {self.port} within "
                        f"{START_SECONDS} s.", fix="see its log in the run's folder; data.service=off")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@contextlib.contextmanager
def serving(service, workers: int, folder: str):
    """The run's Service for data.service: off -> no address; grpc://... -> that dispatcher; local -> a dispatcher
    and `workers` worker processes on this machine (their logs in `folder`/data_service), a dead worker started again
    while the run lasts, all stopped when it ends."""
    if not is_on(service):
        yield Service()
        return
    if service != "local":
        yield Service(address=service)
        return
    folder = os.path.join(folder, "data_service")
    os.makedirs(folder, exist_ok=True)
    dispatcher_port, *worker_ports = free_ports(1 + workers)
    dispatcher = f"localhost:{dispatcher_port}"
    processes = [_Process("dispatcher", ["dispatcher"], dispatcher_port, os.path.join(folder, "dispatcher.log"))]
    processes += [_Process(f"worker {i}", ["worker", "--dispatcher", dispatcher], port,
                           os.path.join(folder, f"worker_{i}.log")) for i, port in enumerate(worker_ports)]
    running = Service(address=f"grpc://{dispatcher}", workers=workers, processes=processes)
    stopped = threading.Event()
    try:
        for process in processes:  # all at once: each spends its first seconds importing TensorFlow
            process.start()
        for process in processes:
            process.wait_listening()
        log.info(f"data service: dispatcher at {running.address}, {workers} worker process"
                 f"{'es' if workers > 1 else ''} (logs in {folder})")
        watcher = threading.Thread(target=_restart_dead_workers, args=(running, stopped), daemon=True,
                                   name="data-service-watch")
        watcher.start()
        yield running
    finally:
        stopped.set()
        for process in reversed(processes):  # the workers, then the dispatcher
            process.stop()


def _restart_dead_workers(service: Service, stopped: threading.Event) -> None:
    """A worker process that ended while the run lasts is started again at its port: tf.data service takes it back
    and the epoch goes on (what it held is skipped: at most once)."""
    while not stopped.wait(WATCH_SECONDS):
        for process in service.processes[1:]:
            code = process.popen.poll()
            if code is None or stopped.is_set():
                continue
            service.restarts += 1
            log.warning(f"data service: {process.name} (pid {process.popen.pid}) ended with code {code}; started "
                        f"again at localhost:{process.port}. The examples it held this epoch are skipped (tf.data "
                        "service reads each example at most once); none is read twice.")
            process.start()
            if service.tracker is not None:
                service.tracker.set_tags({"data.service.worker_restarts": service.restarts})
        if service.processes[0].popen.poll() is not None and not stopped.is_set():
            log.error(f"data service: the dispatcher ended (code {service.processes[0].popen.returncode}): "
                      f"{last_lines(service.processes[0].log_path)}")
            return


def free_ports(count: int) -> list[int]:
    """`count` ports free on this machine now (bound together, so distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def last_lines(path: str, count: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip() and "cuda" not in line.lower()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-count:]) or "(an empty log)"


# --- the pipeline's side (TensorFlow) ------------------------------------------------------------

def distributed(dataset, address: str, batch_size: int):
    """`dataset` (batched) read from the service at `address`, each example at most once per epoch (dynamic
    sharding), re-cut into batches of `batch_size` (each worker's last batch of an epoch is partial). Its length is
    left unknown: an epoch ends where the service's does."""
    import tensorflow as tf

    if address == "local":
        raise ConfigError("data.service=local reaches the data source without a service: it is started by a "
                          "tfx_hydra run.", fix="run through python -m tfx_hydra, or start one in your code with "
                          "tfx_hydra.data.service.serving('local', 2, folder) and hand its address")
    require_graph_only(dataset)
    require_dispatcher_answers(address)  # tf.data service would wait for it without end
    # Keras warns "Your input ran out of data" at the end of any epoch of unknown length: here that is every epoch's
    warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
    served = dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC, service=address))
    return served.rebatch(batch_size)


def sliced(tensors, served: bool):
    """`tf.data.Dataset.from_tensor_slices(tensors)`; `served`: the same examples in the same order, from a source
    of pieces of SPLIT_EXAMPLES (a range over them), which dynamic sharding hands out one at a time. Over the
    examples themselves each worker asks the dispatcher for every one: measured here, 1,000-1,300 examples/s with
    2 local workers against 3,900 in pieces of 32."""
    import tensorflow as tf

    if not served:
        return tf.data.Dataset.from_tensor_slices(tensors)
    tensors = tf.nest.map_structure(tf.convert_to_tensor, tensors)
    count = int(tf.nest.flatten(tensors)[0].shape[0])

    def piece(index):
        start = index * SPLIT_EXAMPLES
        return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(
            lambda t: t[start:start + SPLIT_EXAMPLES], tensors))

    return tf.data.Dataset.range(-(-count // SPLIT_EXAMPLES)).flat_map(piece)


def require_dispatcher_answers(address: str) -> None:
    """A dispatcher listens at `address` (grpc://host:port): said now, where tf.data service would retry forever."""
    host, _, port = address[len("grpc://"):].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except (OSError, ValueError) as err:
        raise DataError(f"data.service={address}: no tf.data service dispatcher answers there ({err}).",
                        fix="start one (tf.data.experimental.service.DispatchServer) or check the address; "
                        "data.service=local starts one for the run") from None


def require_graph_only(dataset) -> None:
    """A pipeline that calls Python cannot run on a worker (the function lives in this process): said before the
    first epoch, not as a worker's 'Could not find callback' mid-training."""
    graph = dataset._as_serialized_graph().numpy()  # the graph the dispatcher would be sent
    if any(op in graph for op in PYTHON_OPS):
        raise DataError("data.service: the training pipeline calls Python (tf.py_function or tf.numpy_function, "
                        "e.g. in a data.augmentation or a parse function of your own), which a tf.data service worker "
                        "cannot run: it runs the pipeline's graph in another process.",
                        fix="write that step in TensorFlow ops, or data.service=off")
