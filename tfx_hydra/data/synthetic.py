"""data=synthetic: Gaussian inputs labelled by a fixed random linear teacher, any shape, any task, no files."""

from __future__ import annotations

import numpy as np

from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import split_three_ways
from tfx_hydra.errors import ConfigError


def synthetic(input_shape, num_classes, num_examples, batch_size, seed, test_split=0.2, validation_split=0.1,
              normalization="none", task="classification", **pipeline) -> Datasets:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, any shape, no files. The
    teacher's scores, by task: the class of the highest (classification), whether the first is above its
    median (binary), whether each is above zero (multilabel: num_classes labels), or the scores themselves,
    scaled and shifted off zero (regression: num_classes targets in units of about 10, around 50)."""
    options = options_from(batch_size, seed, pipeline)
    if num_examples < 3:
        raise ConfigError(f"data.num_examples={num_examples} is too small: expected at least 3.",
                          fix="data.num_examples=2048")
    least = 2 if task == "classification" else 1
    if num_classes < least:
        raise ConfigError(f"data.num_classes={num_classes}: expected at least {least}.", fix="data.num_classes=10")
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in input_shape)
    x = rng.normal(size=(num_examples, *shape)).astype("float32")
    teacher = rng.normal(size=(int(np.prod(shape)), num_classes)).astype("float32")
    scores = x.reshape(num_examples, -1) @ teacher
    y = {"classification": lambda: np.argmax(scores, axis=1).astype("int64"),
         "binary": lambda: (scores[:, 0] > np.median(scores[:, 0])).astype("int64"),
         "multilabel": lambda: (scores > 0).astype("float32"),
         "regression": lambda: (50 + 10 * scores / np.sqrt(teacher.shape[0])).astype("float32"),
         }[task]()
    splits = split_three_ways(x, y, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization, named="synthetic",
                       source=f"tfx_hydra.data.synthetic (seed {seed}, {num_examples} examples)", task=task)
