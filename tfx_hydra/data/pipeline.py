"""What every data source shares: the spec, the three splits, and the way examples become batches.

Order of a pipeline (each step a tf.data transformation, nothing hand-rolled):
    examples -> [map: decode / normalize, parallel] -> cache -> [shuffle, training only]
             -> [map: augment, training only] -> batch -> prefetch
Caching before the shuffle keeps decoding out of every epoch but the first; augmenting
after it keeps augmentation fresh each epoch. TensorFlow is imported inside the
functions: config validation must not pay for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tfx_hydra.errors import ConfigError, DataError

SHARD_POLICIES = ("auto", "file", "data", "off")
PIXEL_SCALE = 1 / 255.0  # 8-bit images to [0, 1]
PARSE_BATCH = 256  # a `parse.batched` parser gets this many records at a time: one parse_example call, not 256


@dataclass(frozen=True)
class DataSpec:
    """What the model and the exports need to know about the inputs.

    The pipeline feeds the model `(raw - input_offset) * input_scale`; exports put the
    same arithmetic in their graph so a served model takes raw inputs (pixels 0..255,
    CSV values as written). Offset and scale are a number or one per feature.
    """

    input_shape: tuple[int, ...]
    num_classes: int
    input_scale: float | tuple[float, ...] = 1.0
    input_offset: float | tuple[float, ...] = 0.0

    def normalize(self, raw):
        """Raw inputs (a tensor or an array) -> what the model was trained on."""
        return (raw - self.input_offset) * self.input_scale

    def denormalize(self, inputs):
        """The pipeline's inputs -> the raw values a served model takes."""
        return inputs / self.input_scale + self.input_offset


@dataclass
class Datasets:
    train: Any  # tf.data.Dataset of (inputs, label) batches, shuffled
    validation: Any
    test: Any
    spec: DataSpec
    num_train: int
    num_validation: int
    num_test: int
    reads: dict[str, Any] = dataclasses.field(default_factory=dict)  # split -> lineage.DataRead: what was read


@dataclass(frozen=True)
class PipelineOptions:
    """The options every source takes (conf/data/pipeline/default.yaml)."""

    batch_size: int
    seed: int | None = 0
    shuffle_buffer: int = 2048
    cache: bool | str = True  # true/"memory": in memory; a path: a cache file; false: none
    prefetch: int | str = "auto"
    map_parallelism: int | str = "auto"
    deterministic: bool = True  # false lets parallel maps hand out examples as they finish
    shard_policy: str = "auto"
    limit: int | None = None
    limit_batches: int | float | None = None  # per split and epoch: a number of batches, or a share of them
    check_finite: bool = True  # NaN/inf inputs are a DataError before training (false: let them through)
    check_finite_batches: int | None = 10  # streamed sources: the first N batches of each split (null: all)

    def __post_init__(self) -> None:
        if self.shard_policy not in SHARD_POLICIES:
            raise ConfigError(f"data.shard_policy={self.shard_policy} is unknown: expected one of "
                              f"{', '.join(SHARD_POLICIES)}.", fix="data.shard_policy=auto")
        for key in ("prefetch", "map_parallelism"):
            value = getattr(self, key)
            if value != "auto" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"data.{key}={value!r} is invalid: expected auto or a positive integer.",
                                  fix=f"data.{key}=auto")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"data.limit={self.limit}: expected a positive number of examples or null.",
                              fix="data.limit=null")
        batches = self.limit_batches
        if batches is not None and (isinstance(batches, bool) or not (
                (isinstance(batches, int) and batches >= 1) or (isinstance(batches, float) and 0 < batches <= 1))):
            raise ConfigError(f"data.limit_batches={batches!r}: expected a number of batches (2), a fraction of them "
                              "(0.1), or null.", fix="data.limit_batches=2")
        if not isinstance(self.check_finite, bool):
            raise ConfigError(f"data.check_finite={self.check_finite!r}: expected true or false.",
                              fix="data.check_finite=true")
        batches = self.check_finite_batches
        if batches is not None and (not isinstance(batches, int) or isinstance(batches, bool) or batches < 1):
            raise ConfigError(f"data.check_finite_batches={batches!r}: expected a positive number of batches or "
                              "null (every batch).", fix="data.check_finite_batches=10")
        if not isinstance(self.shuffle_buffer, int) or self.shuffle_buffer < 0:
            raise ConfigError(f"data.shuffle_buffer={self.shuffle_buffer!r}: expected a non-negative integer "
                              "(0 = no shuffling).", fix="data.shuffle_buffer=2048")

    @property
    def parallel_calls(self):
        import tensorflow as tf

        return tf.data.AUTOTUNE if self.map_parallelism == "auto" else self.map_parallelism


