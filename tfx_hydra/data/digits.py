"""data=digits: scikit-learn's bundled 8x8 digits, the offline default (no download, ever)."""

from __future__ import annotations

import functools

from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import split_three_ways

DIGITS_SCALE = 1 / 16.0  # the digits' pixels run 0..16


@functools.lru_cache(maxsize=1)
def _bundled_digits():
    """The images and labels, read from scikit-learn's gzipped CSV once per process (~5 ms; a search's
    trials in one process each read them), read-only: each run's splits are copies."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels = bunch.images.astype("float32"), bunch.target.astype("int64")
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def digits(input_shape, num_classes, batch_size, seed, test_split=0.2, validation_split=0.1,
           normalization="scale", **pipeline) -> Datasets:
    """scikit-learn's bundled 8x8 digits (ships with the package: works offline), scaled to [0, 1]."""
    options = options_from(batch_size, seed, pipeline)
    images, labels = _bundled_digits()
    splits = split_three_ways(images, labels, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, raw_scale=DIGITS_SCALE,
                       named="digits", source="sklearn.datasets.load_digits")
