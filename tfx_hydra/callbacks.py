"""callbacks: the Keras callbacks a run trains with, one concept each, as module-level classes.

Imported by the train step only (it imports Keras at the top, which costs seconds):
config validation and `--help` never load this module.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from tfx_hydra.errors import TrainingError
from tfx_hydra.precision import MIXED_FLOAT16
from tfx_hydra.tracking import as_disk_full, uninterrupted


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
        self._all_finite = None
        self._last_loss: float | None = None

    def on_train_begin(self, logs=None):
        self._all_finite = all_finite_check(self.model)

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
        if self._all_finite is None or bool(self._all_finite()):
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


def all_finite_check(model):
    """A compiled function: are all of the model's floating weights finite? One fused reduction
    over every weight, read where the variables live (the first replica's copy under a strategy,
    whose replicas hold the same values)."""
    weights = [w.value for w in floating_weights(model)]
    if not weights:
        return lambda: True

    @tf.function(autograph=False)
    def all_finite():
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(w)) for w in weights])

    return all_finite


def non_finite_weights(model) -> list[str]:
    """Paths of the weights holding a NaN or inf (only called once a check has failed)."""
    return [w.path for w in floating_weights(model)
            if not bool(tf.reduce_all(tf.math.is_finite(w.value)))]


class EpochBackup(keras.callbacks.BackupAndRestore):
    """Keras' BackupAndRestore (one backup per epoch, the previous one kept in case the last write
    is torn: double_checkpoint), made safe to resume from after any kill:

    - Ctrl-C/SIGTERM wait while an epoch is backed up (tracking.uninterrupted), so a KILLED run
      keeps a backup that loads.
    - Each epoch's logs are saved with its backup, and the tracking callback writes them to MLflow
      only after the backup (it comes after this one). A kill between the two leaves an epoch that
      is backed up but not logged; resuming logs it from the backup (`catch_up`), so every epoch's
      metrics are in MLflow exactly once, whatever the moment of the kill.
    - A backup this run cannot go on from (already at or past the phase's last epoch, or written by
      a model of another shape) fails before any training, with the way out.
    """

    LOGS_FILE = "epoch_logs.json"

    def __init__(self, backup_dir: str, last_epoch: int, catch_up=None, epochs_key: str = "trainer.epochs",
                 epochs_before: int = 0) -> None:
        super().__init__(backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=True)
        self.last_epoch = last_epoch  # the phase trains up to this epoch (epochs_before + the phase's epochs)
        self.catch_up = catch_up  # called with {epoch: logs} of the backed-up epochs on resume
        self.epochs_key, self.epochs_before = epochs_key, epochs_before  # for the fix: the key that sets this phase
        self._logs_path = os.path.join(backup_dir, self.LOGS_FILE)

    def on_train_begin(self, logs=None):
        self.model._initial_epoch = None  # an earlier phase's resume point is not this phase's
        try:
            super().on_train_begin(logs)
        except ValueError as err:  # Keras: the saved weights' shapes differ from the model's
            raise TrainingError(f"the backup in {self.backup_dir} was written by a model of another shape and cannot "
                                f"be resumed ({str(err).splitlines()[0][:300]}).",
                                fix="run in a new output dir to start over, or remove that backup folder") from None
        done = self.model._initial_epoch
        if done is None:
            return
        if done >= self.last_epoch:
            raise TrainingError(f"the backup in {self.backup_dir} holds {done} completed epochs, and this run trains "
                                f"up to epoch {self.last_epoch}: there is nothing left to resume.",
                                fix=f"{self.epochs_key}={done - self.epochs_before + 1} or more to train on from the "
                                "backup, or run in a new output dir (or remove that backup folder) to start over")
        if self.catch_up is not None:
            backed_up = {int(epoch): values for epoch, values in self._read_logs().items() if int(epoch) < done}
            self.catch_up(backed_up)

    def on_epoch_end(self, epoch, logs=None):
        with uninterrupted():
            try:
                os.makedirs(self.backup_dir, exist_ok=True)
                self._require_room()
                self._write_logs(epoch, logs or {})  # before the weights: an entry past the backup is ignored
                super().on_epoch_end(epoch, logs)
            except (OSError, RuntimeError) as err:
                said = as_disk_full(err, self.backup_dir)
                if said is err:
                    raise
                gc.collect()  # h5py's half-written file objects, closed now rather than at interpreter exit
                raise said from None

    def _require_room(self) -> None:
        """Room for this epoch's backup, checked before writing it: HDF5 that runs out of disk in the
        middle of a file can leave it torn and crash the process at exit; refused here, the last good
        backup stays whole. Needed: the weights and optimizer state, and the copy of the previous backup."""
        variables = [*self.model.weights, *(self.model.optimizer.variables if self.model.optimizer else [])]
        state = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables)
        previous = os.path.getsize(self._weights_path) if os.path.exists(self._weights_path) else 0
        needed = int(state * 1.1) + previous + 32 * 1024  # HDF5's own overhead (~10 %), the metadata and logs
        if shutil.disk_usage(self.backup_dir).free < needed:
            raise OSError(errno.ENOSPC, f"No space left on device (the backup needs about {needed:,} bytes)",
                          self._weights_path)

    def _read_logs(self) -> dict:
        try:
            with open(self._logs_path, encoding="utf-8") as file:
                return json.load(file)
        except (OSError, ValueError):
            return {}

    def _write_logs(self, epoch: int, logs: dict) -> None:
        saved = self._read_logs()
        saved[str(epoch)] = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) or hasattr(v, "item")}
        partial = f"{self._logs_path}.partial"
        with open(partial, "w", encoding="utf-8") as file:
            json.dump(saved, file)
        os.replace(partial, self._logs_path)  # whole or not at all
