"""data: tf.data pipelines, one factory per option in conf/data/.

Every factory returns `Datasets`: train / validation / test `tf.data.Dataset`s of
(inputs, integer label) batches and the `DataSpec` they satisfy. The spec is declared
in the data config (`data.input_shape`, `data.num_classes`) so the model config can
read it by interpolation before any data is loaded; the factory checks that the real
data matches it, so a wrong declaration fails here with both shapes named instead of
deep inside Keras.

Pipelines: cache -> shuffle (seeded, reshuffled each epoch) -> batch -> prefetch(AUTOTUNE).
TensorFlow is imported inside the functions (validation must not pay for it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfx_hydra.errors import ConfigError, DataError

MNIST_KEYS = ("x_train", "y_train", "x_test", "y_test")
SHARD_POLICIES = ("data", "off")
DIGITS_SCALE = 1 / 16.0  # the digits' pixels run 0..16
MNIST_SCALE = 1 / 255.0  # MNIST's run 0..255


@dataclass(frozen=True)
class DataSpec:
    input_shape: tuple[int, ...]
    num_classes: int
    input_scale: float = 1.0  # what the pipeline multiplies raw values by; exports put it in their graph


@dataclass
class Datasets:
    train: Any  # tf.data.Dataset of (inputs, label) batches, shuffled
    validation: Any
    test: Any
    spec: DataSpec
    num_train: int
    num_validation: int
    num_test: int


@dataclass
class _Split:
    x: np.ndarray
    y: np.ndarray


def digits(
    input_shape, num_classes, batch_size, seed, test_split=0.2, validation_split=0.1,
    shuffle_buffer=2048, cache=True, limit=None, shard_policy="data",
) -> Datasets:
    """scikit-learn's bundled 8x8 digits (ships with the package: works offline), scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images * DIGITS_SCALE).astype("float32")
    y = bunch.target.astype("int64")
    splits = _split_three_ways(x, y, test_split, validation_split, seed)
    return _make_datasets(splits, input_shape, num_classes, batch_size, seed, shuffle_buffer, cache, limit,
                          shard_policy, input_scale=DIGITS_SCALE)


def synthetic(
    input_shape, num_classes, num_examples, batch_size, seed, test_split=0.2, validation_split=0.1,
    shuffle_buffer=4096, cache=True, limit=None, shard_policy="data",
) -> Datasets:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, any shape, no files."""
    if num_examples < 3:
        raise ConfigError(f"data.num_examples={num_examples} is too small: expected at least 3.",
                          fix="data.num_examples=2048")
    if num_classes < 2:
        raise ConfigError(f"data.num_classes={num_classes}: expected at least 2.", fix="data.num_classes=10")
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in input_shape)
    x = rng.normal(size=(num_examples, *shape)).astype("float32")
    teacher = rng.normal(size=(int(np.prod(shape)), num_classes)).astype("float32")
    y = np.argmax(x.reshape(num_examples, -1) @ teacher, axis=1).astype("int64")
    splits = _split_three_ways(x, y, test_split, validation_split, seed)
    return _make_datasets(splits, input_shape, num_classes, batch_size, seed, shuffle_buffer, cache, limit,
                          shard_policy)


def mnist(
    path, input_shape, num_classes, batch_size, seed, validation_split=0.1,
    shuffle_buffer=60000, cache=True, limit=None, shard_policy="data",
) -> Datasets:
    """MNIST through Keras' loader, or from a local .npz (`data.path`) where there is no network."""
    arrays = _load_mnist_file(path) if path else _download_mnist()
    x_train, y_train, x_test, y_test = (arrays[k] for k in MNIST_KEYS)
    x_train = (x_train * MNIST_SCALE).astype("float32")
    x_test = (x_test * MNIST_SCALE).astype("float32")
    test = _Split(x_test, y_test.astype("int64"))
    if validation_split == 0:  # the seed article's choice: validate on the test split
        splits = {"train": _Split(x_train, y_train.astype("int64")), "validation": test, "test": test}
    else:
        _require_fraction("data.validation_split", validation_split)
        num_validation = max(1, int(round(len(x_train) * validation_split)))
        splits = {
            "train": _Split(x_train[:-num_validation], y_train[:-num_validation].astype("int64")),
            "validation": _Split(x_train[-num_validation:], y_train[-num_validation:].astype("int64")),
            "test": test,
        }
    return _make_datasets(splits, input_shape, num_classes, batch_size, seed, shuffle_buffer, cache, limit,
                          shard_policy, input_scale=MNIST_SCALE)


