"""InputWait: the share of each epoch's training time the steps spent waiting for data, without a profiler.

Keras' train function takes the data from the pipeline's iterator inside the step, so a step's time is its wait
plus its compute. Each call is timed (two clock reads); on a few calls of each epoch (MEASURED_CALLS,
MEASURED_EVERY: not after an epoch too short to judge) the batches are taken from the iterator first and the step
is timed alone (Keras' own train function, fed the batches taken through an iterator of the same kind:
`ready_iterator`), which gives the epoch's compute per step. The epoch's wait is then its steps' time less their
compute: `input_wait` = 1 - compute x steps / the steps' time, logged per epoch. Fit's first call traces the step:
only its wait for data counts (a shuffle buffer's first fill, say). When it passes INPUT_BOUND the epoch's line
says so with the levers that fit, and the run's summary says it once. A measured call holds its batches in memory
at once (and their joined copy): a run whose call's batches take more than MEASURED_BYTES (160x160 images under
64 steps per call: 600 MiB) is not measured, rather than pay that memory (trainer.steps_per_execution=8 measures
it). An epoch whose steps took under MIN_SECONDS,
or of fewer calls than it takes to measure (the digits under steps_per_execution), logs no `input_wait`: where
waiting could matter, epochs are longer. Nor does a run under a distribution strategy of several replicas or
workers: they step in lockstep, and a call measured on one and not on another would break it.
"""

from __future__ import annotations

import time

import keras
import tensorflow as tf

from tfx_hydra.metrics import INPUT_WAIT

INPUT_BOUND = 0.2  # above it, the epoch (and the run) says the pipeline binds
MEASURED_CALLS = (2,)  # the calls of an epoch timed without their wait, near its start...
MEASURED_EVERY = 100  # ...and every 100th: a measured call of 64 steps costs ~40 ms more (its batches taken one by
# one in Python), 3 % of the seed MLP's 1.3 s epoch: so measured only where an epoch is long enough to be judged
MEASURED_BYTES = 64 << 20  # the most a measured call's batches may take (the joined copy doubles it)
MIN_SECONDS = 2.0  # an epoch whose steps took less is not judged: a few clock reads' noise would be its figure
LEVERS = ("data.map_parallelism=auto", "data.prefetch=auto", "TFRecords for many small files (python -m "
          "tfx_hydra.data.to_tfrecord)")
CACHE_LEVER = "data.cache=auto (decoded once, read from memory or disk)"
SERVICE_LEVER = ("data.service=grpc://host:port (the decoding on tf.data service workers on other machines; "
                 "data.service=local: on spare cores of this one)")
SERVED_LEVER = "more tf.data service workers (data.service_workers=N, or more on your dispatcher)"


def input_bound_note(share: float | None) -> str:
    """The epoch line's note where the pipeline binds: 'input-bound: 62% waiting for data (the summary: levers)'."""
    return f"input-bound: {share:.0%} waiting for data" if share is not None and share > INPUT_BOUND else ""


