"""data=digits: scikit-learn's bundled 8x8 digits, the offline default (no download, ever)."""

from __future__ import annotations

from tfx_hydra.data.pipeline import Datasets, from_arrays, options_from
from tfx_hydra.data.splits import split_three_ways

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
