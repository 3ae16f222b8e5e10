"""multi_worker: strategy=multi_worker, synchronous data parallelism over several machines
(MultiWorkerMirroredStrategy), and what every worker must know of its cluster before TensorFlow starts.

`strategy.cluster` says where the cluster is read from: TF_CONFIG (set on every worker by hand, or by Ray Train on
the workers hydra/launcher=ray starts: `ray`), or Slurm's environment (`srun`: one task per worker). Worker 0 is the
chief (`is_chief`): it records the run and exports; the others train the same weights.
"""

from __future__ import annotations

import json
import os

from tfx_hydra.errors import ConfigError, HardwareMismatch
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.settings.checks import require_choice

COMMUNICATIONS = ("auto", "ring", "nccl")
CLUSTERS = ("tf_config", "slurm", "ray")
RAY_TRAIN_COMMAND = ("python -m tfx_hydra -m hydra/launcher=ray strategy=multi_worker strategy.cluster=ray "
                     "strategy.workers=2")


def multi_worker_strategy(hardware: HardwareInfo, cluster: str = "tf_config", communication: str = "auto",
                          slurm_port_base: int = 8888, workers: int = 2):
    """Synchronous data parallelism over several machines (MultiWorkerMirroredStrategy).

    The cluster comes from TF_CONFIG (set it on every worker, or Ray Train sets it on its workers: cluster=ray,
    `workers` of them, started by hydra/launcher=ray) or from Slurm's environment (`srun`: one task per worker).
    Keras 3 needs keras_fix.py's fix to `fit` under it.
    """
    import tensorflow as tf

    from tfx_hydra.strategy.keras_fix import apply_keras_fixes

    require_choice("strategy.cluster", cluster, CLUSTERS)
    require_choice("strategy.communication", communication, COMMUNICATIONS)
    require_cluster_here(cluster)
    apply_keras_fixes()
    options = tf.distribute.experimental.CommunicationOptions(
        implementation={"auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
                        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
                        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL}[communication])
    resolver = _slurm_resolver(slurm_port_base, len(hardware.gpus)) if cluster == "slurm" else None
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    except RuntimeError as err:
        raise HardwareMismatch(
            f"MultiWorkerMirroredStrategy could not start: {err}",
            fix="strategy=multi_worker must be created before any other TensorFlow work: run it as its own process",
        ) from None


def require_cluster_here(cluster: str | None) -> None:
    """strategy.cluster=ray outside a Ray Train worker: said before any run starts (without TF_CONFIG, TensorFlow
    would train one worker alone, and without the launcher no Ray Train workers exist to join)."""
    if cluster == "ray" and not os.environ.get("TF_CONFIG"):
        raise ConfigError("strategy.cluster=ray trains on Ray Train workers, which hydra/launcher=ray starts for the "
                          "job; this process is not one of them (no TF_CONFIG).",
                          fix=f"launch the job through Ray: {RAY_TRAIN_COMMAND} (hydra.launcher.ray.init.address "
                          "for a running cluster)")


def is_multi_worker(strategy_target: str | None) -> bool:
    """Whether a strategy's `_target_` is strategy=multi_worker's factory (read from the config, before any strategy
    exists)."""
    return (strategy_target or "").endswith("multi_worker_strategy")


def is_chief(strategy_target: str | None, cluster: str = "tf_config") -> bool:
    """Whether this process logs and exports: always, except on non-chief multi-worker tasks.

    Read from the environment (TF_CONFIG or SLURM_PROCID) so it is known before the
    strategy exists, when the MLflow run starts.
    """
    if not is_multi_worker(strategy_target):
        return True
    if cluster == "slurm":
        return os.environ.get("SLURM_PROCID", "0") == "0"
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0


def cluster_workers(strategy) -> str | None:
    """'vm:8888, vm:8889': the workers of a multi-worker strategy as its cluster resolver found them (from
    TF_CONFIG or Slurm's allocation), task 0 first; None for a strategy on one machine."""
    resolver = getattr(strategy, "cluster_resolver", None)
    workers = resolver.cluster_spec().as_dict().get("worker") if resolver is not None else None
    return ", ".join(workers) if workers else None


def _slurm_resolver(port_base: int, gpus: int):
    """TensorFlow's SlurmClusterResolver, told the GPUs rather than left to find them: on its own it runs
    nvidia-smi (absent on a CPU node: the run fails) and, with no GPU, divides by zero-sized GPU slices. Which
    GPUs a task sees the hardware step has settled already (Slurm's `--gpus-per-task` binds them), so the
    resolver's own GPU allocation is not applied (auto_set_gpu=False): its numbers only have to add up."""
    import tensorflow as tf

    if "SLURM_PROCID" not in os.environ:
        raise ConfigError("strategy.cluster=slurm, but this process was not started by Slurm (no SLURM_PROCID).",
                          fix="launch with srun (one task per worker), or strategy.cluster=tf_config")
    try:
        per_task, tasks = max(1, gpus), int(os.environ.get("SLURM_NTASKS", 1))
        return tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=port_base, gpus_per_task=per_task, gpus_per_node=per_task * tasks, auto_set_gpu=False)
    except (RuntimeError, KeyError, ValueError, OSError) as err:
        raise ConfigError(f"cannot read the Slurm cluster from the environment ({err}).",
                          fix="launch with srun inside an allocation, or strategy.cluster=tf_config") from None
