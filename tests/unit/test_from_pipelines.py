"""data.from_pipelines: a user's own tf.data pipelines become a run's data -- batched, shuffled, cached and
prefetched by the data.* options, checked and digested on a bounded sample with nothing read through before
training -- and each pipeline that cannot work is one DataError saying what to change."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfx_hydra.data import from_pipelines
from tfx_hydra.data.from_pipelines import NOT_DIGESTED
from tfx_hydra.errors import DataError


def pairs(n: int, seed: int = 0, shape=(4,), classes: int = 3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *shape)).astype("float32")
    y = rng.integers(0, classes, size=n).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y))


def unknown_length(dataset):
    """The same examples behind a filter: tf.data no longer knows how many there are."""
    return dataset.filter(lambda x, y: True)


def three(**kwargs):
    defaults = dict(input_shape=(4,), num_classes=3, batch_size=16, seed=0, name="mine")
    return from_pipelines(pairs(100), pairs(20, 1), pairs(30, 2), **(defaults | kwargs))


def test_pipelines_are_batched_counted_and_digested():
    data = three()
    assert (data.num_train, data.num_validation, data.num_test) == (100, 20, 30)
    x, y = next(iter(data.train))
    assert x.shape == (16, 4) and y.dtype == tf.int64
    assert sum(int(b[1].shape[0]) for b in data.test) == 30
    assert data.reads["train"].name == "mine-train" and len(data.reads["train"].digest) == 16
    assert data.reads["train"].digest == three().reads["train"].digest  # the same examples, the same digest
    other = from_pipelines(pairs(100, seed=9), pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3,
                           batch_size=16, seed=0, name="mine")
    assert other.reads["train"].digest != data.reads["train"].digest
    assert other.reads["test"].digest == data.reads["test"].digest


def test_a_pipeline_of_unknown_length_that_ends_within_the_sample_is_told_its_length():
    data = from_pipelines(unknown_length(pairs(100)), pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3,
                          batch_size=16, seed=0, name="mine")
    assert data.num_train == 100
    assert int(data.train.cardinality()) == 7  # Keras sizes its epochs and progress by it
    assert data.reads["train"].digest == three().reads["train"].digest  # the same examples as the known-length one


def reads_fail_past(n: int, count: int, labels=lambda i: i % 3):
    """`count` examples, of which any past the first `n` fails when read: a pass over the whole pipeline shows."""
    def example(i):
        tf.debugging.assert_less(i, tf.constant(n, tf.int64), message="read past the sample")
        return tf.fill([4], tf.cast(i, tf.float32)), labels(i)

    return tf.data.Dataset.range(count).map(example)


def test_nothing_is_read_through_before_training_only_the_first_examples_are_digested():
    from tfx_hydra.data.from_pipelines import SAMPLE_EXAMPLES

    data = from_pipelines(reads_fail_past(SAMPLE_EXAMPLES, 5_000), pairs(20, 1), pairs(30, 2), input_shape=(4,),
                          num_classes=3, batch_size=16, seed=0, name="big")
    assert data.num_train == 5_000  # tf.data's length: not counted
    assert data.reads["train"].digested == ("sha256 of the first 2,048 examples' inputs and labels, in the "
                                            "pipeline's order, and the count")
    with pytest.raises(tf.errors.InvalidArgumentError, match="read past the sample"):
        for _ in data.train:  # the pipeline still fails where it is read to its end: in the epoch
            pass


def test_a_longer_pipeline_of_unknown_length_is_not_read_through_its_epochs_run_to_its_end(caplog):
    """A filter, or files read by TFRecordDataset: tf.data does not know the length. Nothing counts it before
    training: each epoch reads it to its end, the auto cache is off (whether it fits cannot be told) and the
    record says its length is unknown."""
    from tfx_hydra.data.from_pipelines import SAMPLE_EXAMPLES

    caplog.set_level("INFO")
    big = unknown_length(reads_fail_past(SAMPLE_EXAMPLES, 5_000))
    data = from_pipelines(big, pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3, batch_size=16, seed=0,
                          name="unsized")
    assert data.num_train is None and data.reads["train"].num_examples is None
    assert int(data.train.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert "unsized's train pipeline does not know its length: each epoch reads it to its end" in caplog.text
    assert data.cache == "cache: off: the train pipeline of unknown length (data.cache=/scratch/x caches on disk)"
    assert data.reads["train"].digested.endswith("and the count (unknown: the pipeline does not know its length)")
    with pytest.raises(tf.errors.InvalidArgumentError, match="read past the sample"):
        for _ in data.train:  # read where an epoch reads it, not before
            pass
    two = from_pipelines(unknown_length(pairs(5_000)), pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3,
                         batch_size=16, seed=0, name="unsized", limit_batches=2)
    assert two.num_train == 32 and sum(1 for _ in two.train) == 2  # debug=fast's 2 batches: no length needed
    with pytest.raises(DataError, match=r"data.cache=memory: the train pipeline of unknown length may not fit"):
        from_pipelines(unknown_length(pairs(5_000)), pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3,
                       batch_size=16, seed=0, name="unsized", cache="memory")
    with pytest.raises(DataError, match=r"data.limit_batches=0.5 is a share of the batches"):
        from_pipelines(unknown_length(pairs(5_000)), pairs(20, 1), pairs(30, 2), input_shape=(4,), num_classes=3,
                       batch_size=16, seed=0, name="unsized", limit_batches=0.5)


def test_a_class_past_num_classes_after_the_sample_fails_the_epoch_that_reads_it_named():
    import keras

    def labels(i):  # one bad label, late
        return tf.where(i == 3_000, tf.constant(7, tf.int64), i % 3)

    data = from_pipelines(reads_fail_past(10_000, 3_200, labels), pairs(20, 1), pairs(30, 2), input_shape=(4,),
                          num_classes=3, batch_size=64, seed=0, name="big", shuffle_buffer=0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(DataError) as raised, data.named_errors():
        model.fit(data.train, epochs=1, verbose=0)
    assert str(raised.value).startswith("DataError: big: a label of 7 after the first 2,048 examples (which were "
                                        "checked) is not a class of num_classes=3."), str(raised.value)


def test_digest_false_reads_nothing_ahead_and_says_so(caplog):
    caplog.set_level("INFO")
    data = three(digest=False)
    assert {read.digested for read in data.reads.values()} == {NOT_DIGESTED}
    assert data.reads["train"].digest == "none" and data.num_train == 100
    assert "not digested (digest=False): reproduce cannot tell whether they change" in caplog.text


def test_the_pipeline_options_apply():
    data = three(limit=40, shuffle_buffer=0, cache=False)
    assert data.num_train == 40
    first = np.concatenate([y.numpy() for _, y in data.train])
    again = np.concatenate([y.numpy() for _, y in data.train])
    np.testing.assert_array_equal(first, again)  # shuffle_buffer=0: no shuffling
    shuffled = three(shuffle_buffer=100)
    assert not np.array_equal(np.concatenate([y.numpy() for _, y in shuffled.train]),
                              np.concatenate([y.numpy() for _, y in three(shuffle_buffer=0).train]))


# each a function: tensors made at import would initialise TensorFlow before conftest sets up its devices
BROKEN = {
    "an array": (lambda: np.zeros((4, 4)), {}, "the train split is a ndarray, not a tf.data.Dataset.",
                 "from_tensor_slices"),
    "inputs alone": (lambda: tf.data.Dataset.from_tensor_slices(np.zeros((8, 4), "float32")), {},
                     "the train pipeline yields TensorSpec(shape=(4,), dtype=tf.float32, name=None), not (inputs, "
                     "label) pairs.", "map it to pairs"),
    "batched": (lambda: pairs(100).batch(10), {}, "the train pipeline's inputs have shape [None, 4], the model is "
                "built for [4]: it is batched already.", "hand over unbatched examples"),
    "another shape": (lambda: pairs(100, shape=(5,)), {}, "the train pipeline's inputs have shape [5], the model is "
                      "built for [4].", "input_shape=[5]"),
    "float labels": (lambda: pairs(100).map(lambda x, y: (x, tf.cast(y, tf.float32))), {},
                     "the train pipeline's labels are float32 of shape []: expected one integer class index per "
                     "example.", "tf.cast(y, tf.int64)"),
    "endless": (lambda: pairs(100).repeat(), {}, "the train pipeline never ends (it repeats): an epoch needs an end.",
                "drop the .repeat()"),
    "more classes": (lambda: pairs(100, classes=5), {}, "num_classes=3 does not match the train pipeline: its labels "
                     "range over [0, 4].", "num_classes=5"),
    "empty": (lambda: pairs(100).take(0), {}, "the train pipeline of mine is empty.",
              "hand over a pipeline with examples"),
    "under a batch": (lambda: pairs(10), {"batch_size": 16}, "the training split has 10 examples, fewer than one "
                      "batch", "trainer.batch_size"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_pipeline_that_cannot_work_is_one_data_error(case):
    train, kwargs, message, fix = BROKEN[case]
    with pytest.raises(DataError) as raised:
        from_pipelines(train(), pairs(20, 1), pairs(30, 2), **(dict(input_shape=(4,), num_classes=3, batch_size=16,
                                                                    seed=0, name="mine") | kwargs))
    assert message in str(raised.value) and fix in str(raised.value), str(raised.value)
