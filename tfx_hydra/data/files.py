"""Sources on disk: TFRecord shards, image folders, CSV files.

TFRecords stream (interleaved across files, parsed in parallel): they never need to fit in
memory, which is the point of converting to them (`python -m tfx_hydra.data.to_tfrecord`).
Image folders stream decoded files the same way. A CSV of numeric columns is read into
memory: tabular data small enough for a CSV is small enough for RAM.
"""

from __future__ import annotations

import csv as csv_module
import dataclasses
import glob
import os
from typing import Any, Sequence

import numpy as np

from tfx_hydra.data.pipeline import (
    NON_FINITE_FIX,
    PARSE_BATCH,
    PIXEL_SCALE,
    DataSpec,
    Datasets,
    Split,
    checked_examples,
    first_non_finite,
    from_arrays,
    non_finite_example,
    options_from,
    require_choice,
    require_fraction,
    split_three_ways,
    split_two_ways,
    streamed_datasets,
)
from tfx_hydra.data.lineage import DataRead, common_folder, files_read
from tfx_hydra.errors import ConfigError, DataError

FEATURE_KINDS = ("image", "dense")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
FILE_NORMALIZATIONS = ("scale", "none")  # standardizing a stream needs a pass over it: convert to a CSV or arrays


# --- TFRecord ---------------------------------------------------------------------------------

def tfrecord(train_files, test_files, input_shape, num_classes, batch_size, seed, validation_files=None,
             validation_split=0.1, test_split=0.2, kind="dense", inputs_key="inputs", label_key="label",
             normalization="scale", raw_scale=1.0, **pipeline) -> Datasets:
    """TFRecord files of tf.train.Examples: `inputs_key` holds the input (float values for
    kind=dense, encoded PNG/JPEG bytes for kind=image) and `label_key` an integer class.

    Splits without files of their own are carved off the training files' first records
    (validation_split / test_split of them), in file order, before shuffling.
    """
    import tensorflow as tf

    options = options_from(batch_size, seed, pipeline)
    require_choice("data.kind", kind, FEATURE_KINDS)
    require_choice("data.normalization", normalization, FILE_NORMALIZATIONS)
    scale = (PIXEL_SCALE if kind == "image" else raw_scale) if normalization == "scale" else 1.0
    spec = DataSpec(tuple(int(d) for d in input_shape), int(num_classes), input_scale=scale)
    sources = {"train": expand_globs("data.train_files", train_files),
               "validation": expand_globs("data.validation_files", validation_files) if validation_files else None,
               "test": expand_globs("data.test_files", test_files) if test_files else None}
    per_file = {name: record_counts(files) for name, files in sources.items() if files}
    counts = {name: sum(files) for name, files in per_file.items()}
    parse = example_parser(kind, inputs_key, label_key, spec)
    check_first_example(sources["train"][0], parse, spec, inputs_key, label_key)
    if options.check_finite and kind == "dense":  # decoded images are integers: never NaN
        for name, files in sources.items():
            if files:
                require_finite_records(files, per_file[name], parse, f"data.{name}_files", options)

    def records(files: list[str], training: bool):
        names = tf.data.Dataset.from_tensor_slices(files)
        if training and options.seed is not None and len(files) > 1:
            names = names.shuffle(len(files), seed=options.seed, reshuffle_each_iteration=True)
        return names.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
                                num_parallel_calls=tf.data.AUTOTUNE, deterministic=options.deterministic)

    carved = carve_splits(counts, validation_split, test_split)
    if carved and options.shard_policy == "auto":  # sharding by file would carve each worker's own records
        options = dataclasses.replace(options, shard_policy="data")
    train_records = records(sources["train"], training=not carved)
    splits: dict[str, Any] = {}
    first = {"train": 0}  # where each split starts in its files' records
    for name in ("test", "validation"):
        if sources[name]:
            splits[name] = records(sources[name], training=False)
            first[name] = 0
        else:
            splits[name] = train_records.take(carved[name])
            train_records = train_records.skip(carved[name])
            counts[name] = carved[name]
            first[name], first["train"] = first["train"], first["train"] + carved[name]
    counts["train"] -= carved.get("test", 0) + carved.get("validation", 0)
    splits["train"] = train_records
    globs = {"train": train_files, "validation": validation_files, "test": test_files}

    def read(name: str, count: int) -> DataRead:
        """A carved split is a record range of the training files: the range enters its digest."""
        files, pattern = (sources[name], globs[name]) if sources[name] else (sources["train"], train_files)
        return files_read(name, os.path.basename(common_folder(files)) or "tfrecord",
                          ", ".join([pattern] if isinstance(pattern, str) else list(pattern)), files, count,
                          spec.input_shape, spec.num_classes, f"records {first[name]}..{first[name] + count}")

    return streamed_datasets(splits, counts, parse, spec, options, reads=read)


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


