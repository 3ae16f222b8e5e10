"""EpochBackup: one backup per epoch that any kill can resume from."""

from __future__ import annotations

import errno
import json
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from tfx_hydra.errors import TrainingError
from tfx_hydra.process import disk_full_said, uninterrupted


class EpochBackup(keras.callbacks.BackupAndRestore):
    """Keras' BackupAndRestore (one backup per epoch, the previous one kept in case the last write
    is torn: double_checkpoint), made safe to resume from after any kill:

    - Ctrl-C/SIGTERM wait while an epoch is backed up (process.uninterrupted), so a KILLED run
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
        with uninterrupted(), disk_full_said(self.backup_dir):
            os.makedirs(self.backup_dir, exist_ok=True)
            self._require_room()
            self._write_logs(epoch, logs or {})  # before the weights: an entry past the backup is ignored
            super().on_epoch_end(epoch, logs)

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
