"""lost_runs: runs whose process died without a word are closed by the next command.

A kill -9, the out-of-memory killer or a machine that went down end a process before it can close
its run, which would stay RUNNING forever. Each run records the process that writes it: host, pid
and the process's start time (the pid alone could have been reused). Any later command on the same
store (a run, a sweep, reproduce) closes the RUNNING runs of this host whose process is gone. A
heartbeat would also cover other hosts, but it costs a write per interval and a guess at how late
is dead; runs on other nodes are closed by the sweep that launched them, when it ends.
"""

from __future__ import annotations

import os

from tfx_hydra.process.signals import uninterrupted
from tfx_hydra.tracking.store import send_batch

LOST_NOTE = ("lost: its process (pid {pid} on {host}) ended without closing the run (kill -9, the out-of-memory "
             "killer, or the machine went down); closed by a later command on this store")


def process_tags() -> dict[str, str]:
    """Who writes this run: enough for a later command to tell that the writer is gone."""
    import socket

    ray_node = os.environ.get(RAY_NODE_VARIABLE)  # a Ray job's node: several can share a host name
    return {"process.host": socket.gethostname(), "process.pid": str(os.getpid()),
            "process.started": f"{_process_start_time(os.getpid()):.2f}",
            **({"process.ray_node": ray_node} if ray_node else {})}


RAY_NODE_VARIABLE = "TFX_HYDRA_RAY_NODE"  # set by hydra/launcher=ray in each job (sweeps/ray_launcher.py)


def _process_start_time(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


def process_is_gone(tags: dict[str, str]) -> bool:
    """True when the run's writer ran on this host and is no longer running (or its pid is now another's)."""
    import socket

    import psutil

    if tags.get("process.host") != socket.gethostname() or "process.pid" not in tags:
        return False  # another machine's process: not ours to judge
    pid = int(tags["process.pid"])
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
            return True
        return abs(process.create_time() - float(tags.get("process.started", "0"))) > 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return not psutil.pid_exists(pid)


def close_lost_runs(client, experiment_ids: list[str], keep: str | None = None) -> list[str]:
    """End KILLED (so a backup still resumes) every RUNNING run whose process is gone; `keep` is
    the run about to be resumed. Returns the ids closed."""
    from socket import gethostname

    closed = []
    running = client.search_runs(experiment_ids, max_results=1000, filter_string=(
        f"attributes.status = 'RUNNING' and tags.`process.host` = '{gethostname()}'"))
    for run in running:
        if run.info.run_id == keep or not process_is_gone(run.data.tags):
            continue
        close_lost_run(client, run, LOST_NOTE.format(pid=run.data.tags["process.pid"], host=gethostname()))
        closed.append(run.info.run_id)
    return closed


def close_lost_run(client, run, note: str) -> None:
    with uninterrupted():
        send_batch(client, run.info.run_id, tags=[("error", note), ("lost", "true")])
        client.set_terminated(run.info.run_id, status="KILLED")
