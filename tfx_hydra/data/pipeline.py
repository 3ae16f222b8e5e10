"""What every data source shares: the spec, the three splits, and the way examples become batches.

Order of a pipeline (each step a tf.data transformation, nothing hand-rolled):
    examples -> [map: decode, parallel] -> [limit] -> cache -> [shuffle, training only]
             -> [map: to the model's inputs, uint8 pixels to scaled floats] -> [map: augment, training only]
             -> batch -> prefetch
Caching before the shuffle keeps decoding out of every epoch but the first; augmenting
after it keeps augmentation fresh each epoch. Images are cached as decoded (uint8), a quarter of their
float32 size, and scaled after the cache. Where the cache lives (memory, disk, nowhere) is cache.py's
decision, made for all three splits at once. TensorFlow is imported inside the
functions: config validation must not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tfx_hydra.cv import folded
from tfx_hydra.data import cache as caching
from tfx_hydra.data import service as data_service
from tfx_hydra.data.epoch_order import EpochOrder
from tfx_hydra.data.finite import checked_examples, require_finite_stream
from tfx_hydra.data.options import PipelineOptions
from tfx_hydra.data.spec import DataSpec, with_class_names
from tfx_hydra.data.splits import Split, normalize_arrays, target_figures
from tfx_hydra.errors import DataError
from tfx_hydra.task import Task
from tfx_hydra.task import get as get_task

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
    num_train: int | None  # None: a user's pipeline of unknown length (from_pipelines), read to its end each epoch
    num_validation: int | None
    num_test: int | None
    reads: dict[str, Any] = dataclasses.field(default_factory=dict)  # split -> lineage.DataRead: what was read
    folded: bool = False  # training and validation re-cut into a cv=kfold job's fold (cv.py)
    # a streamed source's account of an error TensorFlow raised reading it (which file, why): a DataError or None
    explain: Callable[[Exception], Exception | None] | None = None
    cache: str = ""  # where the decoded splits are kept and why (cache.py): said on the data line
    order: EpochOrder = dataclasses.field(default_factory=EpochOrder)  # training's order, by epoch (epoch_order.py)
    served: bool = False  # training read from tf.data service (service.py): its order is the workers'

    def named_errors(self):
        """A block (training, evaluation) in which an error TensorFlow raises while reading this data becomes
        the source's DataError naming the file, where the source can tell (explain)."""
        return _named_errors(self)


def limited(dataset, options: PipelineOptions, num_examples: int):
    """data.limit_batches takes its examples before the cache: every epoch reads the same few batches'
    worth (what debug=overfit needs), and the cache is read whole (a cache read partly is thrown away
    by tf.data, with a warning per epoch and split)."""
    read = examples_read(options, num_examples) if options.limit_batches is not None else None
    return dataset.take(read) if read else dataset


def cached_splits(options: PipelineOptions, splits: dict[str, Any], counts: dict[str, int],
                  in_memory: bool = False) -> tuple[dict[str, Any], caching.CachePlan]:
    """Each split limited and cached where cache.py's plan puts it (one decision for the three)."""
    splits = {name: limited(dataset, options, counts[name]) for name, dataset in splits.items()}
    plan = caching.plan(options, {name: (dataset, examples_read(options, counts[name]))
                                  for name, dataset in splits.items()}, in_memory=in_memory)
    if options.served:  # the workers decode the training split every epoch (service.py)
        plan = caching.without(plan, "train", "train: decoded by the tf.data service workers each epoch")
    for name, where in plan.where.items():
        if where is not None:
            splits[name] = splits[name].cache() if where == "memory" else splits[name].cache(where)
            if plan.scratch:
                caching.remove_with(splits[name], where, plan.scratch)
    return splits, plan


