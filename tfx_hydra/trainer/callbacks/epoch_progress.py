"""EpochProgress: a progress bar inside each epoch when the terminal is interactive.

Batches done of the epoch's total, examples/s, the epoch's time left and the run's, drawn by rich on the console the
run's log lines use (so a warning prints above the bar, not through it). Keras calls a batch's
end once per `steps_per_execution` bundle: the bar moves at those boundaries and costs one
update per bundle, nothing per step. Off when the output is not a terminal (CI, Slurm logs,
Hydra's job log, a parallel launcher's workers) and with trainer.verbose=false: the epoch lines
are all those see.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import keras

from tfx_hydra.trainer.callbacks.midway import short_duration, time_left


def terminal_console():
    """The rich console of the run's terminal log handler, if it draws on an interactive terminal that is the
    run's alone: a job of a launcher that runs jobs side by side (joblib, submitit) shares it with the others,
    whose bars and lines would cut into its own (its epoch lines still say how it goes)."""
    from tfx_hydra.console import TerminalHandler, parallel_job_label

    if parallel_job_label():
        return None
    for handler in logging.getLogger().handlers:
        if isinstance(handler, TerminalHandler) and handler.console.is_terminal:
            return handler.console
    return None


class EpochProgress(keras.callbacks.Callback):
    """One transient rich bar per epoch, gone when the epoch's line is printed."""

    def __init__(self, console, num_examples: int | None, epochs: int,
                 resumed_batches: Callable[[], int] = lambda: 0) -> None:
        super().__init__()
        self.console = console
        self.resumed_batches = resumed_batches  # of this epoch, trained before a mid-epoch resume (EpochBackup)
        self.num_examples = num_examples
        self.epochs = epochs  # of the whole run (both phases)
        self._progress = None
        self._task = None
        self.updates = 0  # bar updates drawn: one per steps_per_execution bundle
        self.last_epoch_seconds: float | None = None  # the run's time left counts later epochs as long

    def on_epoch_begin(self, epoch, logs=None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        steps = (self.params or {}).get("steps") or None
        self._per_batch = self.num_examples / steps if steps and self.num_examples is not None else 0
        self._progress = Progress(TextColumn(f"epoch {epoch + 1}/{self.epochs}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                  TextColumn("{task.fields[run]}"), console=self.console, transient=True,
                                  auto_refresh=False)
        self._progress.start()
        self._task = self._progress.add_task("train", total=steps, rate="", run="")
        self._epoch, self._started = epoch, time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._progress is None:
            return
        total, before = self._progress.tasks[0].total, self.resumed_batches()
        done = before + batch + 1 if total is None else min(before + batch + 1, total)  # a bundle's last step
        # since the epoch began, not rich's own speed: that needs two updates, and an epoch of one
        # steps_per_execution bundle (the digits: 41 batches, bundles of 64) has one
        elapsed = time.perf_counter() - self._started
        rate = f"{(done - before) * self._per_batch / elapsed:,.0f} ex/s" if self._per_batch and elapsed > 0 else ""
        left = time_left(done, total, elapsed, self._epoch, self.epochs, self.last_epoch_seconds, before)
        run = f"run {short_duration(left[1])} left" if left and self._epoch + 1 < self.epochs else ""
        self._progress.update(self._task, completed=done, rate=rate, run=run, refresh=True)
        self.updates += 1

    def on_epoch_end(self, epoch, logs=None):
        self.last_epoch_seconds = time.perf_counter() - self._started
        self.stop()

    def on_train_end(self, logs=None):
        self.stop()

    def stop(self):
        """Erase the bar (it is transient) and release the console; the trainer calls it when a fit ends
        by an exception, which Keras ends no epoch for."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
