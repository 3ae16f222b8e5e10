"""What every data source shares: the spec, the three splits, and the way examples become batches.

Order of a pipeline (each step a tf.data transformation, nothing hand-rolled):
    examples -> [map: decode / normalize, parallel] -> [limit] -> cache -> [shuffle, training only]
             -> [map: augment, training only] -> batch -> prefetch
Caching before the shuffle keeps decoding out of every epoch but the first; augmenting
after it keeps augmentation fresh each epoch. TensorFlow is imported inside the
functions: config validation must not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tfx_hydra.cv import folded
from tfx_hydra.data.finite import checked_examples, require_finite_stream
from tfx_hydra.data.spec import DataSpec, with_class_names
from tfx_hydra.data.splits import Split, normalize_arrays, target_figures
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.task import Task
from tfx_hydra.task import get as get_task
from tfx_hydra.validation import require_choice, require_positive_or_auto

SHARD_POLICIES = ("auto", "file", "data", "off")
PIXEL_SCALE = 1 / 255.0  # 8-bit images to [0, 1]
# streamed files: standardizing a stream needs a pass over it (convert to a CSV or arrays)
FILE_NORMALIZATIONS = ("scale", "none")
PARSE_BATCH = 256  # a `parse.batched` parser gets this many records at a time: one parse_example call, not 256


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
    folded: bool = False  # training and validation re-cut into a cv=kfold job's fold (cv.py)
    # a streamed source's account of an error TensorFlow raised reading it (which file, why): a DataError or None
    explain: Callable[[Exception], Exception | None] | None = None

    def named_errors(self):
        """A block (training, evaluation) in which an error TensorFlow raises while reading this data becomes
        the source's DataError naming the file, where the source can tell (explain)."""
        return _named_errors(self)


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
    class_names: tuple[str, ...] | None = None  # the classes' names in index order (null: the data's, or numbered)

    def __post_init__(self) -> None:
        require_choice("data.shard_policy", self.shard_policy, SHARD_POLICIES)
        for key in ("prefetch", "map_parallelism"):
            require_positive_or_auto(f"data.{key}", getattr(self, key), "auto")
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
        if self.class_names is not None:
            names = self.class_names
            if isinstance(names, str) or not all(isinstance(n, (str, int)) and str(n) for n in names):
                raise ConfigError(f"data.class_names={names!r}: expected a list of names, one per class, in index "
                                  "order.", fix="data.class_names=[cat,dog,bird], or null (the data's, or numbered)")
            object.__setattr__(self, "class_names", tuple(str(n) for n in names))
            if len(set(self.class_names)) != len(self.class_names):
                raise ConfigError(f"data.class_names={list(self.class_names)} names a class twice.",
                                  fix="one distinct name per class")
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
    """[limit ->] cache -> shuffle -> augment -> batch -> prefetch, with the sharding and determinism options.
    data.limit_batches takes its examples before the cache: every epoch reads the same few batches'
    worth (what debug=overfit needs), and the cache is read whole (a cache read partly is thrown away
    by tf.data, with a warning per epoch and split)."""
    import tensorflow as tf

    if not training and isinstance(dataset.element_spec, tuple) and len(dataset.element_spec) == 3:
        dataset = dataset.map(lambda inputs, label, weight: (inputs, label))  # fit weighs its loss; metrics are not
    if options.limit_batches is not None and num_examples:
        num_examples = examples_read(options, num_examples)
        dataset = dataset.take(num_examples)
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


def from_arrays(splits: dict[str, Split], input_shape, num_classes, options: PipelineOptions,
                normalization: str = "scale", raw_scale: float = 1.0, *, named: str, source: str,
                source_type: str = "code", augment: Callable | None = None, task: Task | str = "classification",
                class_names: Sequence[str] | None = None) -> Datasets:
    """Datasets from in-memory splits: checked against the declared spec and the task's labels, digested
    as read (`named` and `source` name them in MLflow), normalized, batched. `class_names`: the classes'
    names the source read (class strings, tags), in index order."""
    import tensorflow as tf

    from tfx_hydra.data.lineage import array_reads

    task = get_task(task) if isinstance(task, str) else task
    as_read = splits
    splits = folded(splits, task.name)  # this job's fold of a cv=kfold sweep; else as they are
    if options.limit is not None:
        splits["train"] = splits["train"].first(options.limit)
    text = splits["train"].x.dtype.kind in "OUS"  # raw strings: no scaling, no float cast
    spec = with_class_names(DataSpec(tuple(int(d) for d in input_shape), int(num_classes), task=task,
                                     input_dtype="string" if text else "float32"), class_names, options.class_names)
    for name, split in {id(split): (name, split) for name, split in splits.items()}.values():
        check_against_spec(name, split.x.shape[1:], len(split.x), spec)
        split.y = task.labels(split.y, name, spec.num_classes)
    require_a_batch(len(splits["train"].x), options.batch_size)
    reads = array_reads(named, source, splits, num_classes, source_type)
    offset, scale = (0.0, 1.0) if text else normalize_arrays(splits, normalization, raw_scale)
    spec = dataclasses.replace(spec, input_scale=scale, input_offset=offset, **target_figures(task, splits["train"].y))

    def pipeline(name: str, training: bool):
        # (x, y), or (x, y, weight) when the source read weights: finish() keeps them for training only
        dataset = tf.data.Dataset.from_tensor_slices(splits[name].arrays())
        # in-memory data has no files to shard: DATA unless the user said otherwise
        shard = "data" if options.shard_policy == "auto" else options.shard_policy
        return finish(dataset, dataclasses.replace(options, shard_policy=shard), training=training,
                      num_examples=len(splits[name].x), cache_suffix=f".{name}", augment=augment)

    count = {name: examples_read(options, len(split.x)) for name, split in splits.items()}
    return Datasets(train=pipeline("train", True), validation=pipeline("validation", False),
                    test=pipeline("test", False), spec=spec, num_train=count["train"], num_test=count["test"],
                    num_validation=count["validation"], reads=reads, folded=splits is not as_read)


