"""data=keras (and mnist, fashion_mnist, cifar10, cifar100, which inherit it): Keras' built-in
datasets through Keras' loader, or a local .npz of the same layout where there is no network."""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.augmentation import augmenter
from tfx_hydra.data.finite import require_finite_arrays
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import PIXEL_SCALE, Datasets, from_arrays
from tfx_hydra.data.splits import hold_out_validation
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import require_path

KERAS_KEYS = ("x_train", "y_train", "x_test", "y_test")  # also the layout of a local data.path .npz
KERAS_DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")
# the classes' names, as the datasets' own documentation gives them (mnist's and cifar100's are their indices here)
KERAS_CLASS_NAMES = {
    "fashion_mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"),
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
}


def keras_dataset(name, path, input_shape, num_classes, batch_size, seed, validation_split=0.1,
                  normalization="scale", augmentation=None, task="classification", **pipeline) -> Datasets:
    """A Keras built-in dataset (mnist, fashion_mnist, cifar10, cifar100) through Keras' loader,
    or from a local .npz (`data.path`, keys x_train, y_train, x_test, y_test) where there is no network.
    `augmentation` (flip, rotation, zoom) as for image folders: training batches only, fresh each epoch.
    A local .npz may hold any task's labels (`task`): 0/1 for binary, multi-hot rows for multilabel,
    numbers (one column per target) for regression; Keras' own datasets hold classes."""
    if name not in KERAS_DATASETS:
        raise ConfigError(f"data.name={name} is not a Keras built-in dataset.",
                          fix=f"one of {', '.join(KERAS_DATASETS)}; or data=tfds data.name={name}")
    options = options_from(batch_size, seed, pipeline)
    arrays = load_npz(path) if path else download_keras_dataset(name)
    if options.check_finite:  # Keras' own downloads are 8-bit images: nothing to check, at no cost
        require_finite_arrays({k: arrays[k] for k in ("x_train", "x_test")},
                              f"data.path={path}" if path else f"keras.datasets.{name}")
    x_train, y_train, x_test, y_test = (arrays[k] for k in KERAS_KEYS)
    if task == "classification":  # cifar labels are (n, 1)
        y_train, y_test = y_train.reshape(-1), y_test.reshape(-1)
    splits = hold_out_validation(x_train, y_train, x_test, y_test, validation_split)
    augment = augmenter(augmentation or {}, tuple(int(d) for d in input_shape), options.seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, raw_scale=PIXEL_SCALE, named=name,
                       source=os.path.abspath(path) if path else f"keras.datasets.{name}",
                       source_type="local" if path else "code", augment=augment, task=task,
                       class_names=KERAS_CLASS_NAMES.get(name) if task == "classification" else None)


def download_keras_dataset(name: str) -> dict[str, np.ndarray]:
    """keras.datasets' own download (cached in ~/.keras/datasets). Its "Downloading data from ..." line
    and progress bar are Keras' interactive prints to stdout: switched to Keras' logging for the
    download, they reach the job log and stay off the terminal (console.QuietUnlessVerbose)."""
    import keras

    interactive = keras.config.is_interactive_logging_enabled()
    keras.config.disable_interactive_logging()
    try:
        (x_train, y_train), (x_test, y_test) = getattr(keras.datasets, name).load_data()
    except Exception as err:  # Keras raises a bare Exception on a failed download
        raise DataError(
            f"could not download {name.upper() if name == 'mnist' else name} with keras.datasets.{name} ({err}).",
            fix=f"pass a local copy with data.path=/abs/path/{name}.npz, or use data=digits (offline)",
        ) from None
    finally:
        if interactive:
            keras.config.enable_interactive_logging()
    return dict(zip(KERAS_KEYS, (x_train, y_train, x_test, y_test)))


def load_npz(path: str) -> dict[str, np.ndarray]:
    example = f"data.path=/abs/path/{os.path.basename(path) or 'data.npz'}"
    require_path("data.path", path, fix=f"{example} (keys x_train, y_train, x_test, y_test)", file=True)
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
