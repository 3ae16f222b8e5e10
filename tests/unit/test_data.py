"""Data pipelines: real tf.data datasets from digits, synthetic arrays and an MNIST .npz."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest

from tests.helpers import write_mnist_npz
from tfx_hydra.data import DataSpec, digits, keras_dataset, synthetic
from tfx_hydra.errors import ConfigError, DataError


def labels(dataset) -> np.ndarray:
    return np.concatenate([y.numpy() for _, y in dataset])


def test_digits_splits_all_1797_images_and_matches_the_spec():
    data = digits(input_shape=[8, 8], num_classes=10, batch_size=32, seed=0)
    assert data.spec == DataSpec((8, 8), 10, input_scale=1 / 16)  # raw 0..16 pixels scaled to [0, 1]
    assert data.num_train + data.num_validation + data.num_test == 1797
    assert data.num_test == 360  # 20 %
    x, y = next(iter(data.train))
    assert x.shape == (32, 8, 8) and x.dtype.name == "float32" and y.dtype.name == "int64"
    assert 0.0 <= float(np.min(x)) and float(np.max(x)) <= 1.0
    assert sorted(set(labels(data.test))) == list(range(10))  # stratified: every class held out


def test_training_order_is_seeded_and_reshuffled_each_epoch():
    first = labels(digits([8, 8], 10, batch_size=64, seed=3).train)
    again = digits([8, 8], 10, batch_size=64, seed=3).train
    assert np.array_equal(labels(again), first)
    other = digits([8, 8], 10, batch_size=64, seed=4)
    assert not np.array_equal(labels(other.train)[:64], first[:64])


def test_each_epoch_has_its_own_order_whichever_process_trains_it():
    """The order is data.seed's and the epoch number's (set as each epoch begins), not how many times this
    pipeline was read: a run resumed at epoch 3 reads epoch 3 as the uninterrupted run did."""
    data = digits([8, 8], 10, batch_size=64, seed=3)
    first = labels(data.train)
    data.order.set_epoch(1)
    second = labels(data.train)
    assert not np.array_equal(first, second) and sorted(first) == sorted(second)
    assert np.array_equal(labels(data.train), second)  # read again in epoch 1: the same
    resumed = digits([8, 8], 10, batch_size=64, seed=3)  # another process, starting at epoch 1
    resumed.order.set_epoch(1)
    assert np.array_equal(labels(resumed.train), second)
    assert data.train.cardinality() == -(-data.num_train // 64)  # Keras still sizes the epoch


def test_validation_and_test_are_not_shuffled():
    data = digits([8, 8], 10, batch_size=64, seed=3)
    assert np.array_equal(labels(data.validation), labels(data.validation))


def test_synthetic_has_any_shape_and_a_learnable_teacher():
    data = synthetic(input_shape=[4, 3], num_classes=3, num_examples=600, batch_size=16, seed=1)
    x, _ = next(iter(data.train))
    assert x.shape == (16, 4, 3)
    assert set(labels(data.train)) == {0, 1, 2}
    again = synthetic(input_shape=[4, 3], num_classes=3, num_examples=600, batch_size=16, seed=1)
    assert np.array_equal(labels(again.test), labels(data.test))


def test_limit_caps_the_training_split():
    data = digits([8, 8], 10, batch_size=32, seed=0, limit=100)
    assert data.num_train == 100 and len(labels(data.train)) == 100


def test_limit_batches_reads_the_same_few_batches_each_epoch_from_a_whole_cache(capfd):
    """data.limit_batches takes before the cache: an epoch reads exactly its batches, the same examples
    each epoch (reshuffled), and tf.data never warns that a cache was read partly and thrown away."""
    data = digits([8, 8], 10, batch_size=32, seed=0, limit_batches=2)
    epochs = []
    for epoch in range(2):
        data.order.set_epoch(epoch)  # as the trainer does when an epoch begins
        epochs.append([(x.numpy(), y.numpy()) for x, y in data.train])
    assert [len(batches) for batches in epochs] == [2, 2] and all(len(y) == 32 for _, y in epochs[0])
    first, second = (np.concatenate([x.reshape(len(x), -1) for x, _ in batches]) for batches in epochs)
    assert not np.array_equal(first, second)  # reshuffled ...
    assert sorted(map(bytes, first)) == sorted(map(bytes, second))  # ... the same 64 examples
    assert len(labels(data.validation)) == 64 and len(labels(data.test)) == 64  # every split is limited
    assert "did not fully read the dataset being cached" not in capfd.readouterr().err


def test_mnist_from_a_local_npz(tmp_path):
    path = write_mnist_npz(tmp_path / "mnist.npz", train=200, test=50)
    data = keras_dataset("mnist", path=str(path), input_shape=[28, 28], num_classes=10, batch_size=32, seed=0,
                         validation_split=0.1)
    assert (data.num_train, data.num_validation, data.num_test) == (180, 20, 50)
    x, _ = next(iter(data.test))
    assert x.shape == (32, 28, 28) and float(np.max(x)) == 1.0  # scaled from uint8


def test_mnist_validation_split_zero_validates_on_the_test_split_like_the_seed(tmp_path):
    path = write_mnist_npz(tmp_path / "mnist.npz", train=200, test=50)
    data = keras_dataset("mnist", path=str(path), input_shape=[28, 28], num_classes=10, batch_size=32, seed=0,
                         validation_split=0)
    assert (data.num_train, data.num_validation, data.num_test) == (200, 50, 50)
    assert np.array_equal(labels(data.validation), labels(data.test))
    x, _ = next(iter(data.validation))
    assert float(np.max(x)) == 1.0  # scaled once, though it is the test split too


def test_mnist_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"data.path=.*nope.npz does not exist"):
        keras_dataset("mnist", path=str(tmp_path / "nope.npz"), input_shape=[28, 28], num_classes=10, batch_size=32,
                      seed=0)


def test_mnist_file_that_is_not_an_npz(tmp_path):
    bad = tmp_path / "mnist.npz"
    bad.write_text("this is not a zip archive")
    with pytest.raises(DataError, match=r"is not a valid .npz file") as caught:
        keras_dataset("mnist", path=str(bad), input_shape=[28, 28], num_classes=10, batch_size=32, seed=0)
    assert "Fix: point data.path at an .npz" in str(caught.value)


def test_mnist_npz_without_the_expected_arrays(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, images=np.zeros((3, 28, 28)))
    with pytest.raises(DataError, match=r"has no array x_train, y_train, x_test, y_test \(it holds \['images'\]\)"):
        keras_dataset("mnist", path=str(path), input_shape=[28, 28], num_classes=10, batch_size=32, seed=0)


def test_a_declared_shape_that_does_not_match_the_data():
    with pytest.raises(DataError, match=r"data.input_shape=\[28, 28\] does not match the data: train examples have "
                                        r"shape \[8, 8\]") as caught:
        digits(input_shape=[28, 28], num_classes=10, batch_size=32, seed=0)
    assert "Fix: data.input_shape=[8,8]" in str(caught.value)


def test_labels_outside_num_classes():
    with pytest.raises(DataError, match=r"data.num_classes=5 does not match the data"):
        digits(input_shape=[8, 8], num_classes=5, batch_size=32, seed=0)


def test_fewer_examples_than_one_batch():
    with pytest.raises(DataError, match=r"the training split has 20 examples, fewer than one batch "
                                        r"\(trainer.batch_size=64\)"):
        digits(input_shape=[8, 8], num_classes=10, batch_size=64, seed=0, limit=20)


def test_split_fractions_out_of_range():
    with pytest.raises(ConfigError, match=r"data.test_split=1.5 is out of range"):
        digits(input_shape=[8, 8], num_classes=10, batch_size=32, seed=0, test_split=1.5)


@pytest.mark.parametrize("name, said", [("mnist", "MNIST"), ("fashion_mnist", "fashion_mnist")])
def test_download_failure_says_how_to_work_offline(monkeypatch, name, said, capsys, caplog):
    # Fault injection: make Keras' download fail as it does on a machine without internet.

    def offline(*args, **kwargs):  # Keras says what it downloads before it tries (its own print path)
        from keras.src.utils import io_utils

        io_utils.print_msg(f"Downloading data from https://storage.googleapis.com/tensorflow/tf-keras-datasets/{name}")
        raise Exception("URL fetch failure on https://storage.googleapis.com/...: None -- [Errno -3]")
    monkeypatch.setattr(getattr(keras.datasets, name), "load_data", offline)
    caplog.set_level(logging.INFO, logger="absl")
    interactive = keras.config.is_interactive_logging_enabled()
    with pytest.raises(DataError, match=rf"could not download {said} with keras.datasets.{name}") as caught:
        keras_dataset(name, path=None, input_shape=[28, 28], num_classes=10, batch_size=32, seed=0)
    assert f"pass a local copy with data.path=/abs/path/{name}.npz" in str(caught.value)
    # the notice went to logging (absl: the job log, off the terminal), not to stdout; Keras' setting is back
    assert "Downloading data from" not in capsys.readouterr().out
    assert any("Downloading data from" in r.getMessage() and r.name == "absl" for r in caplog.records)
    assert keras.config.is_interactive_logging_enabled() == interactive
