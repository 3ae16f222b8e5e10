"""system: how busy the machine was during a run, through MLflow's own system-metrics monitor.

MLflow samples CPU and memory (psutil), disk and network, and each NVIDIA GPU's utilisation,
memory and power through NVML (`nvidia-ml-py`), every `tracking.system_metrics.interval`
seconds, as the run's `system/...` metrics (its System metrics tab). MIG slices are not
reported by MLflow's monitor: on a MIG-partitioned card it reports the whole GPU or nothing.
A cluster worker prefixes its metrics with its node id (`system/worker_1/...`).

A multi-worker job is one MLflow run, the chief's: the other workers write nothing to the store but their own
system metrics, into the chief's run (`cluster_system_metrics`), so the run shows every machine that trained it.
They learn the run from a small file the chief writes in the job's folder, which every worker shares (the same
sweep folder under Slurm and Ray).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import contextmanager
from typing import Iterator

from tfx_hydra.user_cache import read_json, write_json

log = logging.getLogger(__name__)
CLUSTER_RUN_FILE = "cluster_run.json"  # in the job's folder: the chief's run, for the other workers' system metrics


def node_id() -> str | None:
    """This process's place in a cluster (TF_CONFIG's task, else Slurm's task id); None on one machine."""
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    except ValueError:
        task = {}
    if task.get("type") is not None:
        return f"{task['type']}_{task.get('index', 0)}"
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return f"task_{os.environ.get('SLURM_PROCID', '0')}"
    return None


@contextmanager
def system_metrics(run_id: str, uri: str, interval: float | None, resumed: bool = False) -> Iterator[None]:
    """MLflow's SystemMetricsMonitor on `run_id` for the block (interval None: off). Its samples are
    taken on a thread of its own, the first as the block starts; when the block ends, that sample
    (which MLflow's monitor drops if it stops within an interval) is logged and one more is taken,
    so every run has a series from its start to its end, a run of a few seconds too."""
    if interval is None:
        yield
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # its start/stop lines are noise
    monitor = SystemMetricsMonitor(run_id, sampling_interval=interval, samples_before_logging=1,
                                   resume_logging=resumed, node_id=node_id(), tracking_uri=uri)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()  # stops and joins its thread: the monitor is ours alone from here
        _log_last_samples(monitor)


def _log_last_samples(monitor) -> None:
    """The sample taken since the monitor last logged (if any), then one at the end, each a step."""
    try:
        pending = monitor.aggregate_metrics()
        if pending:
            monitor.publish_metrics(pending)
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()
    except Exception as err:  # noqa: BLE001 -- a missing sample never costs the run
        log.debug(f"the last system-metrics sample was not logged: {err}")


def cluster_identity() -> str | None:
    """What tells this start of a cluster from an earlier one of the same job: TF_CONFIG's workers (Ray Train's
    listen on fresh ports at each start), else Slurm's job and step; None on one machine."""
    try:
        workers = (json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}).get("worker")
    except ValueError:
        workers = None
    if workers:
        return ",".join(workers)
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return f"slurm {os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}"
    return None


@contextmanager
def cluster_system_metrics(folder: str, run_id: str | None, uri: str, interval: float | None) -> Iterator[None]:
    """A worker of a multi-worker job, for the block: the chief (`run_id` set: its run) writes where the others find
    it; each other worker samples its machine into that run (in the store at `uri`, the job's) as
    `system/<its node>/...` once it is there. Nothing on one machine, or with system metrics off. The file holds no
    store address: one can hold a password."""
    identity = cluster_identity()
    if identity is None or interval is None:
        yield
        return
    path = os.path.join(folder, CLUSTER_RUN_FILE)
    if run_id is not None:
        os.makedirs(folder, exist_ok=True)
        write_json(path, {"cluster": identity, "run_id": run_id})  # replaced whole: a worker never reads half of it
        yield
        return
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_into_the_chiefs_run, args=(path, identity, uri, interval, stop),
                               name="tfx_hydra-cluster-system-metrics", daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join(timeout=30)


def _sample_into_the_chiefs_run(path: str, identity: str, uri: str, interval: float, stop: threading.Event) -> None:
    """Wait for the chief's run of this very cluster (an earlier start's file names other workers), then sample
    into it until `stop`. A failure costs the samples, never the training."""
    chief = None
    while chief is None and not stop.wait(0.5):
        found = read_json(path)  # {} until the chief has written it
        chief = found if found.get("cluster") == identity else None
    if chief is None:
        return
    try:
        with system_metrics(chief["run_id"], uri, interval, resumed=True):
            stop.wait()
    except Exception as err:  # noqa: BLE001 -- a worker's samples never cost the job
        log.warning(f"this worker's system metrics were not logged to the chief's run {chief['run_id']}: {err}")
