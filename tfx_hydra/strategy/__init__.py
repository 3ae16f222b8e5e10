"""strategy: the tf.distribute strategy the model is built, compiled and trained under.

Each option in conf/strategy/ names one factory here. Every factory takes the
hardware step's `HardwareInfo`, so `auto` can choose from what is really visible.
`plan_batches` says how the global batch splits over the strategy's replicas (and `steps_for_run`,
once the data is known, how many steps each call runs), and `Setup` carries what steps 1-3 chose
(hardware, policy, strategy, batches) to the steps after them.
multi_worker.py is strategy=multi_worker's (its factory, its cluster, its chief); keras_fix.py makes Keras 3's
`fit` work under more than one replica (keras-team/keras#20585, #19246).
TensorFlow is imported inside the factories (validation must not pay for it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from tfx_hydra.errors import ConfigError, HardwareMismatch
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.settings.checks import require_choice
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.strategy.multi_worker import (  # noqa: F401 -- strategy=multi_worker's factory, named by its config
    CLUSTERS,
    cluster_workers,
    is_chief,
    is_multi_worker,
    multi_worker_strategy,
    require_cluster_here,
)

log = logging.getLogger(__name__)

CROSS_DEVICE_OPS = ("nccl", "hierarchical_copy", "reduce_to_one")


STRATEGY_OPTIONS = {"_DefaultDistributionStrategy": "default", "OneDeviceStrategy": "one_device",
                    "MirroredStrategy": "mirrored", "MultiWorkerMirroredStrategy": "multi_worker",
                    "CollectiveAllReduceStrategy": "multi_worker", "TPUStrategy": "tpu"}


def describe_strategy(strategy) -> str:
    """'default', 'mirrored on cpu:0, cpu:1': the strategy as its option is called."""
    name = STRATEGY_OPTIONS.get(type(strategy).__name__, type(strategy).__name__)
    if name not in ("mirrored", "one_device"):
        return name
    devices = [device.split("/")[-1].lower().replace("device:", "") for device in strategy.extended.worker_devices]
    if devices:
        return f"{name} on {', '.join(devices)}" if len(devices) < 4 else f"{name} over {len(devices)} devices"
    return name


def auto_strategy_reason(hardware: HardwareInfo) -> str:
    """Why strategy=auto picked what it did (the rule auto_strategy follows)."""
    gpus = len(hardware.gpus)
    return "no GPU is visible" if gpus == 0 else "one GPU is visible" if gpus == 1 else f"{gpus} GPUs are visible"


def auto_strategy(hardware: HardwareInfo):
    """MirroredStrategy over several GPUs, OneDeviceStrategy on one, the default strategy on CPU."""
    if len(hardware.gpus) > 1:
        return mirrored_strategy(hardware)
    if len(hardware.gpus) == 1:
        return one_device_strategy(hardware, device="/gpu:0")
    return default_strategy(hardware)


def default_strategy(hardware: HardwareInfo):
    """No distribution: TensorFlow places every op itself."""
    import tensorflow as tf

    return tf.distribute.get_strategy()


def one_device_strategy(hardware: HardwareInfo, device: str | None = None):
    """Everything on one device: the first visible GPU, else the CPU, unless `device` says."""
    import tensorflow as tf

    device = device or ("/gpu:0" if hardware.gpus else "/cpu:0")
    _require_known_devices([device])
    return tf.distribute.OneDeviceStrategy(device)


def mirrored_strategy(
    hardware: HardwareInfo, devices: list[str] | None = None, cross_device_ops: str | None = None
):
    """Synchronous data parallelism over the devices of one machine (all visible GPUs by default). Keras 3 needs
    keras_fix.py's fix to build a model of raw-string inputs under it."""
    import tensorflow as tf

    from tfx_hydra.strategy.keras_fix import apply_keras_fixes

    apply_keras_fixes()
    if devices is not None:
        devices = list(devices)
        _require_known_devices(devices)
    strategy = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=_cross_device_ops(cross_device_ops))
    if strategy.num_replicas_in_sync < 2:
        found = ", ".join(strategy.extended.worker_devices)
        message = (f"strategy=mirrored has one device to mirror over ({found}): it trains like one device, "
                   "with mirroring's overhead.")
        if hardware.strict:
            raise HardwareMismatch(message, fix="strategy=auto (it picks one_device here), run on a machine with 2+ "
                                   "GPUs (hardware.gpus=[0,1]), or drop hardware.strict=true")
        log.warning(message)
    return strategy