def options_from(batch_size: int, seed: int | None, pipeline: dict[str, Any]) -> PipelineOptions:
    """The common options out of a factory's keyword arguments, an unknown key named."""
    known = set(PipelineOptions.__dataclass_fields__) - {"batch_size", "seed"}
    unknown = sorted(set(pipeline) - known)
    if unknown:
        raise ConfigError(f"data.{unknown[0]} is not an option of this data source.",
                          fix=f"check the spelling (python -m tfx_hydra --cfg job --package data); "
                          f"common options: {', '.join(sorted(known))}")
    return PipelineOptions(batch_size=batch_size, seed=seed, **pipeline)


def finish(dataset, options: PipelineOptions, *, training: bool, num_examples: int | None = None,
           augment: Callable | None = None, cache_suffix: str = ""):
    """cache -> shuffle -> augment -> batch -> prefetch, with the sharding and determinism options."""
    import tensorflow as tf

    if options.cache is True or options.cache == "memory":
        dataset = dataset.cache()
    elif options.cache:  # a file path; one file per split
        dataset = dataset.cache(f"{options.cache}{cache_suffix}")
    if training and options.shuffle_buffer and options.seed is not None:
        buffer = min(options.shuffle_buffer, num_examples) if num_examples else options.shuffle_buffer
        dataset = dataset.shuffle(buffer, seed=options.seed, reshuffle_each_iteration=True)
    if training and augment is not None:
        dataset = dataset.map(augment, num_parallel_calls=options.parallel_calls)
    dataset = dataset.batch(options.batch_size)
    if options.limit_batches is not None and num_examples:
        dataset = dataset.take(limited_batches(options, num_examples))
    dataset = dataset.prefetch(tf.data.AUTOTUNE if options.prefetch == "auto" else options.prefetch)
    return dataset.with_options(tf_options(options))


