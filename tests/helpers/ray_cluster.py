"""A real two-node Ray cluster on this machine for the Ray tests: `ray start --head` and a second node joining it
(`ray start --address`), each with its own CPUs and a bounded memory, CPU only, stopped after the tests that use it.

The package's `ray` extra installs Ray; without it the Ray tests are skipped, unless TFX_HYDRA_REQUIRE_RAY=1 (.ci/run
sets it once the install worked) turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.helpers import cli_env, free_ports, required_or_skipped

RAY = Path(sys.executable).parent / "ray"
NODE_MEMORY = 3 * 1024**3  # bytes each node offers its tasks
OBJECT_STORE = 100 * 1024**2  # the jobs pass configs and results, not tensors


@dataclass
class RayCluster:
    address: str  # host:port of the head's GCS: hydra.launcher.ray.init.address
    node_ids: list[str]  # the head's, then the second node's


def why_not_here() -> str | None:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        return 'Ray is not installed (pip install "tfx_hydra[ray]"; .ci/run does it)'
    if not RAY.exists():
        return f"the ray command is not beside this Python ({RAY})"
    return None


def ray_cluster(folder: Path, head: str, node: str) -> Iterator[RayCluster]:
    """Up with its temporary files in `folder`, yielded, down again (the body of a fixture). `head` and `node` are a
    page's `ray start` lines (the head's, the joining node's): run as written, on a free port instead of 6379, with
    the test's bounds (memory, no GPU, no dashboard) and its temporary folder added."""
    why = why_not_here()
    if why:
        required_or_skipped(why, "TFX_HYDRA_REQUIRE_RAY", "Ray")
    (port,) = free_ports()
    address = f"127.0.0.1:{port}"
    env = ray_env()
    common = ["--node-ip-address", "127.0.0.1", "--memory", str(NODE_MEMORY), "--object-store-memory",
              str(OBJECT_STORE), "--num-gpus", "0", "--disable-usage-stats"]
    as_here = lambda line: [str(RAY), *shlex.split(line.replace("6379", str(port)))[1:], *common]  # noqa: E731
    try:  # the token first, as the pages say (a fresh machine has none: `ray start` under RAY_AUTH_MODE=token fails)
        started(env, [str(RAY), "get-auth-token", "--generate"])
        started(env, [*as_here(head), "--include-dashboard", "false", "--temp-dir", str(folder)])
        started(env, as_here(node))
        yield RayCluster(address, node_ids(address, env))
    finally:
        subprocess.run([str(RAY), "stop", "--force"], env=env, capture_output=True, timeout=120)


def ray_env() -> dict[str, str]:
    """The tests' environment for Ray's commands and the sweeps' drivers: a cluster `ray start --head` started asks
    for its token (in ~/.ray/auth_token), which a client sends only with RAY_AUTH_MODE=token, as the how-to says.
    Its workers run at the suite's priority (Ray's default niceness of 15 starves them beside the other tests'
    processes: a job minutes long under load, seconds alone)."""
    return cli_env() | {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}


def started(env: dict, command: list[str]) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def node_ids(address: str, env: dict) -> list[str]:
    """The cluster's live nodes, the head first, read by a driver of its own (this process stays out of Ray)."""
    script = ("import json, sys, ray\nray.init(address=sys.argv[1], log_to_driver=False)\n"
              "nodes = [n for n in ray.nodes() if n['Alive']]\n"
              "print(json.dumps(sorted((not n.get('IsHeadNode', False), n['NodeID']) for n in nodes)))")
    done = subprocess.run([sys.executable, "-c", script, address], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [node for _, node in json.loads(done.stdout.splitlines()[-1])]
