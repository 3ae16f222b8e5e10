"""NonFiniteGuard: training that diverges stops, whatever the CPU's kernels do with NaN."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfx_hydra.errors import TrainingError
from tfx_hydra.precision import MIXED_FLOAT16


class NonFiniteGuard(keras.callbacks.Callback):
    """Fails the run when training diverges: a NaN/inf loss at any batch, or a NaN/inf weight
    at the end of any epoch (and of training).

    The loss alone is not enough: inside a compiled train step, how a kernel treats NaN
    depends on the CPU (on an AMD EPYC with AVX-512 a model trained on NaN inputs reported a
    finite loss while every weight was NaN). The weights are the model, so they decide.

    Keras' TerminateOnNaN(raise_error=True) raises on the loss only; this one also names where
    it happened and what to try. Raising (rather than setting stop_training) keeps the
    BackupAndRestore checkpoint of the last good epoch: the guard runs before the backup and
    the tracking callbacks at an epoch's end, so a diverged epoch is neither backed up nor logged.
    Under dynamic loss scaling (mixed_float16) an overflowing step is skipped, its weights left
    as they were: that is not divergence, and it does not trip the weight check.
    """

    def __init__(self, steps_per_execution: int = 1, backup_dir: str | None = None) -> None:
        super().__init__()
        self.steps_per_execution = steps_per_execution
        self.backup_dir = backup_dir
        self.epoch = 0
        self._last_loss: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        self._last_loss = float(loss)
        if math.isfinite(self._last_loss):
            return
        seen = (f" (losses are seen every steps_per_execution={self.steps_per_execution} batches)"
                if self.steps_per_execution > 1 else "")
        raise self._failure(f"the training loss became {self._last_loss} in epoch {self.epoch + 1}, "
                            f"batch {batch + 1}{seen}")

    def on_epoch_end(self, epoch, logs=None):
        self._check_weights(f"in epoch {epoch + 1}")

    def on_train_end(self, logs=None):
        self._check_weights("at the end of training")  # e.g. weights EarlyStopping restored after the epoch's check

    def _check_weights(self, when: str) -> None:
        if weights_all_finite(self.model):
            return
        bad = non_finite_weights(self.model)
        named = bad[0] + (f" and {len(bad) - 1} more" if len(bad) > 1 else "")
        loss = f", while the reported training loss was {self._last_loss:.4g}" if self._last_loss is not None else ""
        raise self._failure(f"the model's weights became NaN/inf {when} ({named}){loss}")

    def _failure(self, what: str) -> TrainingError:
        kept = (f" The weights of the last completed epoch (epoch {self.epoch}) are kept in {self.backup_dir}."
                if self.backup_dir and self.epoch > 0 else " No epoch completed, so no checkpoint was kept.")
        optimizer = self.model.optimizer
        learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        policy = keras.config.dtype_policy().name
        scaling = ("" if policy != MIXED_FLOAT16 or isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
                   else ", or keep loss scaling on with mixed_float16 (precision.loss_scale=dynamic)")
        return TrainingError(f"{what}; training stopped.{kept}",
                             fix=f"lower optimizer.learning_rate (it is {learning_rate:g}), check the data for "
                             f"NaN/inf values{scaling}, or use precision=fp32 (the policy is {policy})")


def floating_weights(model) -> list:
    """The model's floating-point variables, trainable and not (a NaN moving statistic of batch
    norm ruins inference as surely as a NaN kernel); integer counters and seeds cannot be NaN."""
    return [w for w in model.weights if tf.as_dtype(w.dtype).is_floating]


def weights_all_finite(model) -> bool:
    """Are all of the model's floating weights finite? One reduction over every weight, read where
    the variables live (the first replica's copy under a strategy, whose replicas hold the same
    values), and one read of its answer. Eager on purpose: a tf.function here would be traced
    anew for every model, which a search pays on each trial (and TensorFlow warns of the retracing),
    while two small ops per weight once an epoch cost nothing next to the epoch."""
    checks = [tf.reduce_all(tf.math.is_finite(w.value)) for w in floating_weights(model)]
    return not checks or bool(tf.reduce_all(tf.stack(checks)))


def non_finite_weights(model) -> list[str]:
    """Paths of the weights holding a NaN or inf (only called once a check has failed)."""
    return [w.path for w in floating_weights(model)
            if not bool(tf.reduce_all(tf.math.is_finite(w.value)))]
