"""system: how busy the machine was during a run, through MLflow's own system-metrics monitor.

MLflow samples CPU and memory (psutil), disk and network, and each NVIDIA GPU's utilisation,
memory and power through NVML (`nvidia-ml-py`), every `tracking.system_metrics.interval`
seconds, as the run's `system/...` metrics (its System metrics tab). MIG slices are not
reported by MLflow's monitor: on a MIG-partitioned card it reports the whole GPU or nothing.
A cluster worker prefixes its metrics with its node id (`system/worker_1/...`).
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)


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
