"""EpochBackup: a backup at each epoch's end, and within epochs every trainer.backup_every, that any kill
can resume from; SIGTERM and Slurm's warning back up at the step in flight."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from tfx_hydra.errors import TrainingError
from tfx_hydra.process import disk_full_said, stop_now, stop_requested, uninterrupted

AUTO_EVERY_SECONDS = 600  # backup_every=auto: every 10 minutes...
AUTO_COST_SHARE = 50  # ...or 50x the last backup's write time if longer: a backup costs under 2 % of the time


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
    - Within an epoch (`every`: seconds, steps, or "auto"), and at the step in flight when SIGTERM or
      SIGUSR2 asks the run to stop (process.stopped_at_a_step), the backup holds the step reached in the
      epoch, the epoch's running metric totals and the model's random-number state (dropout's seeds), which
      Keras' weights file leaves out. A run resumed from it skips the epoch's batches already trained (the
      epoch's order is the same in any process: data/epoch_order.py) and ends that epoch with the metrics
      and, with trainer.deterministic=true, the weights of the run that was never interrupted.
    """

    LOGS_FILE = "epoch_logs.json"

    def __init__(self, backup_dir: str, last_epoch: int, catch_up=None, epochs_key: str = "trainer.epochs",
                 epochs_before: int = 0, every: tuple[float | None, int | None] | str | None = None,
                 steps_per_epoch: int | None = None, within_epochs: bool = True, on_trained=None) -> None:
        # the backup outlives fit: `on_trained` replaces it with what the phase ended with (trainer/trained.py)
        super().__init__(backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False)
        self.on_trained = on_trained  # called with every epoch's saved logs as training ends, signals held
        self.last_epoch = last_epoch  # the phase trains up to this epoch (epochs_before + the phase's epochs)
        self.catch_up = catch_up  # called with {epoch: logs} of the backed-up epochs on resume
        self.epochs_key, self.epochs_before = epochs_key, epochs_before  # for the fix: the key that sets this phase
        self._logs_path = os.path.join(backup_dir, self.LOGS_FILE)
        self.every_seconds, self.every_steps = (None, None) if every in (None, "auto") else every
        self.auto = every == "auto"
        self.steps_per_epoch = steps_per_epoch  # the epoch's batches: a backup at the last one is the epoch's
        # False for a pipeline of unknown length: Keras learns an epoch's batches from the first epoch it runs,
        # and a resumed epoch would teach it too few, so such a run backs up at epoch ends only
        self.within_epochs = within_epochs
        self.write_seconds = 0.0  # the last backup's write time (auto spaces backups by it)
        self._position = (0, 0)  # (epoch, batches of it trained) of the state being saved
        self._resume: tuple[int, int, dict] | None = None  # a mid-epoch backup's (epoch, batches, state)
        self._done = self._since = 0  # batches of this epoch trained; since the last backup
        self._skipped = 0  # batches of this epoch trained before a mid-epoch resume (Keras counts after them)
        self._train_function = None  # Keras' own, while the resumed epoch runs with ours (resumed_epoch)
        self._trained_epoch_logs: dict = {}  # a resumed epoch whose batches were all trained: its figures
        self._last_epoch_trained: dict | None = None  # the last epoch's running metrics after its last step
        self._last_time = time.monotonic()

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
        if done > self.last_epoch:
            raise TrainingError(f"the backup in {self.backup_dir} holds {done} completed epochs, and this run trains "
                                f"up to epoch {self.last_epoch}: there is nothing left to resume.",
                                fix=f"{self.epochs_key}={done - self.epochs_before + 1} or more to train on from the "
                                "backup, or run in a new output dir (or remove that backup folder) to start over")
        if self.catch_up is not None:
            backed_up = {int(epoch): values for epoch, values in self._read_logs().items() if int(epoch) < done}
            self.catch_up(backed_up)
        self._resume_midway(done)

    def on_train_end(self, logs=None):
        """Training's end (every epoch trained; after early stopping's or KeepBest's restore and the EMA's swap):
        what the phase ended with is written, and replaces the epoch backup, before a signal is taken. A backup
        that already held every epoch (a kill between the last epoch's backup and this) ends here too: fit then
        trained no epoch, and the epochs' logs come from the backup."""
        super().on_train_end(logs)
        if self.on_trained is not None:
            with uninterrupted(), disk_full_said(self.backup_dir):
                os.makedirs(self.backup_dir, exist_ok=True)
                self.on_trained(self._read_logs())

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch, self._done, self._skipped = epoch, 0, 0
        self._last_epoch_trained = None
        if self._resume and self._resume[0] == epoch:  # the epoch a mid-epoch backup was written in
            _, self._done, state = self._resume
            self._skipped, self._resume = self._done, None
            assign(self.model.metrics_variables, state.get("metrics", {}))  # after Keras reset them
            if self.steps_per_epoch and self._done >= self.steps_per_epoch:  # stopped after its last step
                self._trained_epoch_logs = {name: float(value) for name, value in
                                            self.model.get_metrics_result().items()}
                if epoch == self.last_epoch - 1:  # stopped again in its validation: the same backup again
                    self._last_epoch_trained = state.get("metrics", {})

    def resumed_batches(self) -> int:
        """Batches of the epoch under way that the process this run resumed from had trained (a mid-epoch
        backup's), 0 in any other epoch: the lines that number an epoch's batches count on from them."""
        return self._skipped

    def fill_in_a_trained_epoch(self, epoch, logs=None):
        """At the end of a resumed epoch that trained no batch (the backup came after its last one), Keras' logs
        hold validation's figures only: the training figures the backup restored join them. Called first of the
        epoch's callbacks (fit.py), so the epoch's line, MLflow and History all have them."""
        if self._trained_epoch_logs and logs is not None:
            ordered = {**self._trained_epoch_logs, **logs}  # training's first, as an epoch that trained has them
            logs.clear()
            logs.update(ordered)
        self._trained_epoch_logs = {}

    def on_train_batch_begin(self, batch, logs=None):
        if stop_requested():  # asked after the last step ended (during validation, at an epoch's end)
            self._backup_now_and_stop()

    def on_train_batch_end(self, batch, logs=None):
        done = self._done_after(batch)
        self._since += done - self._done
        self._done = done
        if stop_requested():
            self._backup_now_and_stop()
        if self.within_epochs and self._due() and not (self.steps_per_epoch and done >= self.steps_per_epoch):
            self._back_up_at(done)
        if self.within_epochs and self.steps_per_epoch and done >= self.steps_per_epoch and \
                self._current_epoch == self.last_epoch - 1:  # what a stop in its validation backs up (below)
            self._last_epoch_trained = values_of(self.model.metrics_variables)

    def on_epoch_end(self, epoch, logs=None):
        if self._train_function is not None:  # the resumed epoch is over: Keras' own function from here
            self.model.train_function, self._train_function = self._train_function, None
        if stop_requested() and self._last_epoch_trained is not None:
            # asked to stop during the last epoch's validation: Keras would end the fit as if it were whole and
            # delete the backup, and the run would be lost. It is backed up at its last step instead (with its
            # training figures), and stops before its end: the same command validates it again and goes on.
            self._back_up_at(self.steps_per_epoch)
            stop_now()
        with uninterrupted(), disk_full_said(self.backup_dir):
            os.makedirs(self.backup_dir, exist_ok=True)
            self._require_room()
            self._write_logs(epoch, logs or {})  # before the weights: an entry past the backup is ignored
            self._position = (epoch + 1, 0)
            self._timed(lambda: super(EpochBackup, self).on_epoch_end(epoch, logs))

    # --- within an epoch ------------------------------------------------------------------------------

    def _done_after(self, batch: int) -> int:
        """Batches of the epoch trained once Keras' `batch` (a bundle's last, under steps_per_execution) ended;
        Keras counts a resumed epoch's batches from 0, after those skipped."""
        done = self._skipped + batch + 1
        return min(done, self.steps_per_epoch) if self.steps_per_epoch else done

    def _due(self) -> bool:
        if self.every_steps:
            return self._since >= self.every_steps
        seconds = max(AUTO_EVERY_SECONDS, AUTO_COST_SHARE * self.write_seconds) if self.auto else self.every_seconds
        return bool(seconds) and time.monotonic() - self._last_time >= seconds

    def _back_up_at(self, done: int) -> None:
        with uninterrupted(), disk_full_said(self.backup_dir):
            os.makedirs(self.backup_dir, exist_ok=True)
            self._require_room()
            self._position = (self._current_epoch, done)
            self._timed(self._save_model)

    def _backup_now_and_stop(self) -> None:
        if self._done and self.within_epochs:  # else the epoch-end backup is where the run is
            self._back_up_at(self._done)
        stop_now()

    def _timed(self, write) -> None:
        started = time.monotonic()
        write()
        self._last_time, self._since = time.monotonic(), 0
        self.write_seconds = self._last_time - started

    def _save_model(self):
        """Keras' save (the previous backup kept, the weights, its metadata), then the metadata again, whole,
        with where in the epoch this is and, mid-epoch, what the weights file leaves out."""
        super()._save_model()
        epoch, done = self._position
        metadata = {"epoch": epoch, "batch": done}
        if done:
            trained = self._last_epoch_trained  # the last epoch's training figures: validation's are there now
            metrics = trained if trained is not None else values_of(self.model.metrics_variables)
            metadata["state"] = {"metrics": metrics, "random": values_of(random_state(self.model))}
        write_whole(self._training_metadata_path, metadata)

    def _resume_midway(self, epoch: int) -> None:
        """A backup written within `epoch`: the model's random state back now; the epoch's trained batches
        skipped on fit's first step; its running metrics back when it begins (Keras resets them first)."""
        try:
            with open(self._training_metadata_path, encoding="utf-8") as file:
                metadata = json.load(file)
        except (OSError, ValueError):
            return
        done, state = int(metadata.get("batch") or 0), metadata.get("state") or {}
        if not done:
            return
        assign(random_state(self.model), state.get("random", {}))
        self._resume = (epoch, done, state)
        remaining = max(0, self.steps_per_epoch - done) if self.steps_per_epoch else 0
        self._train_function = resumed_epoch(self.model, done, remaining)
        # the resumed epoch ends short of the batches Keras counted for it: by design, not a short dataset
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)

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
        write_whole(self._logs_path, saved)


