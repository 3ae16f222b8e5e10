"""data=synthetic: Gaussian inputs labelled by a fixed random linear teacher, any shape, no files."""

from __future__ import annotations

import numpy as np

from tfx_hydra.data.pipeline import Datasets, from_arrays, options_from
from tfx_hydra.data.splits import split_three_ways
from tfx_hydra.errors import ConfigError


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
                       source=f"tfx_hydra.data.synthetic (seed {seed}, {num_examples} examples)")