def finish(dataset, options: PipelineOptions, *, training: bool, num_examples: int | None = None,
           augment: Callable | None = None, to_inputs: Callable | None = None, shuffle_buffer: int | None = None,
           order: EpochOrder | None = None):
    """(a limited, cached split ->) shuffle -> to the model's inputs -> augment -> batch -> prefetch, with the
    sharding and determinism options. `to_inputs`: what turns a cached example into the model's input
    (uint8 pixels to scaled floats), done after the cache so the cache holds the smaller form. `order`: the
    training split is shuffled by epoch number (epoch_order.py), where its size is known and it is not sharded by
    file (data.shard_policy=file: reshuffled by tf.data each epoch, as before)."""
    import tensorflow as tf

    if not training and isinstance(dataset.element_spec, tuple) and len(dataset.element_spec) == 3:
        dataset = dataset.map(lambda inputs, label, weight: (inputs, label))  # fit weighs its loss; metrics are not
    num_examples = examples_read(options, num_examples) if num_examples else num_examples
    buffer = options.shuffle_buffer if shuffle_buffer is None else shuffle_buffer
    if training and buffer and options.seed is not None:
        buffer = min(buffer, num_examples) if num_examples else buffer
        if options.served:  # each worker shuffles the pieces it is handed: the order is the service's (service.py)
            dataset = dataset.shuffle(buffer, reshuffle_each_iteration=True)
        elif order is not None and num_examples and options.shard_policy != "file":  # file sharding needs the reader
            # as the pipeline's source, which the epoch's spine (epoch_order.py) would hide
            dataset = order.shuffled(dataset, buffer, options.seed, num_examples)
        else:
            dataset = dataset.shuffle(buffer, seed=options.seed, reshuffle_each_iteration=True)
    if to_inputs is not None:
        dataset = dataset.map(to_inputs, num_parallel_calls=options.parallel_calls)
    if training and augment is not None:
        dataset = dataset.map(augment, num_parallel_calls=options.parallel_calls)
    dataset = dataset.batch(options.batch_size)
    if training and options.served:
        dataset = data_service.distributed(dataset, options.service, options.batch_size)
    dataset = dataset.prefetch(tf.data.AUTOTUNE if options.prefetch == "auto" else options.prefetch)
    return dataset.with_options(options.tf_options())


