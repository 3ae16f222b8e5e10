"""MissedInterrupt: a Ctrl-C that a finalizer swallowed is raised again after the batch; without a backup, a
signal that waited for the step in flight (process.stopped_at_a_step) stops the run there.

The signal handler raises KeyboardInterrupt wherever the main thread is. When that is inside a
finalizer (TensorFlow frees iterators and tensors through `__del__` and weakref callbacks, by the
thousand each epoch), Python prints "Exception ignored in ..." and drops it, and the run would
train on as if the key had not been pressed. The handler remembers what it raised until the run
has it; this callback raises it again at the next batch's end.

During training a signal waits for the step in flight rather than landing inside Keras' and TensorFlow's own
code. With a backup, the backup callback writes one at that step and stops (epoch_backup.py); without one, this
callback stops at the batch's end, validation's batches included.
"""

from __future__ import annotations

import keras

from tfx_hydra.process import raise_missed_interrupt, stop_now, stop_requested


class MissedInterrupt(keras.callbacks.Callback):
    """After every training, validation and prediction batch: an interrupt not yet received is raised again;
    with `stops_at_batches` (a run without a backup), a signal waiting for the step stops the run."""

    def __init__(self, stops_at_batches: bool = False) -> None:
        super().__init__()
        self.stops_at_batches = stops_at_batches

    def _check(self) -> None:
        raise_missed_interrupt()
        if self.stops_at_batches and stop_requested():
            stop_now()

    def on_train_batch_end(self, batch, logs=None) -> None:
        self._check()

    def on_test_batch_end(self, batch, logs=None) -> None:
        self._check()

    def on_predict_batch_end(self, batch, logs=None) -> None:
        self._check()