def limited_batches(options: PipelineOptions, num_examples: int) -> int:
    """data.limit_batches as a number of batches of a split of `num_examples`."""
    batches = -(-num_examples // options.batch_size)
    wanted = options.limit_batches
    return min(batches, wanted if isinstance(wanted, int) else max(1, round(wanted * batches)))


def examples_read(options: PipelineOptions, num_examples: int) -> int:
    """How many of a split's examples an epoch reads (all, unless data.limit_batches takes fewer)."""
    if options.limit_batches is None:
        return num_examples
    return min(num_examples, limited_batches(options, num_examples) * options.batch_size)


def tf_options(options: PipelineOptions):
    """Determinism and the multi-worker auto-shard policy, explicit rather than tf.distribute's
    guess (FILE, falling back to DATA with a warning when there are fewer files than workers)."""
    import tensorflow as tf

    policy = tf.data.experimental.AutoShardPolicy
    result = tf.data.Options()
    result.deterministic = options.deterministic
    result.experimental_distribute.auto_shard_policy = {
        "auto": policy.AUTO, "file": policy.FILE, "data": policy.DATA, "off": policy.OFF}[options.shard_policy]
    return result


# --- in-memory arrays -----------------------------------------------------------------------

@dataclass
class Split:
    x: np.ndarray
    y: np.ndarray


NORMALIZATIONS = ("scale", "standardize", "none")


def normalize_arrays(splits: dict[str, Split], normalization: str, raw_scale: float) -> tuple[Any, Any]:
    """(offset, scale) applied to every split: `scale` multiplies by the source's raw range,
    `standardize` uses the training split's per-feature mean and std. Returns them for the spec."""
    require_choice("data.normalization", normalization, NORMALIZATIONS)
    if normalization == "none":
        offset, scale = 0.0, 1.0
    elif normalization == "scale":
        offset, scale = 0.0, raw_scale
    else:
        train = splits["train"].x.astype("float64")
        axes = tuple(range(train.ndim - 1))  # per feature (last axis)
        offset = train.mean(axis=axes)
        scale = 1.0 / np.maximum(train.std(axis=axes), 1e-7)
        offset, scale = tuple(float(v) for v in offset), tuple(float(v) for v in scale)
    for split in {id(split): split for split in splits.values()}.values():  # validation may be the test split
        split.x = ((split.x.astype("float32") - np.asarray(offset, "float32")) * np.asarray(scale, "float32"))
    return offset, scale


def split_three_ways(x, y, test_split, validation_split, seed) -> dict[str, Split]:
    """Seeded train / validation / test split of in-memory arrays, stratified where every class
    can appear in every split (a tiny dataset falls back to a plain seeded split)."""
    require_fraction("data.test_split", test_split)
    require_fraction("data.validation_split", validation_split)
    x_rest, x_test, y_rest, y_test = split_two_ways(x, y, test_split, seed)
    x_train, x_val, y_train, y_val = split_two_ways(x_rest, y_rest, validation_split, seed)
    return {"train": Split(x_train, y_train), "validation": Split(x_val, y_val), "test": Split(x_test, y_test)}


def split_two_ways(x, y, fraction, seed):
    """(x_kept, x_held, y_kept, y_held): `fraction` held out, seeded, stratified where possible."""
    from sklearn.model_selection import train_test_split

    if len(y) and np.bincount(y).min() >= 2:
        try:
            return train_test_split(x, y, test_size=fraction, random_state=seed, stratify=y)
        except ValueError:  # fewer held-out examples than classes
            pass
    return train_test_split(x, y, test_size=fraction, random_state=seed)


def hold_out_validation(x_train, y_train, x_test, y_test, validation_split: float) -> dict[str, Split]:
    """Sources with a fixed test split: validation is the training split's tail (0: the test split)."""
    test = Split(x_test, y_test)
    if validation_split == 0:  # the seed article's choice: validate on the test split
        return {"train": Split(x_train, y_train), "validation": test, "test": test}
    require_fraction("data.validation_split", validation_split)
    count = max(1, int(round(len(x_train) * validation_split)))
    return {"train": Split(x_train[:-count], y_train[:-count]),
            "validation": Split(x_train[-count:], y_train[-count:]), "test": test}


def from_arrays(splits: dict[str, Split], input_shape, num_classes, options: PipelineOptions,
                normalization: str = "scale", raw_scale: float = 1.0, *, named: str, source: str,
                source_type: str = "code", augment: Callable | None = None) -> Datasets:
    """Datasets from in-memory splits: checked against the declared spec, digested as read (`named`
    and `source` name them in MLflow), normalized, batched."""
    import tensorflow as tf

    from tfx_hydra.data.lineage import array_reads

    if options.limit is not None:
        splits["train"] = Split(splits["train"].x[:options.limit], splits["train"].y[:options.limit])
    spec = DataSpec(tuple(int(d) for d in input_shape), int(num_classes))
    for name, split in splits.items():
        check_against_spec(name, split.x.shape[1:], len(split.x), split.y, spec)
    require_a_batch(len(splits["train"].x), options.batch_size)
    reads = array_reads(named, source, splits, num_classes, source_type)
    offset, scale = normalize_arrays(splits, normalization, raw_scale)
    spec = DataSpec(spec.input_shape, spec.num_classes, input_scale=scale, input_offset=offset)

    def pipeline(name: str, training: bool):
        split = splits[name]
        dataset = tf.data.Dataset.from_tensor_slices((split.x, split.y.astype("int64")))
        # in-memory data has no files to shard: DATA unless the user said otherwise
        shard = "data" if options.shard_policy == "auto" else options.shard_policy
        return finish(dataset, dataclasses.replace(options, shard_policy=shard), training=training,
                      num_examples=len(split.x), cache_suffix=f".{name}", augment=augment)

    count = {name: examples_read(options, len(split.x)) for name, split in splits.items()}
    return Datasets(train=pipeline("train", True), validation=pipeline("validation", False),
                    test=pipeline("test", False), spec=spec, num_train=count["train"],
                    num_validation=count["validation"], num_test=count["test"], reads=reads)


def streamed_datasets(splits: dict[str, Any], counts: dict[str, int], parse, spec: DataSpec,
                      options: PipelineOptions, augment=None, check_finite_as: str | None = None,
                      reads: Callable[[str, int], Any] | None = None) -> Datasets:
    """Parsed, limited, cached, shuffled, batched: the three splits of a streamed source (TFRecords,
    image files, TFDS), each of a known size. `check_finite_as` (the source's name, for the
    message) checks the first data.check_finite_batches batches of each split for NaN/inf before
    training; sources that check their own way, or whose inputs cannot be NaN, pass None.
    `reads(split, count)` describes what a split reads (lineage.DataRead), once its count is final."""
    import tensorflow as tf

    for name in ("train", "validation", "test"):
        if counts[name] == 0:
            raise DataError(f"the {name} split is empty.", fix="use more data or smaller split fractions")
    if options.limit is not None:
        splits["train"], counts["train"] = splits["train"].take(options.limit), min(options.limit, counts["train"])
    require_a_batch(counts["train"], options.batch_size)
    finished = {}
    for name, dataset in splits.items():
        if getattr(parse, "batched", False):
            parsed = dataset.batch(PARSE_BATCH).map(parse, num_parallel_calls=options.parallel_calls,
                                                    deterministic=options.deterministic).unbatch()
        else:
            parsed = dataset.map(parse, num_parallel_calls=options.parallel_calls,
                                 deterministic=options.deterministic)
        # the count is known (counted or listed): telling tf.data lets Keras size epochs and progress
        parsed = parsed.apply(tf.data.experimental.assert_cardinality(counts[name]))
        if check_finite_as and options.check_finite:
            require_finite_stream(parsed, name, check_finite_as, options)
        finished[name] = finish(parsed, options, training=name == "train", num_examples=counts[name],
                                augment=augment, cache_suffix=f".{name}")
    described = {name: reads(name, counts[name]) for name in ("train", "validation", "test")} if reads else {}
    read = {name: examples_read(options, counts[name]) for name in counts}
    return Datasets(train=finished["train"], validation=finished["validation"], test=finished["test"], spec=spec,
                    num_train=read["train"], num_validation=read["validation"], num_test=read["test"],
                    reads=described)


def require_finite_stream(dataset, split: str, source: str, options: PipelineOptions) -> None:
    bad = first_non_finite(dataset, checked_examples(options))
    if bad is not None:
        index, position, value = bad
        raise non_finite_example(f"{source}: example {index} of the {split} split (in reading order)", value, position)


def non_finite_example(example: str, value, position: tuple[int, ...]) -> DataError:
    """'<example> has nan in its inputs at [2, 3]', the one message of every streamed check."""
    return DataError(f"{example} has {value} in its inputs at [{', '.join(map(str, position))}]; the inputs must be "
                     "finite numbers.", fix=NON_FINITE_FIX)


# --- checks every source makes ------------------------------------------------------------------

def check_against_spec(name: str, shape: Sequence[int], count: int, labels: np.ndarray | None,
                       spec: DataSpec) -> None:
    if count == 0:
        raise DataError(f"the {name} split is empty.", fix="use more data or smaller split fractions")
    if tuple(shape) != spec.input_shape:
        raise DataError(
            f"data.input_shape={list(spec.input_shape)} does not match the data: {name} examples have shape "
            f"{list(shape)}.",
            fix=f"data.input_shape={list(shape)}".replace(" ", ""),
        )
    if labels is not None and len(labels) and (labels.min() < 0 or labels.max() >= spec.num_classes):
        raise DataError(
            f"data.num_classes={spec.num_classes} does not match the data: {name} labels range over "
            f"[{labels.min()}, {labels.max()}].",
            fix=f"data.num_classes={int(labels.max()) + 1}",
        )


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


def first_non_finite(dataset, examples: int | None):
    """(example index, position, value) of the first example among the first `examples` of an
    unbatched (inputs, label) dataset whose inputs hold NaN/inf, in the dataset's order; or None."""
    import tensorflow as tf

    if examples is not None:
        dataset = dataset.take(examples)
    seen = 0
    for inputs, _ in dataset.batch(PARSE_BATCH):
        finite = tf.reshape(tf.math.is_finite(inputs), (tf.shape(inputs)[0], -1))
        rows = tf.reduce_all(finite, axis=1)
        if not bool(tf.reduce_all(rows)):
            row = int(tf.argmin(tf.cast(rows, tf.int32)))
            values = np.asarray(inputs[row])
            position = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
            return seen + row, position, values[position]
        seen += int(tf.shape(inputs)[0])
    return None


def checked_examples(options: PipelineOptions) -> int | None:
    """How many examples of each split a streamed source checks for NaN/inf before training."""
    batches = options.check_finite_batches
    return None if batches is None else batches * options.batch_size


def require_a_batch(num_train: int, batch_size: int) -> None:
    if num_train < batch_size:
        raise DataError(
            f"the training split has {num_train} examples, fewer than one batch (trainer.batch_size={batch_size}).",
            fix=f"trainer.batch_size={max(1, num_train)} or more data (data.limit=null)",
        )


def require_fraction(key: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{key}={value} is out of range: expected a fraction between 0 and 1.", fix=f"{key}=0.1")


def require_choice(key: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value} is unknown: expected one of {', '.join(choices)}.", fix=f"{key}={choices[0]}")
