"""EpochClock: each epoch's wall time and examples/s, in its logs and on the terminal; and the learning rate
the epoch ended at (`lr`, in its logs: a schedule's rate, per epoch, in MLflow and the training curves);
its TFLOP/s and MFU where the step's FLOPs are counted (ComputeRate, before it); where the pipeline bound the epoch
(InputWait, before it), the line says so."""

from __future__ import annotations

import time
from typing import Callable

import keras

from tfx_hydra.console import epoch_line
from tfx_hydra.metrics import EPOCH_SECONDS, EPOCH_TIMING, EXAMPLES_PER_SEC, INPUT_WAIT, LEARNING_RATE, MFU, TFLOPS
from tfx_hydra.trainer.callbacks.compute_rate import said_flops, said_share
from tfx_hydra.trainer.callbacks.input_wait import input_bound_note


class EpochClock(keras.callbacks.Callback):
    """Adds `examples_per_sec` and `epoch_seconds` to Keras' epoch logs and shows the epoch's line.

    It runs before the tracking callback, so both values reach MLflow with the epoch's other
    metrics in the same batched write.
    """

    def __init__(self, num_examples: int | None, epochs: int, verbose: bool, batch_size: int = 1,
                 resumed_batches: Callable[[], int] = lambda: 0, compute=None) -> None:
        super().__init__()
        self.num_examples = num_examples  # None: a pipeline of unknown length, counted in batches of batch_size
        self.resumed_batches = resumed_batches  # of this epoch, trained before a mid-epoch resume: not timed here
        self.epochs = epochs  # of the whole run (both phases): the line says "epoch 3/5"
        self.verbose, self.batch_size = verbose, batch_size
        self._started, self._batches = 0.0, 0
        self.examples_trained = 0  # over the phase's epochs: its throughput
        self.compute = compute  # a ComputeRate: the epoch's TFLOP/s and MFU

    def on_epoch_begin(self, epoch, logs=None):
        self._started, self._batches = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self._batches = batch + 1  # a steps_per_execution bundle's last step

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started - (self.compute.take_spent() if self.compute else 0.0)
        examples = (max(0, self.num_examples - self.resumed_batches() * self.batch_size)
                    if self.num_examples is not None else self._batches * self.batch_size)
        self.examples_trained += examples
        if logs is not None:
            logs[EPOCH_SECONDS] = seconds
            logs[EXAMPLES_PER_SEC] = examples / seconds if seconds > 0 else 0.0
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None:
                logs[LEARNING_RATE] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        rate = self.compute.rate(examples / seconds) if self.compute and seconds > 0 else None
        if rate is not None and logs is not None:
            logs[TFLOPS], logs[MFU] = rate
        if self.verbose:
            hidden = (*EPOCH_TIMING, LEARNING_RATE, INPUT_WAIT, TFLOPS, MFU)
            compute = f"{said_flops(rate[0] * 1e12)}  mfu {said_share(rate[1])}" if rate else ""
            note = "  ".join(part for part in (compute, input_bound_note((logs or {}).get(INPUT_WAIT))) if part)
            epoch_line(epoch, self.epochs, logs or {}, examples, seconds, hidden=hidden, note=note)
