"""What the trainer and callback tests share: settings, the setup steps 1-3 hand over, a compiled seed MLP
(the tiny digits they train on are the `data` fixture of tests/unit/conftest.py)."""

from __future__ import annotations

import math

from omegaconf import OmegaConf

from tests.helpers.fakes import RecordingTracker
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.models import mlp
from tfx_hydra.settings.schemas import (
    HardwareConfig,
    PrecisionConfig,
    Settings,
    SweepConfig,
    TrackingConfig,
    TrainerConfig,
)
from tfx_hydra.strategy import BatchPlan, Setup
from tfx_hydra.trainer import compile_model

ADAM = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})


def settings_with(trainer: TrainerConfig, precision: PrecisionConfig | None = None) -> Settings:
    return Settings(seed=0, trainer=trainer, hardware=HardwareConfig(), precision=precision or PrecisionConfig(),
                    tracking=TrackingConfig(enabled=False), sweep=SweepConfig())


def setup_with(hardware: HardwareInfo | None = None, replicas: int = 1, policy: str = "float32") -> Setup:
    """What steps 1-3 would hand the trainer: the default strategy, a batch of 32."""
    import tensorflow as tf

    return Setup(hardware or HardwareInfo(profile="cpu"), policy, tf.distribute.get_strategy(),
                 BatchPlan(global_size=32, replicas=replicas, steps_per_execution=1))


def compiled(trainer: TrainerConfig, hardware: HardwareInfo | None = None, tracker=None, replicas: int = 1,
             model=None):
    model = model or mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, ADAM, settings_with(trainer), setup_with(hardware, replicas), tracker or RecordingTracker())
    return model


def batches_per_epoch(data, batch_size=32):
    return math.ceil(data.num_train / batch_size)
