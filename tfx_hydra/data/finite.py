"""NaN or inf in the inputs, found before training: a NaN that reaches training makes NaN weights,
and on some CPUs a loss that still looks finite. In-memory arrays are checked whole when loaded;
a streamed source's first data.check_finite_batches batches of each split.
"""

from __future__ import annotations

import numpy as np

from tfx_hydra.errors import DataError

CHECK_BATCH = 256  # examples looked at per step of a streamed check


NON_FINITE_FIX = ("clean the data (drop or fill those values), or data.check_finite=false if the model handles "
                  "NaN/inf itself")


def require_finite_arrays(arrays: dict[str, np.ndarray], source: str) -> None:
    """In-memory inputs hold only finite numbers, checked once when loaded (integer arrays, such as
    8-bit images, cannot hold NaN/inf and cost nothing). A NaN that reaches training makes NaN
    weights, and on some CPUs a loss that still looks finite."""
    for name, array in arrays.items():
        if not np.issubdtype(array.dtype, np.floating) or np.isfinite(array).all():
            continue
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        count = int(array.size - np.count_nonzero(np.isfinite(array)))
        raise DataError(f"{source}: {name}[{', '.join(map(str, index))}] is {array[index]} ({count:,} non-finite "
                        f"value{'s' if count > 1 else ''} in {name}); the inputs must be finite numbers.",
                        fix=NON_FINITE_FIX)


def checked_examples(options) -> int | None:
    """How many examples of each split a streamed source checks for NaN/inf before training."""
    batches = options.check_finite_batches
    return None if batches is None else batches * options.batch_size


def first_non_finite(dataset, examples: int | None):
    """(example index, position, value) of the first example among the first `examples` of an
    unbatched (inputs, label) dataset whose inputs hold NaN/inf, in the dataset's order; or None."""
    import tensorflow as tf

    if examples is not None:
        dataset = dataset.take(examples)
    seen = 0
    for inputs, *_ in dataset.batch(CHECK_BATCH):  # (inputs, label) or (inputs, label, weight)
        finite = tf.reshape(tf.math.is_finite(inputs), (tf.shape(inputs)[0], -1))
        rows = tf.reduce_all(finite, axis=1)
        if not bool(tf.reduce_all(rows)):
            row = int(tf.argmin(tf.cast(rows, tf.int32)))
            values = np.asarray(inputs[row])
            position = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
            return seen + row, position, values[position]
        seen += int(tf.shape(inputs)[0])
    return None


def require_finite_stream(dataset, split: str, source: str, examples: int | None) -> None:
    """The first `examples` of a streamed split (None: all) hold only finite inputs."""
    bad = first_non_finite(dataset, examples)
    if bad is not None:
        index, position, value = bad
        raise non_finite_example(f"{source}: example {index} of the {split} split (in reading order)", value, position)


def non_finite_example(example: str, value, position: tuple[int, ...]) -> DataError:
    """'<example> has nan in its inputs at [2, 3]', the one message of every streamed check."""
    return DataError(f"{example} has {value} in its inputs at [{', '.join(map(str, position))}]; the inputs must be "
                     "finite numbers.", fix=NON_FINITE_FIX)