class InputWait(keras.callbacks.Callback):
    """Measures each epoch's `input_wait` (see the module's docstring); `said` is the run's one line, if any."""

    def __init__(self, cached: bool = False, spec=None, batch_size: int = 32, served: bool = False) -> None:
        super().__init__()
        self.spec, self.batch_size = spec, batch_size  # the training batches': what a measured call holds
        # `cached`: the splits already are; `served`: read from tf.data service (data.service), decoded every epoch
        self.levers = (SERVED_LEVER, *LEVERS) if served else \
            (*(() if cached else (CACHE_LEVER,)), *LEVERS, SERVICE_LEVER)
        self.worst: tuple[float, int] | None = None  # the most input-bound epoch's (share, epoch)
        self._real = None
        self._traced = False  # fit's first call traces the step: its time is not the data's
        self._measuring = True  # until an epoch proves too short to judge: then the rest of the run is not measured

    @property
    def said(self) -> str | None:
        """'input-bound: 62 % of epoch 3's training time waited for data; the levers: ...', once per run."""
        if self.worst is None or self.worst[0] <= INPUT_BOUND:
            return None
        share, epoch = self.worst
        return f"{share:.0%} of epoch {epoch + 1}'s training time waited for data; the levers: {', '.join(self.levers)}"

    def on_train_begin(self, logs=None):
        self._real = self.model.train_function
        self.model.train_function = self._timed
        self._measuring = self._measuring and self._call_bytes() <= MEASURED_BYTES

    def on_train_end(self, logs=None):
        if self._real is not None and self.model.train_function == self._timed:
            self.model.train_function = self._real

    def on_epoch_begin(self, epoch, logs=None):
        self._calls, self._steps, self._seconds, self._compute = 0, 0, 0.0, []

    def on_epoch_end(self, epoch, logs=None):
        if self._seconds < MIN_SECONDS:
            self._measuring = False  # epochs this short are not judged: their measured calls would only cost
        if not self._compute or self._seconds < MIN_SECONDS or logs is None:
            return
        per_step = sum(seconds for seconds, _ in self._compute) / sum(steps for _, steps in self._compute)
        share = min(1.0, max(0.0, 1.0 - per_step * self._steps / self._seconds))
        logs[INPUT_WAIT] = share
        if self.worst is None or share > self.worst[0]:
            self.worst = (share, epoch)

    def _timed(self, iterator):
        if not isinstance(iterator, tf.data.Iterator):  # a distributed one: replicas (and workers) step together, and
            return self._real(iterator)  # a call measured on one and not another would break their lockstep
        self._calls += 1
        if not self._traced:  # its step is traced: its data's wait counts (a shuffle buffer's first fill), its
            self._traced = True  # step's time does not
            return self._measured(iterator, tracing=True) if self._measuring else self._real(iterator)
        if self._measuring and (self._calls in MEASURED_CALLS or self._calls % MEASURED_EVERY == 0):
            return self._measured(iterator)
        started = time.perf_counter()
        outputs = self._real(iterator)
        self._seconds += time.perf_counter() - started
        self._steps += self._per_call
        return outputs

    def _measured(self, iterator, tracing: bool = False):
        """A call whose batches are taken before its step is timed: the step's compute alone (unless `tracing`)."""
        started = time.perf_counter()
        batches = []
        for _ in range(self._per_call):
            try:
                batches.append(next(iterator))
            except (StopIteration, tf.errors.OutOfRangeError):
                break
        if not batches:
            raise StopIteration  # Keras' own signal that the epoch's data is spent
        ready = ready_iterator(batches, iterator)
        taken = time.perf_counter()
        outputs = self._real(ready)
        keras.ops.convert_to_numpy(next(iter(outputs.values())))  # done, not only queued (a GPU runs ahead)
        ended = time.perf_counter()
        if tracing:
            self._seconds += taken - started
            return outputs
        self._compute.append((ended - taken, len(batches)))
        self._seconds += ended - started
        self._steps += len(batches)
        return outputs

    def _call_bytes(self) -> int:
        """What one call's batches take, from the training data's spec (text counts nothing: its size varies)."""
        if self.spec is None:
            return 0
        example = sum(int(s.shape[1:].num_elements() or 0) * s.dtype.size for s in tf.nest.flatten(self.spec)
                      if s.dtype != tf.string and s.shape[1:].is_fully_defined())
        return example * self.batch_size * self._per_call

    @property
    def _per_call(self) -> int:
        return max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))


def ready_iterator(batches: list, iterator):
    """The batches taken, as an iterator Keras' train function reads the way it reads the pipeline's (its own
    compiled loop, the same element spec: no new trace), so the timed call differs from the others only in
    having its data ready. A spec that cannot be matched goes as a list: Keras then runs its step on each, a
    little slower, which can only under-state the wait."""
    spec = iterator.element_spec
    size = int(tf.nest.flatten(batches[0])[0].shape[0])
    joined = tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *batches)  # one tensor per input
    ready = tf.data.Dataset.from_tensors(joined).unbatch().batch(size)  # the same batches, in the same order
    return iter(ready) if ready.element_spec == spec else iter(batches)
