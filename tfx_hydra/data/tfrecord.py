"""data=tfrecord: TFRecord shards of tf.train.Examples, streamed.

They stream (interleaved across files, parsed in parallel) and never need to fit in memory,
which is the point of converting to them (`python -m tfx_hydra.data.to_tfrecord`). Splits without files
of their own are whole training files where there are 10 or more (drawn by data.seed), else the training
files' records by a seeded pattern of their positions (record_splits.py). The records per file come from an
index or a cache (record_index.py); nothing is read through before the first step.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
from typing import Sequence

import numpy as np

from tfx_hydra.data import record_index, record_splits
from tfx_hydra.data.finite import checked_examples, first_non_finite, non_finite_example
from tfx_hydra.data.lineage import DataRead, common_folder, files_read
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import (
    FILE_NORMALIZATIONS,
    PARSE_BATCH,
    PIXEL_SCALE,
    Datasets,
    DataSpec,
    scaled_pixels,
    streamed_datasets,
)
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice
from tfx_hydra.task import get as get_task

log = logging.getLogger(__name__)
FEATURE_KINDS = ("image", "dense")


def tfrecord(train_files, test_files, input_shape, num_classes, batch_size, seed, validation_files=None,
             validation_split=0.1, test_split=0.2, kind="dense", inputs_key="inputs", label_key="label",
             normalization="scale", raw_scale=1.0, task="classification", weight_key=None, **pipeline) -> Datasets:
    """TFRecord files of tf.train.Examples: `inputs_key` holds the input (float values for
    kind=dense, encoded PNG/JPEG bytes for kind=image) and `label_key` the label: an integer class
    (classification), or num_classes floats (binary: one 0/1; multilabel: a multi-hot row; regression:
    the targets), as data.to_tfrecord writes them. The first record's label is checked against the task.
    `weight_key`: a float feature, each example's weight in the training loss (the other splits unweighted).

    Splits without files of their own are whole training files (10 or more), else the training files' records
    by a seeded pattern of their positions (record_splits.py): nothing is counted or read through before
    training, and the split is the same on every start.
    """
    import tensorflow as tf

    options = options_from(batch_size, seed, pipeline)
    require_choice("data.kind", kind, FEATURE_KINDS)
    require_choice("data.normalization", normalization, FILE_NORMALIZATIONS)
    scale = (PIXEL_SCALE if kind == "image" else raw_scale) if normalization == "scale" else 1.0
    spec = DataSpec(tuple(int(d) for d in input_shape), int(num_classes), input_scale=scale, task=get_task(task))
    sources = {"train": expand_globs("data.train_files", train_files),
               "validation": expand_globs("data.validation_files", validation_files) if validation_files else None,
               "test": expand_globs("data.test_files", test_files) if test_files else None}
    record_splits.carve_whole_files(sources, validation_split, test_split, options.seed)
    pattern = record_splits.carving(sources, validation_split, test_split, options.seed)
    counts = record_splits.split_sizes(sources, pattern)
    parse = example_parser(kind, inputs_key, label_key, spec, weight_key)
    check_first_example(sources["train"][0], parse, spec, inputs_key, label_key, weight_key)
    if options.check_finite and kind == "dense":  # decoded images are integers: never NaN
        for name, files in sources.items():
            if files:
                require_finite_records(files, parse, f"data.{name}_files", options)

    def records(files: list[str], training: bool):
        names = tf.data.Dataset.from_tensor_slices(files)
        if training and options.seed is not None and len(files) > 1:
            names = names.shuffle(len(files), seed=options.seed, reshuffle_each_iteration=True)
        return names.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
                                num_parallel_calls=tf.data.AUTOTUNE,
                                deterministic=options.deterministic or pattern is not None)  # a pattern: in order

    if pattern is not None and options.shard_policy == "auto":  # sharding by file would carve each worker's own
        options = dataclasses.replace(options, shard_policy="data")
    splits = {name: records(files, training=name == "train" and pattern is None)
              for name, files in sources.items() if files}
    for name in ("train", "validation", "test"):
        if pattern is not None and (name == "train" or not sources[name]):
            splits[name] = record_splits.by_pattern(records(sources["train"], training=False), pattern, name)
    globs = {"train": train_files, "validation": validation_files, "test": test_files}

    def read(name: str, count: int | None) -> DataRead:
        """A carved split is a share of the training files' records: the pattern enters its digest."""
        files, pattern_of = (sources[name], globs[name] or train_files) if sources[name] else (sources["train"],
                                                                                              train_files)
        carved = f"the {name} records by the split pattern of seed {options.seed}, test {test_split}, validation " \
                 f"{validation_split}" if pattern is not None and (name == "train" or not sources[name]) else "all"
        return files_read(name, os.path.basename(common_folder(files)) or "tfrecord",
                          ", ".join([pattern_of] if isinstance(pattern_of, str) else list(pattern_of)), files, count,
                          spec.input_shape, spec.num_classes, carved, f"limit {options.limit}", count_in_digest=False)

    unknown = sorted({path for files in sources.values() if files for path in files}
                     - set(record_index.known_counts([p for files in sources.values() if files for p in files])))
    if unknown:  # the next start knows them; this one reads each epoch to its end
        log.info(f"data: {len(unknown)} TFRecord file{'s' if len(unknown) > 1 else ''} without an index: the epochs' "
                 "length is learned as they are read (counted while training, kept for the next start; "
                 "python -m tfx_hydra.data.to_tfrecord writes an index)")
        record_index.count_in_background(unknown, record_splits.tfrecord_count, "TFRecord")
    every = [path for files in sources.values() if files for path in files]
    return streamed_datasets(splits, counts, parse, spec, options, reads=read,
                             to_inputs=scaled_pixels(scale) if kind == "image" else None,
                             explain=lambda err: corrupt_record(err, every))