def tpu_strategy(hardware: HardwareInfo, tpu: str = "local"):
    """TPUStrategy on a Cloud TPU: `local` on a TPU VM, or a TPU name / grpc:// address."""
    import tensorflow as tf

    if tpu == "local" and not tf.config.list_physical_devices("TPU"):
        raise HardwareMismatch(
            "strategy=tpu with strategy.tpu=local, but this machine has no TPU device.",
            fix="run on a Cloud TPU VM, name a remote TPU with strategy.tpu=<name or grpc://host:8470>, "
            "or use strategy=auto",
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise HardwareMismatch(f"strategy.tpu={tpu} is not reachable ({err}).",
                               fix="check the TPU's name and that it is running, or use strategy=auto") from None
    return tf.distribute.TPUStrategy(resolver)


def _cross_device_ops(name: str | None):
    import tensorflow as tf

    if name is None:
        return None
    require_choice("strategy.cross_device_ops", name, CROSS_DEVICE_OPS)
    builders = {
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "reduce_to_one": tf.distribute.ReductionToOneDevice,
    }
    return builders[name]()


def _require_known_devices(devices: list[str]) -> None:
    """Fail with the list of logical devices instead of TensorFlow's deep placement error."""
    import tensorflow as tf

    known = sorted(_short_name(d.name) for d in tf.config.list_logical_devices())
    for device in devices:
        if _short_name(device) not in known:
            raise ConfigError(
                f"strategy device '{device}' does not exist on this machine.",
                fix=f"use one of: {', '.join('/' + k for k in known)}",
            )


def _short_name(device: str) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:0' and '/gpu:0' both become 'gpu:0'."""
    return device.lower().rsplit("/", 1)[-1].removeprefix("device:")


# --- how batches split ------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchPlan:
    """How the global batch splits over replicas, and how many steps run per tf.function call."""

    global_size: int
    replicas: int
    steps_per_execution: int
    steps_reason: str = ""  # why steps_per_execution is what it is, where the configured value does not say it

    @property
    def per_replica(self) -> float:
        return self.global_size / self.replicas


@dataclass(frozen=True)
class Setup:
    """What the hardware, precision and strategy steps chose: what the model, train and record steps
    read, passed as one value instead of four arguments."""

    hardware: HardwareInfo
    policy: str  # the Keras dtype policy in effect (precision.py's names)
    strategy: Any  # a tf.distribute.Strategy
    plan: BatchPlan
    chief: bool = True  # this process writes the run's records and files (is_chief); other workers only train


def plan_batches(trainer: TrainerConfig, hardware: HardwareInfo, strategy) -> BatchPlan:
    """trainer.batch_size is the global batch; auto takes the profile's per-replica batch x replicas."""
    from tfx_hydra.strategy.keras_fix import MULTI_REPLICA_ISSUE, MULTI_REPLICA_MAX_STEPS_PER_EXECUTION

    replicas = strategy.num_replicas_in_sync
    global_size = (hardware.per_replica_batch_size * replicas if trainer.batch_size == "auto"
                   else trainer.batch_size)
    steps = (hardware.steps_per_execution if trainer.steps_per_execution == "auto"
             else trainer.steps_per_execution)
    if replicas > 1 and steps > MULTI_REPLICA_MAX_STEPS_PER_EXECUTION:
        if trainer.steps_per_execution != "auto":
            log.warning(f"trainer.steps_per_execution={steps} fails in Keras with {replicas} replicas "
                        f"({MULTI_REPLICA_ISSUE}): using {MULTI_REPLICA_MAX_STEPS_PER_EXECUTION} (same updates).")
        steps = MULTI_REPLICA_MAX_STEPS_PER_EXECUTION
    return BatchPlan(global_size=global_size, replicas=replicas, steps_per_execution=steps)


def steps_for_run(plan: BatchPlan, trainer: TrainerConfig, datasets) -> BatchPlan:
    """trainer.steps_per_execution=auto, settled once the data is known: the profile's steps per call,
    or one step per call for a run of fewer batches (training and validation, every epoch) than one
    call would bundle.

    Why: Keras traces its multi-step loop (a while loop around a cond around the step) on top of the
    step, once per model: ~0.1-0.25 s on a 2-core CPU (bench/hpo.py part 5), while a call saved is
    worth 0.5-2 ms there. A run that would not fill one call cannot earn that trace back, so it is
    skipped: a search's short trials, a smoke test. A run of unknown length keeps the profile's."""
    if trainer.steps_per_execution != "auto" or plan.steps_per_execution == 1:
        return plan
    per_epoch = [known_batches(datasets.train), known_batches(datasets.validation)]
    if None in per_epoch:
        return plan
    batches = (trainer.epochs + trainer.finetune_epochs) * sum(per_epoch)
    if batches >= plan.steps_per_execution:
        return plan
    return replace(plan, steps_per_execution=1,
                   steps_reason=f"steps_per_execution=auto: the run's {batches} batches would not fill one call of "
                                f"{plan.steps_per_execution}")


def known_batches(dataset) -> int | None:
    """The batches one pass over `dataset` yields, where tf.data knows it (None: infinite or unknown)."""
    cardinality = getattr(dataset, "cardinality", None)
    count = int(cardinality()) if cardinality else -1
    return count if count >= 0 else None