def resumed_epoch(model, skipped: int, remaining: int):
    """Fit's train function for the epoch a mid-epoch backup resumes: its first call reads and drops the
    `skipped` batches (trained before the backup), and once the `remaining` ones are trained the epoch ends
    (StopIteration, Keras' own signal for an epoch's end). Keras would otherwise call once more on a spent
    iterator, which fails only after advancing the optimizer's step count and dropout's seeds: the run
    would no longer be the uninterrupted one. Returns the function to put back when the epoch ends."""
    train_function = model.train_function
    per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    left = {"skip": skipped, "calls": -(-remaining // per_call)}

    def train_the_rest(iterator):
        for _ in range(left["skip"]):
            next(iterator)
        left["skip"] = 0
        if left["calls"] == 0:
            raise StopIteration
        left["calls"] -= 1
        return train_function(iterator)

    model.train_function = train_the_rest
    return train_function


def random_state(model) -> list:
    """The model's variables Keras' weights file leaves out: its layers' seed generators (dropout's draws)."""
    saved = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in saved]


def values_of(variables) -> dict:
    return {v.path: np.asarray(keras.ops.convert_to_numpy(v)).tolist() for v in variables}


def assign(variables, values: dict) -> None:
    for variable in variables:
        if variable.path in values:
            variable.assign(np.asarray(values[variable.path], dtype=keras.backend.standardize_dtype(variable.dtype)))


def write_whole(path: str, content: dict) -> None:
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(content, file)
    os.replace(partial, path)  # whole or not at all