def expand_globs(key: str, patterns: str | Sequence[str]) -> list[str]:
    """Sorted files matching one glob or a list of them; an empty match is an error, not an empty split."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    files: list[str] = []
    for pattern in patterns:
        matched = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matched:
            raise DataError(f"{key}: no file matches {pattern}.",
                            fix=f"{key}=/abs/path/train-*.tfrecord (a glob or a list of globs); "
                            "python -m tfx_hydra.data.to_tfrecord writes such files")
        files += matched
    return files


def corrupt_record(err: Exception, files: list[str]) -> Exception | None:
    """The file and record a TFRecord read failed at in an epoch (TensorFlow's message names neither
    reliably), found by reading the files in turn once the error has happened, as one DataError."""
    import tensorflow as tf

    if not isinstance(err, tf.errors.DataLossError) and "corrupted record" not in str(err):
        return None
    for path in files:
        read = 0
        try:
            for _ in tf.data.TFRecordDataset(path):
                read += 1
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as failed:
            reason = failed.message.strip().splitlines()[0]
            return DataError(f"the TFRecord file {path} is corrupt or truncated after record {read} ({reason}).",
                             fix="write it again (python -m tfx_hydra.data.to_tfrecord), or leave it out of the "
                             "glob: the run's backup is kept, so the same command resumes")
    return None


def require_finite_records(files: list[str], parse, key: str, options) -> None:
    """The first data.check_finite_batches x batch_size records of `files`, in file order, hold
    finite inputs: a NaN is named by its file and record, before training."""
    import tensorflow as tf

    names = tf.data.Dataset.from_tensor_slices(files)
    records = names.flat_map(lambda path: tf.data.TFRecordDataset(path).enumerate().map(
        lambda index, record: (path, index, record)))
    bad = first_non_finite(records.map(lambda path, index, record: record).batch(PARSE_BATCH).map(parse).unbatch(),
                           checked_examples(options))
    if bad is None:
        return
    position_in_all, position, value = bad
    path, index, _ = next(iter(records.skip(position_in_all).take(1)))
    raise non_finite_example(f"{key}: record {int(index)} of {path.numpy().decode()}", value, position)


def example_parser(kind: str, inputs_key: str, label_key: str, spec: DataSpec, weight_key: str | None = None):
    """tf.train.Example bytes -> (the input of the spec's shape: dense floats scaled, image pixels as uint8;
    the task's label: an int64 class, or num_classes float32 values[; the float32 weight under `weight_key`]).
    Dense records parse in batches (`parse.batched`): per example, parsing 784 floats capped
    streaming at ~10k examples/s on 2 cores, well under what a small model trains at."""
    import tensorflow as tf

    size = int(np.prod(spec.input_shape))
    if kind == "dense":
        features = {inputs_key: tf.io.FixedLenFeature([size], tf.float32)}
    else:
        features = {inputs_key: tf.io.FixedLenFeature([], tf.string)}
    classes = spec.task.name == "classification"
    features[label_key] = (tf.io.FixedLenFeature([], tf.int64) if classes
                           else tf.io.FixedLenFeature([spec.num_classes], tf.float32))
    if weight_key:
        features[weight_key] = tf.io.FixedLenFeature([], tf.float32)

    def labelled(inputs, example):
        return (inputs, example[label_key], example[weight_key]) if weight_key else (inputs, example[label_key])

    def parse_dense_batch(records):
        examples = tf.io.parse_example(records, features)
        return labelled(tf.reshape(examples[inputs_key], (-1, *spec.input_shape)) * spec.input_scale, examples)

    def parse_image(record):  # uint8 pixels: cached as decoded, scaled after the cache (pipeline.scaled_pixels)
        example = tf.io.parse_single_example(record, features)
        return labelled(decode_image(example[inputs_key], spec.input_shape), example)

    parse = parse_dense_batch if kind == "dense" else parse_image
    parse.batched = kind == "dense"
    return parse


def decode_image(data, shape: tuple[int, ...]):
    """PNG/JPEG/BMP/GIF bytes -> a tensor of `shape` (H, W) or (H, W, C); a wrong size fails clearly."""
    import tensorflow as tf

    channels = shape[2] if len(shape) == 3 else 1
    image = tf.io.decode_image(data, channels=channels, expand_animations=False)
    image = tf.ensure_shape(image, (*shape[:2], channels))
    return image if len(shape) == 3 else tf.squeeze(image, -1)


def check_first_example(path: str, parse, spec: DataSpec, inputs_key: str, label_key: str,
                        weight_key: str | None = None) -> None:
    """Parse one record now: a wrong feature key or shape is a config mistake, said before training."""
    import tensorflow as tf

    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)))
        inputs, label, *weight = parse(record[tf.newaxis]) if getattr(parse, "batched", False) else parse(record)
        label = tf.reshape(label, [-1]).numpy()
    except StopIteration:
        raise DataError(f"the TFRecord file {path} is empty.", fix="leave it out of data.train_files") from None
    except (tf.errors.InvalidArgumentError, ValueError) as err:
        message = getattr(err, "message", str(err)).splitlines()[0]
        raise DataError(
            f"the first record of {path} does not parse as data.inputs_key={inputs_key}, data.label_key={label_key}, "
            + (f"data.weight_key={weight_key}, " if weight_key else "") +
            f"data.input_shape={list(spec.input_shape)}: {message}",
            fix="declare the keys, data.kind (dense | image) and data.input_shape the files were written with "
            "(to_tfrecord writes them into the data option it writes beside the files)",
        ) from None
    if spec.task.name != "classification":
        spec.task.labels(label[np.newaxis], f"the first record of {path}", spec.num_classes)
    elif not 0 <= int(label[0]) < spec.num_classes:
        raise DataError(f"data.num_classes={spec.num_classes} does not match the data: {path} has label "
                        f"{int(label[0])}.", fix=f"data.num_classes={int(label[0]) + 1} or more")