def record_counts(files: list[str]) -> list[int]:
    """Records per file, read in full: the counts size the splits, and a truncated or corrupt
    file fails here, named, instead of in the middle of epoch 3."""
    import tensorflow as tf

    counts = []
    for path in files:
        try:
            counts.append(int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda count, _: count + 1)))
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            raise DataError(f"the TFRecord file {path} is corrupt or truncated ({err.message.splitlines()[0]}).",
                            fix="write it again (python -m tfx_hydra.data.to_tfrecord), or leave it out of the glob"
                            ) from None
    return counts


def require_finite_records(files: list[str], counts: list[int], parse, key: str, options) -> None:
    """The first data.check_finite_batches x batch_size records of `files`, in file order, hold
    finite inputs: a NaN is named by its file and record, before training."""
    import tensorflow as tf

    records = tf.data.TFRecordDataset(files).batch(PARSE_BATCH).map(parse).unbatch()
    bad = first_non_finite(records, checked_examples(options))
    if bad is None:
        return
    index, position, value = bad
    file_number = int(np.searchsorted(np.cumsum(counts), index, side="right"))
    record = index - sum(counts[:file_number])
    raise non_finite_example(f"{key}: record {record} of {files[file_number]}", value, position)


def carve_splits(counts: dict[str, int], validation_split: float, test_split: float) -> dict[str, int]:
    """How many of the training files' records go to the splits that have no files of their own."""
    carved = {}
    for name, fraction, key in (("test", test_split, "data.test_split"),
                                ("validation", validation_split, "data.validation_split")):
        if name not in counts:
            require_fraction(key, fraction)
            carved[name] = max(1, int(round(counts["train"] * fraction)))
    if sum(carved.values()) >= counts["train"]:
        raise DataError(f"the training files hold {counts['train']} records, too few to carve validation and "
                        "test splits from.", fix="more data, or data.validation_files=... data.test_files=...")
    return carved


def example_parser(kind: str, inputs_key: str, label_key: str, spec: DataSpec):
    """tf.train.Example bytes -> (float32 input of the spec's shape, scaled; int64 label).
    Dense records parse in batches (`parse.batched`): per example, parsing 784 floats capped
    streaming at ~10k examples/s on 2 cores, well under what a small model trains at."""
    import tensorflow as tf

    size = int(np.prod(spec.input_shape))
    if kind == "dense":
        features = {inputs_key: tf.io.FixedLenFeature([size], tf.float32)}
    else:
        features = {inputs_key: tf.io.FixedLenFeature([], tf.string)}
    features[label_key] = tf.io.FixedLenFeature([], tf.int64)

    def parse_dense_batch(records):
        examples = tf.io.parse_example(records, features)
        inputs = tf.reshape(examples[inputs_key], (-1, *spec.input_shape))
        return inputs * spec.input_scale, examples[label_key]

    def parse_image(record):
        example = tf.io.parse_single_example(record, features)
        inputs = decode_image(example[inputs_key], spec.input_shape)
        return tf.cast(inputs, tf.float32) * spec.input_scale, example[label_key]

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


def check_first_example(path: str, parse, spec: DataSpec, inputs_key: str, label_key: str) -> None:
    """Parse one record now: a wrong feature key or shape is a config mistake, said before training."""
    import tensorflow as tf

    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)))
        inputs, label = parse(record[tf.newaxis]) if getattr(parse, "batched", False) else parse(record)
        label = tf.reshape(label, [-1])[0]
    except StopIteration:
        raise DataError(f"the TFRecord file {path} is empty.", fix="leave it out of data.train_files") from None
    except (tf.errors.InvalidArgumentError, ValueError) as err:
        message = getattr(err, "message", str(err)).splitlines()[0]
        raise DataError(
            f"the first record of {path} does not parse as data.inputs_key={inputs_key}, data.label_key={label_key}, "
            f"data.input_shape={list(spec.input_shape)}: {message}",
            fix="declare the keys, data.kind (dense | image) and data.input_shape the files were written with "
            "(to_tfrecord writes them into the data option it writes beside the files)",
        ) from None
    if not 0 <= int(label) < spec.num_classes:
        raise DataError(f"data.num_classes={spec.num_classes} does not match the data: {path} has label {int(label)}.",
                        fix=f"data.num_classes={int(label) + 1} or more")


# --- a folder of class folders -------------------------------------------------------------------

FLIPS = ("horizontal", "vertical", "horizontal_and_vertical")


