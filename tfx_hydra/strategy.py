"""strategy: the tf.distribute strategy the model is built, compiled and trained under.

Each option in conf/strategy/ names one factory here. Every factory takes the
hardware step's `HardwareInfo`, so `auto` can choose from what is really visible.
TensorFlow is imported inside the factories (validation must not pay for it).
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.hardware import HardwareInfo

CROSS_DEVICE_OPS = ("nccl", "hierarchical_copy", "reduce_to_one")


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
    """Synchronous data parallelism over the devices of one machine (all visible GPUs by default)."""
    import tensorflow as tf

    if devices is not None:
        devices = list(devices)
        _require_known_devices(devices)
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=_cross_device_ops(cross_device_ops))


def _cross_device_ops(name: str | None):
    import tensorflow as tf

    if name is None:
        return None
    builders = {
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "reduce_to_one": tf.distribute.ReductionToOneDevice,
    }
    if name not in builders:
        raise ConfigError(
            f"strategy.cross_device_ops={name} is not one of: {', '.join(CROSS_DEVICE_OPS)}.",
            fix="strategy.cross_device_ops=null (TensorFlow's choice)",
        )
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
