"""EpochOrder: the training split's order in an epoch is a function of data.seed and the epoch's number alone.

tf.data's `shuffle(reshuffle_each_iteration=True)` draws each epoch's order from how many times the dataset
was iterated in this process: a run resumed from its backup at epoch 3 would shuffle epoch 3 as a fresh run
shuffles epoch 0, and a resumed epoch's first batches (skipped, having been trained before the interruption)
would not be the ones trained. Here the shuffle's seed is `data.seed` and the epoch number, read from a
variable the trainer sets as each epoch begins (trainer/callbacks/epoch_backup.py), so epoch k's batches are the same
whichever process trains it. The cache before the shuffle is shared by every epoch, as before.
"""

from __future__ import annotations

EPOCH_STRIDE = 1_000_003  # a prime: data.seed s and epoch k seed s + k x stride, distinct across near seeds


class EpochOrder:
    """The training split's epoch number, as the pipeline reads it when an epoch's iteration starts."""

    def __init__(self) -> None:
        self._epoch = None  # a tf.Variable, made when a shuffled training split is built

    def shuffled(self, dataset, buffer: int, seed: int, num_examples: int):
        """`dataset` shuffled in a `buffer`, in the order of (seed, the epoch set by `set_epoch`)."""
        import tensorflow as tf

        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_order")
        epoch = self._epoch

        def one_epoch(_):
            # the graph-level seed of this function alone (it is traced, not eager): the order is data.seed's and
            # the epoch's whatever the process' global seed, and tf.data's seed check, which compares the pair
            # with (0, 0), never meets a global seed of 0 beside a seed that is a tensor
            tf.random.set_seed(EPOCH_STRIDE)
            return dataset.shuffle(buffer, seed=seed + EPOCH_STRIDE * epoch, reshuffle_each_iteration=False)

        # one epoch's worth, of the count the split has (Keras sizes the epoch from it)
        return tf.data.Dataset.range(1).flat_map(one_epoch).apply(tf.data.experimental.assert_cardinality(
            num_examples))

    def set_epoch(self, epoch: int) -> None:
        if self._epoch is not None:
            self._epoch.assign(epoch)

    @property
    def keyed(self) -> bool:
        """Whether the split's order follows the epoch number (a shuffled training split of a known size)."""
        return self._epoch is not None
