"""Sources that fit in memory: scikit-learn's digits, synthetic data, Keras' built-in datasets."""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.pipeline import (PIXEL_SCALE, Datasets, from_arrays, hold_out_validation, options_from,
                                     require_finite_arrays, split_three_ways)
from tfx_hydra.errors import ConfigError, DataError

KERAS_KEYS = ("x_train", "y_train", "x_test", "y_test")  # also the layout of a local data.path .npz
KERAS_DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")
DIGITS_SCALE = 1 / 16.0  # the digits' pixels run 0..16


def digits(input_shape, num_classes, batch_size, seed, test_split=0.2, validation_split=0.1,
           normalization="scale", **pipeline) -> Datasets:
    """scikit-learn's bundled 8x8 digits (ships with the package: works offline), scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    options = options_from(batch_size, seed, pipeline)
    bunch = load_digits()
    splits = split_three_ways(bunch.images.astype("float32"), bunch.target.astype("int64"), test_split,
                              validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, raw_scale=DIGITS_SCALE,
                       named="digits", source="sklearn.datasets.load_digits")


def synthetic(input_shape, num_classes, num_examples, batch_size, seed, test_split=0.2, validation_split=0.1,
              normalization="none", **pipeline) -> Datasets:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, any shape, no files."""
    options = options_from(batch_size, seed, pipeline)
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
    splits = split_three_ways(x, y, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, named="synthetic",
                       source=f"tfx_hydra.data.arrays.synthetic (seed {seed}, {num_examples} examples)")


def keras_dataset(name, path, input_shape, num_classes, batch_size, seed, validation_split=0.1,
                  normalization="scale", augmentation=None, **pipeline) -> Datasets:
    """A Keras built-in dataset (mnist, fashion_mnist, cifar10, cifar100) through Keras' loader,
    or from a local .npz (`data.path`, keys x_train, y_train, x_test, y_test) where there is no network.
    `augmentation` (flip, rotation, zoom) as for image folders: training batches only, fresh each epoch."""
    from tfx_hydra.data.files import augmenter

    if name not in KERAS_DATASETS:
        raise ConfigError(f"data.name={name} is not a Keras built-in dataset.",
                          fix=f"one of {', '.join(KERAS_DATASETS)}; or data=tfds data.name={name}")
    options = options_from(batch_size, seed, pipeline)
    arrays = load_npz(path) if path else download_keras_dataset(name)
    if options.check_finite:  # Keras' own downloads are 8-bit images: nothing to check, at no cost
        require_finite_arrays({k: arrays[k] for k in ("x_train", "x_test")},
                              f"data.path={path}" if path else f"keras.datasets.{name}")
    x_train, y_train, x_test, y_test = (arrays[k] for k in KERAS_KEYS)
    splits = hold_out_validation(x_train, y_train.reshape(-1).astype("int64"), x_test,
                                 y_test.reshape(-1).astype("int64"), validation_split)  # cifar labels are (n, 1)
    augment = augmenter(augmentation or {}, tuple(int(d) for d in input_shape), options.seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, raw_scale=PIXEL_SCALE, named=name,
                       source=os.path.abspath(path) if path else f"keras.datasets.{name}",
                       source_type="local" if path else "code", augment=augment)


def download_keras_dataset(name: str) -> dict[str, np.ndarray]:
    import keras

    try:
        (x_train, y_train), (x_test, y_test) = getattr(keras.datasets, name).load_data()
    except Exception as err:  # Keras raises a bare Exception on a failed download
        raise DataError(
            f"could not download {name.upper() if name == 'mnist' else name} with keras.datasets.{name} ({err}).",
            fix=f"pass a local copy with data.path=/abs/path/{name}.npz, or use data=digits (offline)",
        ) from None
    return dict(zip(KERAS_KEYS, (x_train, y_train, x_test, y_test)))


def load_npz(path: str) -> dict[str, np.ndarray]:
    example = f"data.path=/abs/path/{os.path.basename(path) or 'data.npz'}"
    if not os.path.isfile(path):
        raise DataError(f"data.path={path} does not exist.", fix=f"{example} (keys x_train, y_train, x_test, y_test)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in KERAS_KEYS if k not in archive.files]
            if missing:
                raise DataError(f"data.path={path} has no array {', '.join(missing)} (it holds {archive.files}).",
                                fix="save it with np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)")
            return {k: archive[k] for k in KERAS_KEYS}
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"data.path={path} is not a valid .npz file ({type(err).__name__}: {err}).",
                        fix="point data.path at an .npz written by np.savez with keys x_train, y_train, x_test, "
                        "y_test") from None
