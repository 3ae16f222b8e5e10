"""MissedInterrupt: a Ctrl-C that a finalizer swallowed is raised again after the batch.

The signal handler raises KeyboardInterrupt wherever the main thread is. When that is inside a
finalizer (TensorFlow frees iterators and tensors through `__del__` and weakref callbacks, by the
thousand each epoch), Python prints "Exception ignored in ..." and drops it, and the run would
train on as if the key had not been pressed. The handler remembers what it raised until the run
has it; this callback raises it again at the next batch's end.
"""

from __future__ import annotations

import keras

from tfx_hydra.process import raise_missed_interrupt


class MissedInterrupt(keras.callbacks.Callback):
    """After every training, validation and prediction batch: an interrupt not yet received is raised again."""

    def on_train_batch_end(self, batch, logs=None) -> None:
        raise_missed_interrupt()

    def on_test_batch_end(self, batch, logs=None) -> None:
        raise_missed_interrupt()

    def on_predict_batch_end(self, batch, logs=None) -> None:
        raise_missed_interrupt()
