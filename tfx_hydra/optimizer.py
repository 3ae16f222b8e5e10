"""optimizer: conf/optimizer/ built for this run: the learning rate scaled with the replicas if
asked, gradient accumulation, loss scaling for mixed_float16, and weight decay kept off biases and
normalisation parameters (Keras 3's weight decay is decoupled, as AdamW's paper means it, for every
optimizer; decaying a bias or a batch-norm scale only hurts, so they are excluded unless
optimizer.decay_biases_and_norms=true).

The `_target_` of conf/optimizer/*.yaml is a Keras optimizer class itself; this module adds
what depends on the run (replicas, precision, the fine-tuning phase). Its numbers are
checked before TensorFlow loads (settings.validate_optimizer). Keras is imported inside the
functions: config validation must not pay for it.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError
from tfx_hydra.lr_schedule import build_schedule
from tfx_hydra.precision import apply_loss_scaling
from tfx_hydra.settings.compose import build
from tfx_hydra.settings.schemas import Settings


def build_optimizer(optimizer_cfg: DictConfig, settings: Settings, policy: str, replicas: int,
                    learning_rate: float | None = None, updates_per_epoch: int | None = None,
                    epochs: int | None = None) -> tuple[Any, bool]:
    """The optimizer `optimizer_cfg` describes, and whether Keras should scale the loss itself
    (`auto_scale_loss` of model.compile). `learning_rate`: the fine-tuning phase's. With the phase's
    `updates_per_epoch` and `epochs`, the rate follows lr_schedule (settings.lr_schedule) from it."""
    trainer = settings.trainer
    arguments: dict[str, Any] = {}
    peak = peak_learning_rate(optimizer_cfg, settings, replicas, learning_rate)
    if peak is not None:
        arguments["learning_rate"] = peak
    schedule = getattr(settings, "lr_schedule", None)
    if schedule is not None and updates_per_epoch and epochs:
        if peak is None:
            raise ConfigError(f"lr_schedule={schedule.name} needs optimizer.learning_rate: the rate it starts from.",
                              fix="optimizer.learning_rate=0.001")
        arguments["learning_rate"] = build_schedule(schedule, peak, updates_per_epoch, epochs)
    if trainer.grad_accum_steps > 1:
        arguments["gradient_accumulation_steps"] = trainer.grad_accum_steps
    ema = optimizer_cfg.get("ema") or {}
    if ema.get("enabled", False):  # Keras averages every update and puts the average in the weights when fit ends
        arguments |= {"use_ema": True, "ema_momentum": float(ema.get("momentum", 0.99))}
    optimizer = build(keras_arguments(optimizer_cfg), "optimizer", **arguments)
    if optimizer.weight_decay and not optimizer_cfg.get("decay_biases_and_norms", False):
        optimizer.exclude_from_weight_decay(var_names=list(NOT_DECAYED))  # before the optimizer is built
    return apply_loss_scaling(optimizer, policy, settings.precision.loss_scale)


# tfx_hydra's own keys in conf/optimizer/ (not the Keras class's arguments; ema becomes use_ema, ema_momentum)
OWN_KEYS = ("decay_biases_and_norms", "ema")
# what decay would shrink for nothing: Dense and Conv biases, normalisation layers' scale and offset
NOT_DECAYED = ("bias", "gamma", "beta")


def keras_arguments(optimizer_cfg: DictConfig) -> DictConfig:
    """The optimizer's node without tfx_hydra's own keys: what the Keras class is called with."""
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(optimizer_cfg, resolve=True)  # its interpolations read the whole config
    return OmegaConf.create({k: v for k, v in resolved.items() if k not in OWN_KEYS})


def peak_learning_rate(optimizer_cfg: DictConfig, settings: Settings, replicas: int,
                       learning_rate: float | None = None) -> float | None:
    """The rate the phase trains at (a schedule's peak): the fine-tuning phase's, or optimizer.learning_rate,
    times the replicas with trainer.scale_lr_with_replicas; None: the optimizer's own default."""
    configured = learning_rate if learning_rate is not None else optimizer_cfg.get("learning_rate")
    if settings.trainer.scale_lr_with_replicas and replicas > 1:
        if optimizer_cfg.get("learning_rate") is None:
            raise ConfigError("trainer.scale_lr_with_replicas=true needs optimizer.learning_rate to scale.",
                              fix="optimizer.learning_rate=0.001, or trainer.scale_lr_with_replicas=false")
        return float(configured) * replicas
    return None if configured is None or isinstance(configured, DictConfig) else float(configured)


def finetune_learning_rate(optimizer_cfg: DictConfig, settings: Settings, current_optimizer) -> float:
    """trainer.finetune_lr, or a tenth of the first phase's unscaled rate (the optimizer's own
    default when optimizer.learning_rate is not set): small steps for pretrained weights."""
    if settings.trainer.finetune_lr is not None:
        return settings.trainer.finetune_lr
    base = optimizer_cfg.get("learning_rate")  # unscaled: build_optimizer scales it with the replicas again
    if base is None:
        import keras

        base = float(keras.ops.convert_to_numpy(current_optimizer.learning_rate))
    return float(base) / 10
