"""Before a Ray sweep's first job: what the jobs read and write is where the cluster's other machines see it.

On one machine every job sees the launching folder, the SQLite store in it and the data. A node on another machine
sees none of that unless a filesystem is shared, and a job there would fail late (a file not found after its Ray
worker started) or, worse, write to a store of its own that the sweep never reads. So, when the cluster has nodes on
other machines (an address none of this machine's network interfaces has):

- the MLflow store and the Optuna study must be servers, not files: SQLite over a shared filesystem breaks on its
  locks, and on a node without one it is another, empty file;
- the launching folder and every local path the jobs' configs name (`data.path`, `data.directory`, a TFRecord glob's
  folder, `model.preset`, ...) must exist on each of those nodes: a small Ray task placed on each one looks.

Everything wrong is said in one error before any job starts, with the fixes.
"""

from __future__ import annotations

import os
from typing import Iterable

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.errors import ConfigError

FILE_STORES = ("sqlite:", "file:")  # a store that is a file on the launching machine
LOOK_TIMEOUT_S = 120  # a node's look at the paths (its worker process starts first)


def require_reachable(ray, job_configs: list[DictConfig], launch_dir: str) -> None:
    """Refuse the sweep when a node on another machine cannot reach the store, the study or a path of a job's."""
    from hydra.core.hydra_config import HydraConfig

    nodes = other_machines(ray)
    if not nodes:
        return
    sweeps = HydraConfig.instance().cfg  # the jobs' configs are read as each job sees them, then the sweep's again
    try:
        problems = [*file_stores(job_configs, launch_dir)]
        paths = sorted({launch_dir, *(p for config in job_configs for p in local_paths(config, launch_dir))})
    finally:
        HydraConfig.instance().cfg = sweeps
    for address, missing in missing_on(ray, nodes, paths).items():
        problems += [f"{path} is not on the node at {address}" for path in missing]
    if problems:
        raise ConfigError(
            f"hydra/launcher=ray: the cluster has nodes on other machines ({', '.join(sorted(nodes.values()))}), and "
            "its jobs would not reach what they need:\n  - " + "\n  - ".join(problems),
            fix="track to an MLflow server (tracking.uri=http://mlflow:5000, its store PostgreSQL), keep a search's "
                "study in a database (hparams_search.storage=postgresql://...), and launch from a folder with the "
                "data on a filesystem every node mounts (NFS, a Kubernetes volume), or read the data from object "
                "storage (gs://, s3://)")


def other_machines(ray) -> dict[str, str]:
    """The live nodes whose address is none of this machine's interfaces' addresses: {node id: address}."""
    import psutil

    here = {address.address for addresses in psutil.net_if_addrs().values() for address in addresses}
    here.add(ray.util.get_node_ip_address())
    return {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()
            if node["Alive"] and node["NodeManagerAddress"] not in here}


def file_stores(job_configs: list[DictConfig], launch_dir: str) -> Iterable[str]:
    """The stores the jobs would write to that are files on this machine (said once each)."""
    from tfx_hydra.tracking.store import resolve_tracking_uri

    said = set()
    for config in map(as_the_job_sees_it, job_configs):
        if OmegaConf.select(config, "tracking.enabled", default=False):
            uri = resolve_tracking_uri(config.tracking, launch_dir)
            if uri.startswith(FILE_STORES) and uri not in said:
                said.add(uri)
                yield f"tracking.uri: the MLflow store {uri} is a file on this machine"
        if "hparams_search" in config:
            storage = OmegaConf.select(config, "hparams_search.storage", default=None)
            if (storage is None or str(storage).startswith(FILE_STORES) or "://" not in str(storage)) \
                    and "study" not in said:
                said.add("study")
                yield (f"hparams_search.storage={'null' if storage is None else storage}: the Optuna study is a "
                       "file on this machine "
                       f"({'optuna.db in the launch directory' if storage is None else 'a file'})")


def local_paths(config: DictConfig, launch_dir: str) -> set[str]:
    """The local files and folders a job's `data` and `model` settings name that exist here (a glob: its folder),
    absolute."""
    found = set()
    config = as_the_job_sees_it(config)
    for section in ("data", "model"):
        node = OmegaConf.select(config, section, default=None)
        if node is None:
            continue
        try:
            values = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
        except Exception:  # noqa: BLE001 - an interpolation only the job resolves: its literal values still count
            values = OmegaConf.to_container(node, resolve=False)
        for value in strings_in(values):
            if os.sep not in value or "://" in value:
                continue
            path = os.path.join(launch_dir, value)
            if any(sign in path for sign in "*?["):
                path = os.path.dirname(path.split("*")[0].split("?")[0].split("[")[0])
            if os.path.exists(path):
                found.add(os.path.abspath(path))
    return found


def as_the_job_sees_it(config: DictConfig) -> DictConfig:
    """`config` with Hydra's `${hydra:...}` values (the launch folder's paths) resolvable, as in its job."""
    from hydra.core.hydra_config import HydraConfig

    if "hydra" in config:
        HydraConfig.instance().set_config(config)
    return config


def strings_in(value) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def missing_on(ray, nodes: dict[str, str], paths: list[str]) -> dict[str, list[str]]:
    """{address: the paths not there} for each node, each looked at by a Ray task placed on that node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    look = ray.remote(num_cpus=0, max_retries=0)(paths_missing_here)
    looks = {address: look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(paths)
             for node, address in nodes.items()}
    return {address: missing for address, missing in zip(looks, ray.get(list(looks.values()),
                                                                          timeout=LOOK_TIMEOUT_S)) if missing}


def paths_missing_here(paths: list[str]) -> list[str]:
    """On a node: the paths it does not see."""
    return [path for path in paths if not os.path.exists(path)]
