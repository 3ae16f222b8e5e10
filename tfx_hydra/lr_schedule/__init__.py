"""lr_schedule: the learning rate over training (conf/lr_schedule/: constant | cosine | linear | polynomial |
step | exponential | one_cycle), each after an optional linear warmup, built on keras.optimizers.schedules.

A schedule is a function of the optimizer's update count (`optimizer.iterations`), which counts updates,
not batches: gradient accumulation and steps_per_execution are right by construction. Its length is the
phase's updates (epochs x updates per epoch). A resumed run restores the update count with the backup,
so its schedule continues where it stopped; the fine-tuning phase builds a new optimizer, so its schedule
starts again from trainer.finetune_lr over the fine-tuning epochs. The schema is kept here, with its
package (as hparams_search's is); preflight checks it before TensorFlow loads, Keras is imported only
when a schedule is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Optional

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import require_choice, require_non_negative, require_positive, require_range

SCHEDULES = ("constant", "cosine", "linear", "polynomial", "step", "exponential", "one_cycle")


@dataclass
class LrScheduleConfig:
    name: str = "constant"
    warmup_epochs: float = 0.0
    warmup_steps: Optional[int] = None
    alpha: float = 0.0            # cosine: the final rate as a fraction of the peak
    end_fraction: float = 0.0     # linear, polynomial
    power: float = 2.0            # polynomial
    boundaries: List[int] = field(default_factory=lambda: [30, 60])  # step: epochs
    factor: float = 0.1           # step
    decay_rate: float = 0.9       # exponential
    decay_epochs: float = 1.0     # exponential
    staircase: bool = False       # exponential
    pct_start: float = 0.3        # one_cycle
    div_factor: float = 25.0      # one_cycle
    final_div_factor: float = 1e4  # one_cycle

    def __post_init__(self) -> None:
        require_choice("lr_schedule", self.name, SCHEDULES)
        require_range("lr_schedule.warmup_epochs", self.warmup_epochs, 0.0, None, 1)
        if self.warmup_steps is not None:
            require_non_negative("lr_schedule.warmup_steps", self.warmup_steps, "no warmup", 500)
        for key in ("alpha", "end_fraction"):
            require_range(f"lr_schedule.{key}", getattr(self, key), 0.0, 1.0, 0.0)
        require_range("lr_schedule.factor", self.factor, 0.0, 1.0, 0.1, low_inclusive=False)
        require_range("lr_schedule.decay_rate", self.decay_rate, 0.0, 1.0, 0.9, low_inclusive=False)
        require_positive("lr_schedule.power", self.power, 2.0, integer=False)
        require_positive("lr_schedule.decay_epochs", self.decay_epochs, 1.0, integer=False)
        require_range("lr_schedule.pct_start", self.pct_start, 0.0, 1.0, 0.3, low_inclusive=False,
                      high_inclusive=False)
        for key in ("div_factor", "final_div_factor"):
            require_range(f"lr_schedule.{key}", getattr(self, key), 1.0, None, 25.0)
        if any(b < 1 for b in self.boundaries) or list(self.boundaries) != sorted(set(self.boundaries)):
            raise ConfigError(f"lr_schedule.boundaries={list(self.boundaries)}: expected epochs in increasing order, "
                              "each at least 1.", fix="lr_schedule.boundaries=[30,60]")


def require_known_length(config: LrScheduleConfig | None, num_train: int | None) -> None:
    """A schedule counts the phase's updates, so it needs the epoch's length: a user's pipeline that does not know
    it (num_train None) trains at a constant rate only, said before training rather than ignored."""
    if num_train is None and config is not None and (config.name != "constant" or config.warmup_epochs
                                                     or config.warmup_steps):
        raise DataError(f"lr_schedule={config.name} follows the phase's updates, and the training pipeline does not "
                        "know its length yet (your pipeline: a filter, TFRecordDataset; data=tfrecord: files no index "
                        "or count cache knows, which a first run counts while it trains).",
                        fix="data=tfrecord: python -m tfx_hydra.data.to_tfrecord writes an index, or run once with "
                        "lr_schedule=constant (the counts are kept for the next start); your pipeline: "
                        "dataset.apply(tf.data.experimental.assert_cardinality(N)); or lr_schedule=constant")


def warmup_updates(config: LrScheduleConfig, updates_per_epoch: int, total: int) -> int:
    """The warmup's length in updates: warmup_steps, else warmup_epochs (one_cycle: pct_start of training)."""
    if config.name == "one_cycle":
        return max(1, round(config.pct_start * total))
    if config.warmup_steps is not None:
        return int(config.warmup_steps)
    return round(config.warmup_epochs * updates_per_epoch)


def build_schedule(config: LrScheduleConfig, peak: float, updates_per_epoch: int, epochs: int) -> Any:
    """The learning rate as a function of the update count: `peak` itself for a constant rate without
    warmup (a plain float, as before schedules), else a Keras LearningRateSchedule."""
    import keras

    from tfx_hydra.lr_schedule.warmup import Warmup

    schedules = keras.optimizers.schedules
    total = max(1, updates_per_epoch * epochs)
    warmup = warmup_updates(config, updates_per_epoch, total)
    if warmup >= total and config.name != "constant":
        raise ConfigError(f"lr_schedule.warmup: {warmup} updates, but the phase has only {total}: nothing is left to "
                          f"decay.", fix="lr_schedule.warmup_epochs=<fewer epochs> (or more trainer.epochs)")
    decay = max(1, total - warmup)
    name = config.name
    if name == "constant":
        after: Any = peak
    elif name == "cosine":
        after = schedules.CosineDecay(peak, decay, alpha=config.alpha)
    elif name in ("linear", "polynomial"):
        after = schedules.PolynomialDecay(peak, decay, end_learning_rate=peak * config.end_fraction,
                                          power=1.0 if name == "linear" else config.power)
    elif name == "exponential":
        after = schedules.ExponentialDecay(peak, max(1, round(config.decay_epochs * updates_per_epoch)),
                                           config.decay_rate, staircase=config.staircase)
    elif name == "step":
        boundaries = [b * updates_per_epoch - warmup for b in config.boundaries if b * updates_per_epoch > warmup]
        after = schedules.PiecewiseConstantDecay(boundaries, [peak * config.factor ** i
                                                              for i in range(len(boundaries) + 1)]) \
            if boundaries else peak
    else:  # one_cycle
        after = schedules.CosineDecay(peak, decay, alpha=1.0 / config.final_div_factor)
    if warmup == 0:
        return after
    start = peak / config.div_factor if name == "one_cycle" else 0.0
    return Warmup(after, warmup_steps=warmup, peak=peak, start=start)


def updates_per_epoch(num_train: int, global_batch: int, grad_accum_steps: int) -> int:
    """Optimizer updates in one epoch: its batches, divided by the batches accumulated per update."""
    return max(1, math.ceil(num_train / global_batch) // max(1, grad_accum_steps))


def describe(config: LrScheduleConfig | None) -> str:
    """What the optimizer line adds: '' for a constant rate, else the schedule and its warmup."""
    if config is None or (config.name == "constant" and not config.warmup_epochs and not config.warmup_steps):
        return ""
    epochs = config.warmup_epochs
    warmup = (f"{config.warmup_steps} warmup updates" if config.warmup_steps is not None
              else f"{epochs:g} warmup epoch{'' if epochs == 1 else 's'}" if epochs else "")
    return f", lr_schedule={config.name}" + (f" after {warmup}" if warmup and config.name != "one_cycle" else "")
