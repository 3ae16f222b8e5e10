"""keras_fix: Keras 3's `fit` under more than one replica, made to work (the strategy step applies it).

On TF 2.21 / Keras 3.15, `model.fit` under `tf.distribute.MultiWorkerMirroredStrategy`
fails twice over (https://github.com/keras-team/keras/issues/20585, open since Keras 3.7):

1. `TensorFlowTrainer._maybe_symbolic_build` hands a `PerReplica` batch to the symbolic
   build ("Attempt to convert a value (PerReplica:{...}) ... to a Tensor"). The build
   only needs shapes and dtypes, so we give it the first local replica's batch. Under
   MirroredStrategy Keras averages the replicas' batches instead, which fails on raw strings
   (a text model: "Value for attr 'T' of string is not in the list of allowed values" from AddN):
   the first replica's batch serves there too.
2. `reduce_per_replica` reduces multi-worker metric results with `axis=0`, which fails on
   the scalar metrics every training step returns ("Invalid reduction dimension 0").
   Scalars are reduced with `axis=None` instead; tensors keep `axis=0`.

The first fix applies under every strategy of several replicas (the mirrored and multi-worker
factories install it), the second only under MultiWorkerMirroredStrategy; both only to the Keras
versions they were verified on, and only once. Everything else keeps Keras' own code. And Keras' multi-step
loop fails under any strategy of more than one replica: `plan_batches` caps steps_per_execution there.
"""


from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Verified broken and fixed by this module: Keras 3.7 through 3.15. Widen after checking a
# new release with tests/e2e/test_keras_multi_worker_fix.py (it shows whether plain Keras still fails).
PATCHED_KERAS = ((3, 7), (3, 15))
UPSTREAM_ISSUE = "https://github.com/keras-team/keras/issues/20585"

# Keras' multi-step loop (steps_per_execution > 1) fails under any strategy with more than one
# replica, MirroredStrategy and MultiWorkerMirroredStrategy alike, on TF 2.21 / Keras 3.15
# ("You must feed a value for placeholder tensor 'while/cond/Placeholder'"; keras-team/keras#19246,
# open). One step per call trains correctly; plan_batches caps it there.
MULTI_REPLICA_MAX_STEPS_PER_EXECUTION = 1
MULTI_REPLICA_ISSUE = "https://github.com/keras-team/keras/issues/19246"

_applied = False


def needs_multi_worker_fix(version: str) -> bool:
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    return PATCHED_KERAS[0] <= major_minor <= PATCHED_KERAS[1]


def apply_keras_fixes() -> bool:
    """Patch Keras' TensorFlow trainer for fit under several replicas (the first batch's build; multi-worker
    metrics); True if the patch is in place."""
    global _applied
    import keras

    if _applied:
        return True
    if not needs_multi_worker_fix(keras.version()):
        return False
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer as tf_trainer

    original_build = tf_trainer.TensorFlowTrainer._maybe_symbolic_build
    original_reduce = tf_trainer.reduce_per_replica

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is None or self._distribute_strategy is None:
            return original_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            batch = next(it)
            data_batch = tf.nest.map_structure(lambda x: self.distribute_strategy.experimental_local_results(x)[0]
                                               if isinstance(x, tf.distribute.DistributedValues) else x, batch)
            break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not _is_multi_worker(strategy):
            return original_reduce(values, strategy, reduction)

        def mean(value):
            axis = 0 if value.shape.rank else None  # scalars (every metric) have no axis 0
            return strategy.reduce("MEAN", value, axis=axis)

        return tf.nest.map_structure(mean, values)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    tf_trainer.reduce_per_replica = reduce_per_replica
    _applied = True
    return True


def _is_multi_worker(strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