def streamed_datasets(splits: dict[str, Any], counts: dict[str, int], parse, spec: DataSpec,
                      options: PipelineOptions, augment=None, check_finite_as: str | None = None,
                      reads: Callable[[str, int], Any] | None = None,
                      explain: Callable[[Exception], Exception | None] | None = None) -> Datasets:
    """Parsed, limited, cached, shuffled, batched: the three splits of a streamed source (TFRecords,
    image files, TFDS), each of a known size. `check_finite_as` (the source's name, for the
    message) checks the first data.check_finite_batches batches of each split for NaN/inf before
    training; sources that check their own way, or whose inputs cannot be NaN, pass None.
    `reads(split, count)` describes what a split reads (lineage.DataRead), once its count is final."""
    import tensorflow as tf

    spec = with_class_names(spec, spec.class_names, options.class_names)
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
            require_finite_stream(parsed, name, check_finite_as, checked_examples(options))
        finished[name] = finish(parsed, options, training=name == "train", num_examples=counts[name],
                                augment=augment, cache_suffix=f".{name}")
    described = {name: reads(name, counts[name]) for name in ("train", "validation", "test")} if reads else {}
    read = {name: examples_read(options, counts[name]) for name in counts}
    return Datasets(train=finished["train"], validation=finished["validation"], test=finished["test"], spec=spec,
                    num_train=read["train"], num_validation=read["validation"], num_test=read["test"],
                    reads=described, explain=explain)


@contextlib.contextmanager
def _named_errors(datasets: Datasets):
    try:
        yield
    except Exception as err:
        said = datasets.explain(err) if datasets.explain is not None and type(err).__module__.startswith(
            "tensorflow") else None
        if said is None:
            raise
        raise said from None


def require_datasets(built: Any, target: str, task: Task | None = None) -> Datasets:
    """What a data source -- ours or the user's -- returns: Datasets (data.from_pipelines makes them),
    whose labels are the configured task's; the spec then carries that task (its threshold too)."""
    if not isinstance(built, Datasets):
        raise DataError(f"data._target_={target} returned a {type(built).__qualname__}, not tfx_hydra's Datasets.",
                        fix="return tfx_hydra.data.from_pipelines(train, validation, test, input_shape=..., "
                        "num_classes=..., batch_size=batch_size, seed=seed, **pipeline)")
    if task is None:
        return built
    if built.spec.task.name != task.name:
        raise DataError(f"data._target_={target} gave {built.spec.task.name} labels, but the run is task={task.name}.",
                        fix=f"task={built.spec.task.name}, or hand the task on: from_pipelines(..., task=task)")
    built.spec = dataclasses.replace(built.spec, task=task)
    return built


# --- checks every source makes ------------------------------------------------------------------

def check_against_spec(name: str, shape: Sequence[int], count: int, spec: DataSpec) -> None:
    """A split has examples, of the declared shape (its labels are the task's to check)."""
    if count == 0:
        raise DataError(f"the {name} split is empty.", fix="use more data or smaller split fractions")
    if tuple(shape) != spec.input_shape:
        raise DataError(f"data.input_shape={list(spec.input_shape)} does not match the data: {name} examples have "
                        f"shape {list(shape)}.", fix=f"data.input_shape={list(shape)}".replace(" ", ""))


def require_a_batch(num_train: int, batch_size: int) -> None:
    if num_train < batch_size:
        raise DataError(f"the training split has {num_train} examples, fewer than one batch (trainer.batch_size="
                        f"{batch_size}).", fix=f"trainer.batch_size={max(1, num_train)} or more data (data.limit=null)")