def image_folder(directory, input_shape, num_classes, batch_size, seed, test_directory=None, resize=True,
                 validation_split=0.1, test_split=0.2, normalization="scale", augmentation=None,
                 **pipeline) -> Datasets:
    """`directory/<class name>/<image>` (classes in sorted order, as Keras' image_dataset_from_directory
    names them), decoded in parallel and resized to input_shape's height and width. Splits without a
    folder of their own are held out of `directory`, stratified and seeded.
    `augmentation` (flip, rotation, zoom) applies Keras' preprocessing layers to training batches only."""
    import tensorflow as tf

    options = options_from(batch_size, seed, pipeline)
    require_choice("data.normalization", normalization, FILE_NORMALIZATIONS)
    shape = tuple(int(d) for d in input_shape)
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] not in (1, 3, 4)):
        raise ConfigError(f"data.input_shape={list(shape)} is not an image shape: expected [height, width] (gray) "
                          "or [height, width, channels] with 1, 3 or 4 channels.", fix="data.input_shape=[64,64,3]")
    classes, paths, labels = list_image_folder("data.directory", directory)
    if len(classes) != num_classes:
        raise DataError(f"data.num_classes={num_classes} does not match {directory}: it has {len(classes)} class "
                        f"folders ({', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''}).",
                        fix=f"data.num_classes={len(classes)}")
    if test_directory:
        test_classes, test_paths, test_labels = list_image_folder("data.test_directory", test_directory)
        if test_classes != classes:
            raise DataError(f"data.test_directory={test_directory} has classes {test_classes}, "
                            f"data.directory has {classes}.", fix="give both folders the same class folders")
        require_fraction("data.validation_split", validation_split)
        train_paths, val_paths, train_labels, val_labels = split_two_ways(paths, labels, validation_split, seed)
        held = {"train": Split(train_paths, train_labels), "validation": Split(val_paths, val_labels),
                "test": Split(test_paths, test_labels)}
    else:
        held = split_three_ways(paths, labels, test_split, validation_split, seed)
    if not resize:
        check_image_sizes(np.concatenate([s.x for s in held.values()]), shape)
    scale = PIXEL_SCALE if normalization == "scale" else 1.0
    spec = DataSpec(shape, int(num_classes), input_scale=scale)

    def load(path, label):
        data = tf.io.read_file(path)
        channels = shape[2] if len(shape) == 3 else 1
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        if resize:
            image = tf.image.resize(image, shape[:2])
        image = tf.ensure_shape(tf.cast(image, tf.float32), (*shape[:2], channels)) * scale
        return (image if len(shape) == 3 else tf.squeeze(image, -1)), label

    splits = {name: tf.data.Dataset.from_tensor_slices((split.x, split.y)) for name, split in held.items()}
    counts = {name: len(split.x) for name, split in held.items()}

    def read(name: str, count: int) -> DataRead:  # the split's first `count` images (data.limit)
        folder = test_directory if name == "test" and test_directory else directory
        paths = [str(p) for p in held[name].x[:count]]
        return files_read(name, os.path.basename(os.path.normpath(directory)), os.path.abspath(folder), paths,
                          count, shape, num_classes, held[name].y[:count].tobytes())

    return streamed_datasets(splits, counts, load, spec, options,
                             augment=augmenter(augmentation or {}, shape, options.seed), reads=read)


def list_image_folder(key: str, directory: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    if not directory or not os.path.isdir(directory):
        raise DataError(f"{key}={directory} is not a folder.",
                        fix=f"{key}=/abs/path/images (one sub-folder of images per class)")
    classes = sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))
    paths, labels = [], []
    for index, name in enumerate(classes):
        for root, _, files in sorted(os.walk(os.path.join(directory, name))):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    paths.append(os.path.join(root, file))
                    labels.append(index)
    if not classes or not paths:
        raise DataError(f"{key}={directory} has no images in class sub-folders ({', '.join(IMAGE_EXTENSIONS)}).",
                        fix=f"lay it out as {directory}/<class name>/<image>.png")
    return classes, np.asarray(paths), np.asarray(labels, dtype="int64")


def check_image_sizes(paths: np.ndarray, shape: tuple[int, ...]) -> None:
    """data.resize=false: every image must already be input_shape's size. Reads headers only."""
    from PIL import Image

    wanted = (shape[1], shape[0])  # PIL says (width, height)
    for path in paths:
        with Image.open(path) as image:
            if image.size != wanted:
                raise DataError(
                    f"{path} is {image.size[0]}x{image.size[1]} (width x height) but data.input_shape="
                    f"{list(shape)} wants {wanted[0]}x{wanted[1]}, and data.resize=false: the images have mixed sizes.",
                    fix="data.resize=true (resize every image to input_shape), or resize the files")