def limited_batches(options: PipelineOptions, num_examples: int) -> int:
    """data.limit_batches as a number of batches of a split of `num_examples`."""
    batches = -(-num_examples // options.batch_size)
    wanted = options.limit_batches
    return min(batches, wanted if isinstance(wanted, int) else max(1, round(wanted * batches)))


def examples_read(options: PipelineOptions, num_examples: int | None) -> int | None:
    """How many of a split's examples an epoch reads (all, unless data.limit_batches takes fewer; None: all of
    a pipeline of unknown length)."""
    if options.limit_batches is None:
        return num_examples
    if num_examples is None:
        if isinstance(options.limit_batches, float):
            raise DataError(f"data.limit_batches={options.limit_batches} is a share of the batches, and this "
                            "pipeline does not know its length.", fix="data.limit_batches=2 (a number of batches)")
        return options.limit_batches * options.batch_size
    return min(num_examples, limited_batches(options, num_examples) * options.batch_size)


def scaled_pixels(scale: float):
    """uint8 pixels (as cached) to the model's float32 inputs: `scale` 1/255 or 1 (data.normalization)."""
    import tensorflow as tf

    def to_inputs(image, label, *weight):
        return tf.cast(image, tf.float32) * scale, label, *weight

    return to_inputs


def from_arrays(splits: dict[str, Split], input_shape, num_classes, options: PipelineOptions,
                normalization: str = "scale", raw_scale: float = 1.0, *, named: str, source: str,
                source_type: str = "code", augment: Callable | None = None, task: Task | str = "classification",
                class_names: Sequence[str] | None = None) -> Datasets:
    """Datasets from in-memory splits: checked against the declared spec and the task's labels, digested
    as read (`named` and `source` name them in MLflow), normalized, batched. `class_names`: the classes'
    names the source read (class strings, tags), in index order."""
    from tfx_hydra.data.lineage import array_reads

    task = get_task(task) if isinstance(task, str) else task
    as_read = splits
    splits = folded(splits, task.name, options.fold)  # a cv=kfold job's fold; else as they are
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

    # (x, y), or (x, y, weight) when the source read weights: finish() keeps them for training only
    sliced = {name: data_service.sliced(split.arrays(), options.served and name == "train")  # served: in pieces
              for name, split in splits.items()}
    sizes = {name: len(split.x) for name, split in splits.items()}
    sliced, cached = cached_splits(options, sliced, sizes, in_memory=True)
    # in-memory data has no files to shard: DATA unless the user said otherwise
    shard = "data" if options.shard_policy == "auto" else options.shard_policy
    order = EpochOrder()
    finished = {name: finish(dataset, dataclasses.replace(options, shard_policy=shard), training=name == "train",
                             num_examples=sizes[name], augment=augment, shuffle_buffer=cached.shuffle_buffer,
                             order=order)
                for name, dataset in sliced.items()}
    count = {name: examples_read(options, size) for name, size in sizes.items()}
    return Datasets(train=finished["train"], validation=finished["validation"], test=finished["test"], spec=spec,
                    num_train=count["train"], num_test=count["test"], num_validation=count["validation"],
                    reads=reads, folded=splits is not as_read, cache=cached.said, order=order,
                    served=options.served)


def streamed_datasets(splits: dict[str, Any], counts: dict[str, int], parse, spec: DataSpec,
                      options: PipelineOptions, augment=None, check_finite_as: str | None = None,
                      to_inputs: Callable | None = None,
                      reads: Callable[[str, int], Any] | None = None,
                      explain: Callable[[Exception], Exception | None] | None = None) -> Datasets:
    """Parsed, limited, cached, shuffled, batched: the three splits of a streamed source (TFRecords,
    image files, TFDS, tables), each of a known size or None: unknown, read to its end (`parse`: None where the
    source parsed them).
    `check_finite_as` (the source's name, for the message) checks the first data.check_finite_batches
    batches of each split for NaN/inf before training; sources that check their own way, or whose inputs
    cannot be NaN, pass None.
    `reads(split, count)` describes what a split reads (lineage.DataRead), once its count is final.
    `to_inputs`: what turns a parsed (and cached) example into the model's input, e.g. uint8 pixels into
    scaled floats: the cache then holds the compact form."""
    import tensorflow as tf

    spec = with_class_names(spec, spec.class_names, options.class_names)
    for name in ("train", "validation", "test"):
        if counts[name] == 0:
            raise DataError(f"the {name} split is empty.", fix="use more data or smaller split fractions")
    if options.limit is not None:
        splits["train"] = splits["train"].take(options.limit)
        counts["train"] = None if counts["train"] is None else min(options.limit, counts["train"])
    if counts["train"] is not None:  # of unknown length (files no index knows): the first epoch reads to its end
        require_a_batch(counts["train"], options.batch_size)
    parsed_splits = {}
    for name, dataset in splits.items():
        if parse is None:  # parsed by the source (table_stream: a batch of lines at a time)
            parsed = dataset
        elif getattr(parse, "batched", False):
            parsed = dataset.batch(PARSE_BATCH).map(parse, num_parallel_calls=options.parallel_calls,
                                                    deterministic=options.deterministic).unbatch()
        else:
            parsed = dataset.map(parse, num_parallel_calls=options.parallel_calls,
                                 deterministic=options.deterministic)
        if counts[name] is not None and not (name == "train" and options.served):  # known: Keras sizes epochs by it
            parsed = parsed.apply(tf.data.experimental.assert_cardinality(counts[name]))
        if check_finite_as and options.check_finite:
            require_finite_stream(parsed, name, check_finite_as, checked_examples(options))
        parsed_splits[name] = parsed
    parsed_splits, cached = cached_splits(options, parsed_splits, counts)
    order = EpochOrder()
    finished = {name: finish(parsed, options, training=name == "train", num_examples=counts[name], augment=augment,
                             to_inputs=to_inputs, shuffle_buffer=cached.shuffle_buffer, order=order)
                for name, parsed in parsed_splits.items()}
    described = {name: reads(name, counts[name]) for name in ("train", "validation", "test")} if reads else {}
    read = {name: examples_read(options, counts[name]) for name in counts}
    return Datasets(train=finished["train"], validation=finished["validation"], test=finished["test"], spec=spec,
                    num_train=read["train"], num_validation=read["validation"], num_test=read["test"],
                    reads=described, explain=explain, cache=cached.said, order=order,
                    served=options.served)


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
