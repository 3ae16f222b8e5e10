"""Warmup: a linear rise from `start` to `peak` over `warmup_steps` updates, then another schedule (or the
peak itself), counted on from zero. A Keras LearningRateSchedule registered for saving and loading: a
model saved with its optimizer (the .keras export, the MLflow model) loads with it wherever
tfx_hydra is installed."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="tfx_hydra")
class Warmup(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, after, warmup_steps: int, peak: float, start: float = 0.0):
        self.after, self.warmup_steps, self.peak, self.start = after, int(warmup_steps), float(peak), float(start)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        rising = self.start + (self.peak - self.start) * step / float(self.warmup_steps)
        later = self.after(step - self.warmup_steps) if callable(self.after) else self.after
        return keras.ops.where(step < self.warmup_steps, rising, keras.ops.cast(later, "float32"))

    def get_config(self):
        after = (keras.optimizers.schedules.serialize(self.after)
                 if isinstance(self.after, keras.optimizers.schedules.LearningRateSchedule) else self.after)
        return {"after": after, "warmup_steps": self.warmup_steps, "peak": self.peak, "start": self.start}

    @classmethod
    def from_config(cls, config):
        after = config["after"]
        if isinstance(after, dict):
            after = keras.optimizers.schedules.deserialize(after)
        return cls(after, config["warmup_steps"], config["peak"], config["start"])
