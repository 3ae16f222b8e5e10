"""TensorBoardWithGraph: Keras' TensorBoard, plus the op-level graph of the forward pass."""

from __future__ import annotations

import keras
import tensorflow as tf


class TensorBoardWithGraph(keras.callbacks.TensorBoard):
    """Keras 3 writes only the conceptual graph (the model config; its docs: write_graph "not
    supported at this time"), so the op-level graph of the forward pass is traced and written
    here once, for TensorBoard's Graphs tab."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        forward = tf.function(lambda inputs: self.model(inputs, training=False))
        spec = tf.TensorSpec((None, *self.model.inputs[0].shape[1:]), tf.float32)
        with self._train_writer.as_default():
            tf.summary.graph(forward.get_concrete_function(spec).graph)
