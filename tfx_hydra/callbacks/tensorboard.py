"""TensorBoardWithGraph: Keras' TensorBoard, plus the op-level graph of the forward pass and profiled
batches the profiler counts as steps."""

from __future__ import annotations

import keras
import tensorflow as tf


class TensorBoardWithGraph(keras.callbacks.TensorBoard):
    """Keras 3 writes only the conceptual graph (the model config; its docs: write_graph "not
    supported at this time"), so the op-level graph of the forward pass is traced and written
    here once, for TensorBoard's Graphs tab.

    Keras 3 also marks each profiled batch with a trace that has a step number but not the root
    flag (`_r=1`) TensorFlow's profiler looks for, so its Profile tab said "No step marker observed"
    and showed no step time and no input-pipeline share. Each profiled batch is marked here as
    Keras 2 and TensorFlow's guide mark a step: `Trace("train", step_num=..., _r=1)`."""

    @classmethod
    def from_config(cls, trainer, log_dir: str) -> "TensorBoardWithGraph":
        """From trainer.tensorboard_*: epoch scalars, weight histograms every `tensorboard_histogram_freq`
        epochs, the op graph, and a profile of `tensorboard_profile_batches` ([first, last]) if asked."""
        profile = trainer.tensorboard_profile_batches
        return cls(log_dir=log_dir, histogram_freq=trainer.tensorboard_histogram_freq, write_graph=True,
                   update_freq="epoch", profile_batch=tuple(profile) if profile else 0)

    def on_train_batch_begin(self, batch, logs=None):
        super().on_train_batch_begin(batch, logs)
        if getattr(self, "_batch_trace_context", None) is not None:  # Keras' marker for this batch: ours instead
            self._batch_trace_context.__exit__(None, None, None)
            self._batch_trace_context = tf.profiler.experimental.Trace(  # numbered as profile_batch counts
                "train", step_num=self._global_train_batch, _r=1)
            self._batch_trace_context.__enter__()

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        forward = tf.function(lambda inputs: self.model(inputs, training=False))
        spec = tf.TensorSpec((None, *self.model.inputs[0].shape[1:]), tf.float32)
        with self._train_writer.as_default():
            tf.summary.graph(forward.get_concrete_function(spec).graph)
