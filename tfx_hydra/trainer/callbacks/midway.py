"""MidwayReport: how a long epoch goes before it ends, every trainer.log_every (a duration or a number of
steps): a line in log-only output (CI, Slurm logs, a parallel launcher's workers; a terminal has its bar),
and the epoch's running metrics in MLflow at the global step, so a 3-hour epoch has a curve.

Keras hands a batch's end the epoch's running means (loss, metrics) as tensors: they are read only when a
report is due, so a step between reports costs one clock read.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import keras

from tfx_hydra.console import BARE
from tfx_hydra.console.tables import format_value

log = logging.getLogger(__name__)
RUNNING = "running_"  # MLflow's name for an epoch's running mean: running_loss, running_accuracy


def short_duration(seconds: float) -> str:
    """3h 02m, 20m 12s, 45s."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds}s"


def time_left(done: int, total: int | None, elapsed: float, epoch: int, epochs: int,
              epoch_seconds: float | None, before: int = 0) -> tuple[float, float] | None:
    """(the epoch's seconds left, the run's): this epoch at its pace so far (`done - before` batches in
    `elapsed`: `before` were trained by the process a mid-epoch backup resumed from), each later epoch as long
    as the last whole one (else as this one is going)."""
    here = done - before
    if not total or here <= 0 or elapsed <= 0:
        return None
    epoch_left = elapsed / here * (total - done)
    whole = epoch_seconds or elapsed / here * total
    return epoch_left, epoch_left + whole * (epochs - epoch - 1)


class MidwayReport(keras.callbacks.Callback):
    """Every `seconds` or `steps` within an epoch: the line (when `say`), and the running metrics to MLflow."""

    def __init__(self, seconds: float | None, steps: int | None, num_examples: int | None, epochs: int, tracker,
                 say: bool, resumed_batches: Callable[[], int] = lambda: 0) -> None:
        super().__init__()
        self.seconds, self.steps, self.tracker, self.say = seconds, steps, tracker, say
        self.num_examples, self.epochs = num_examples, epochs
        self.resumed_batches = resumed_batches  # of this epoch, trained before a mid-epoch resume (EpochBackup)
        self.last_epoch_seconds: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._started = epoch, time.perf_counter()
        self._last_time, self._last_step = self._started, 0

    def on_epoch_end(self, epoch, logs=None):
        self.last_epoch_seconds = time.perf_counter() - self._started

    def on_train_batch_end(self, batch, logs=None):
        total, before = (self.params or {}).get("steps"), self.resumed_batches()
        now = time.perf_counter()
        done = before + batch + 1 if not total else min(before + batch + 1, total)  # a call's last step
        self._last_step = max(self._last_step, before)  # a resumed epoch's reports count on from where it was
        due = (self.seconds is not None and now - self._last_time >= self.seconds) or \
              (self.steps is not None and done - self._last_step >= self.steps)
        if not due or not logs:
            return
        self._last_time, self._last_step = now, done
        values = {key: float(keras.ops.convert_to_numpy(value)) for key, value in logs.items()}
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else done
        self.tracker.log_metrics({f"{RUNNING}{key}": value for key, value in values.items()}, step=step)
        self.tracker.flush()
        if self.say:
            self._say(done, total, values, now - self._started, before)

    def _say(self, done: int, total: int | None, values: dict[str, float], elapsed: float, before: int) -> None:
        per_batch = self.num_examples / total if total and self.num_examples is not None else 0
        shown = "  ".join(f"{key} {format_value(value)}" for key, value in values.items())
        rate = f"  {(done - before) * per_batch / elapsed:,.0f} ex/s" if per_batch else ""
        left = time_left(done, total, elapsed, self._epoch, self.epochs, self.last_epoch_seconds, before)
        until = f"  left: epoch {short_duration(left[0])}, run {short_duration(left[1])}" if left else ""
        log.info(f"epoch {self._epoch + 1}/{self.epochs}  batch {done:,}/{total:,}  {shown}{rate}{until}"
                 if total else f"epoch {self._epoch + 1}/{self.epochs}  batch {done:,}  {shown}{rate}", extra=BARE)