def _download_mnist() -> dict[str, np.ndarray]:
    import keras

    try:
        (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    except Exception as err:  # Keras raises a bare Exception on a failed download
        raise DataError(
            f"could not download MNIST with keras.datasets.mnist ({err}).",
            fix="pass a local copy with data.path=/abs/path/mnist.npz, or use data=digits (offline)",
        ) from None
    return dict(zip(MNIST_KEYS, (x_train, y_train, x_test, y_test)))


def _load_mnist_file(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise DataError(f"data.path={path} does not exist.",
                        fix="data.path=/abs/path/mnist.npz (keys x_train, y_train, x_test, y_test)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in MNIST_KEYS if k not in archive.files]
            if missing:
                raise DataError(f"data.path={path} has no array {', '.join(missing)} (it holds {archive.files}).",
                                fix="save it with np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)")
            return {k: archive[k] for k in MNIST_KEYS}
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"data.path={path} is not a valid .npz file ({type(err).__name__}: {err}).",
                        fix="point data.path at an .npz written by np.savez with keys x_train, y_train, x_test, y_test") from None


def _require_fraction(key: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{key}={value} is out of range: expected a fraction between 0 and 1.", fix=f"{key}=0.1")


def _split_three_ways(x, y, test_split, validation_split, seed) -> dict[str, _Split]:
    """Stratified, seeded train / validation / test split of in-memory arrays."""
    from sklearn.model_selection import train_test_split

    _require_fraction("data.test_split", test_split)
    _require_fraction("data.validation_split", validation_split)
    stratify = y if np.bincount(y).min() >= 2 else None
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=test_split, random_state=seed, stratify=stratify)
    stratify = y_rest if np.bincount(y_rest).min() >= 2 else None
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=validation_split, random_state=seed, stratify=stratify)
    return {"train": _Split(x_train, y_train), "validation": _Split(x_val, y_val), "test": _Split(x_test, y_test)}


def _make_datasets(splits, input_shape, num_classes, batch_size, seed, shuffle_buffer, cache, limit,
                   shard_policy, input_scale: float = 1.0) -> Datasets:
    spec = DataSpec(tuple(int(d) for d in input_shape), int(num_classes), input_scale)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"data.limit={limit}: expected a positive number of examples or null.", fix="data.limit=null")
        splits["train"] = _Split(splits["train"].x[:limit], splits["train"].y[:limit])
    for name, split in splits.items():
        _check_against_spec(name, split, spec)
    if len(splits["train"].x) < batch_size:
        raise DataError(
            f"the training split has {len(splits['train'].x)} examples, fewer than one batch "
            f"(trainer.batch_size={batch_size}).",
            fix=f"trainer.batch_size={max(1, len(splits['train'].x))} or more data (data.limit=null)",
        )
    return Datasets(
        train=_pipeline(splits["train"], batch_size, shard_policy, cache=cache, seed=seed,
                        shuffle_buffer=shuffle_buffer),
        validation=_pipeline(splits["validation"], batch_size, shard_policy, cache=cache),
        test=_pipeline(splits["test"], batch_size, shard_policy, cache=cache),
        spec=spec,
        num_train=len(splits["train"].x),
        num_validation=len(splits["validation"].x),
        num_test=len(splits["test"].x),
    )


def _check_against_spec(name: str, split: _Split, spec: DataSpec) -> None:
    if len(split.x) == 0:
        raise DataError(f"the {name} split is empty.", fix="use more data or smaller split fractions")
    if tuple(split.x.shape[1:]) != spec.input_shape:
        raise DataError(
            f"data.input_shape={list(spec.input_shape)} does not match the data: {name} examples have shape "
            f"{list(split.x.shape[1:])}.",
            fix=f"data.input_shape={list(split.x.shape[1:])}".replace(" ", ""),
        )
    if split.y.min() < 0 or split.y.max() >= spec.num_classes:
        raise DataError(
            f"data.num_classes={spec.num_classes} does not match the data: {name} labels range over "
            f"[{split.y.min()}, {split.y.max()}].",
            fix=f"data.num_classes={int(split.y.max()) + 1}",
        )


def _pipeline(split: _Split, batch_size: int, shard_policy: str, *, cache: bool, seed: int | None = None,
              shuffle_buffer: int = 0):
    """cache -> shuffle (training only) -> batch -> prefetch: I/O overlaps compute.

    The shard policy is explicit: in-memory data has no files for tf.distribute's default
    (FILE, then DATA with a warning) to split, so multi-worker runs shard by example.
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((split.x, split.y))
    if cache:
        dataset = dataset.cache()
    if seed is not None and shuffle_buffer:
        dataset = dataset.shuffle(min(shuffle_buffer, len(split.x)), seed=seed, reshuffle_each_iteration=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = {
        "data": tf.data.experimental.AutoShardPolicy.DATA, "off": tf.data.experimental.AutoShardPolicy.OFF,
    }[shard_policy]
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE).with_options(options)