def augmenter(augmentation: dict[str, Any], shape: tuple[int, ...], seed: int | None):
    """Keras' random preprocessing layers as one function for the training pipeline, or None."""
    known = {"flip", "rotation", "zoom"}
    unknown = set(augmentation) - known
    if unknown:
        raise ConfigError(f"data.augmentation.{sorted(unknown)[0]} is unknown: expected flip, rotation, zoom.",
                          fix="data.augmentation={flip: horizontal, rotation: 0.1, zoom: 0.1}")
    flip, rotation, zoom = augmentation.get("flip"), augmentation.get("rotation") or 0, augmentation.get("zoom") or 0
    if flip is not None:
        require_choice("data.augmentation.flip", flip, FLIPS)
    if not flip and not rotation and not zoom:
        return None
    import keras
    import tensorflow as tf

    layers = []
    if flip:
        layers.append(keras.layers.RandomFlip(flip, seed=seed))
    if rotation:
        layers.append(keras.layers.RandomRotation(rotation, seed=seed))
    if zoom:
        layers.append(keras.layers.RandomZoom(zoom, seed=seed))
    augment = keras.Sequential(layers, name="augmentation")

    def apply(image, label):
        batched = image[tf.newaxis] if len(shape) == 3 else image[tf.newaxis, ..., tf.newaxis]
        out = augment(batched, training=True)[0]
        return (out if len(shape) == 3 else tf.squeeze(out, -1)), label

    return apply


# --- CSV --------------------------------------------------------------------------------------

CSV_NORMALIZATIONS = ("standardize", "none")


def csv(path, label_column, input_shape, num_classes, batch_size, seed, feature_columns=None, test_split=0.2,
        validation_split=0.1, normalization="standardize", **pipeline) -> Datasets:
    """A CSV file with a header: `label_column` (integers 0..n-1, or class names, numbered in sorted
    order) and numeric feature columns (all the others unless `feature_columns` lists them).
    `standardize` uses the training split's mean and std per column; exports undo nothing: they
    take the CSV's raw values and standardize in their graph."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.normalization", normalization, CSV_NORMALIZATIONS)
    header, rows = read_csv("data.path", path)
    if label_column not in header:
        raise DataError(f"data.label_column={label_column} is not a column of {path} (columns: {', '.join(header)}).",
                        fix=f"data.label_column={header[-1]}")
    features = list(feature_columns) if feature_columns else [c for c in header if c != label_column]
    missing = [c for c in features if c not in header]
    if missing:
        raise DataError(f"data.feature_columns: {', '.join(missing)} not in {path} (columns: {', '.join(header)}).",
                        fix="list columns the file has, or data.feature_columns=null for all but the label")
    x = numeric_columns(path, header, rows, features)
    if options.check_finite:
        require_finite_cells(path, x, features)
    y = label_indices(path, [row[header.index(label_column)] for row in rows])
    splits = split_three_ways(x, y, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, normalization,
                       named=os.path.splitext(os.path.basename(path))[0], source=os.path.abspath(path),
                       source_type="local")


def read_csv(key: str, path: str) -> tuple[list[str], list[list[str]]]:
    if not path or not os.path.isfile(path):
        raise DataError(f"{key}={path} does not exist.", fix=f"{key}=/abs/path/table.csv (with a header row)")
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv_module.reader(file)
        header = [name.strip() for name in next(reader, [])]
        rows = [row for row in reader if row]
    if not header or not rows:
        raise DataError(f"{key}={path} has no header or no rows.", fix="a header row, then one row per example")
    return header, rows


def numeric_columns(path: str, header: list[str], rows: list[list[str]], columns: list[str]) -> np.ndarray:
    indices = [header.index(c) for c in columns]
    x = np.empty((len(rows), len(columns)), dtype="float32")
    for r, row in enumerate(rows):
        for c, index in enumerate(indices):
            try:
                x[r, c] = float(row[index])
            except (ValueError, IndexError):
                value = row[index] if index < len(row) else "(missing)"
                raise DataError(f"{path}, row {r + 2}, column {columns[c]}: '{value}' is not a number.",
                                fix="fix the file, or leave the column out with data.feature_columns=[...]") from None
    return x


def require_finite_cells(path: str, x: np.ndarray, columns: list[str]) -> None:
    """Cells such as `nan` or `inf` parse as numbers; as inputs they make NaN weights."""
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        row, column = (int(i) for i in bad[0])
        more = f" ({len(bad):,} such cells in all)" if len(bad) > 1 else ""
        raise DataError(f"{path}, row {row + 2}, column {columns[column]}: {x[row, column]} is not a finite "
                        f"number{more}; the inputs must be finite numbers.", fix=NON_FINITE_FIX)


def label_indices(path: str, values: list[str]) -> np.ndarray:
    try:
        return np.asarray([int(v) for v in values], dtype="int64")
    except ValueError:
        names = sorted(set(values))  # class names: numbered in sorted order
        return np.asarray([names.index(v) for v in values], dtype="int64")
