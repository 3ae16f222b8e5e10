"""data=image_folder: a folder of class folders (`directory/<class>/<image>`), decoded in parallel
and streamed, as Keras' image_dataset_from_directory names the classes.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data import service as data_service
from tfx_hydra.data.augmentation import augmenter
from tfx_hydra.data.lineage import DataRead, files_read
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import (
    FILE_NORMALIZATIONS,
    PIXEL_SCALE,
    Datasets,
    DataSpec,
    scaled_pixels,
    streamed_datasets,
)
from tfx_hydra.data.splits import split_three_ways, with_test_folder
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import require_choice
from tfx_hydra.task import get as get_task

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


def image_folder(directory, input_shape, num_classes, batch_size, seed, test_directory=None, resize=True,
                 validation_split=0.1, test_split=0.2, normalization="scale", augmentation=None,
                 task="classification", labels_csv=None, label_delimiter=";", **pipeline) -> Datasets:
    """`directory/<class name>/<image>` (classes in sorted order, as Keras' image_dataset_from_directory
    names them; two folders are task=binary's 0 and 1), decoded in parallel and resized to input_shape's
    height and width. task=multilabel: the images anywhere under `directory`, their tags in `labels_csv`
    (columns `file`, relative to `directory`, and `tags`, split at `label_delimiter`). Splits without a
    folder of their own are held out of `directory`, stratified and seeded.
    `augmentation` (flip, rotation, zoom) applies Keras' preprocessing layers to training batches only."""
    import tensorflow as tf

    options = options_from(batch_size, seed, pipeline)
    require_choice("data.normalization", normalization, FILE_NORMALIZATIONS)
    shape = tuple(int(d) for d in input_shape)
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] not in (1, 3, 4)):
        raise ConfigError(f"data.input_shape={list(shape)} is not an image shape: expected [height, width] (gray) "
                          "or [height, width, channels] with 1, 3 or 4 channels.", fix="data.input_shape=[64,64,3]")
    kind = get_task(task)
    if task == "multilabel" or labels_csv:
        if test_directory:
            raise ConfigError("data.test_directory with data.labels_csv: tagged images are one folder.",
                              fix="data.test_directory=null (the test split is held out: data.test_split)")
        classes, paths, labels = tagged_images(directory, labels_csv, label_delimiter)
    else:
        classes, paths, labels = list_image_folder("data.directory", directory)
    require_class_folders(directory, classes, num_classes, task)
    labels = kind.labels(labels, "data.directory", int(num_classes))
    if test_directory:
        test_classes, test_paths, test_labels = list_image_folder("data.test_directory", test_directory)
        test_labels = kind.labels(test_labels, "data.test_directory", int(num_classes))
        require_same_class_folders(test_directory, test_classes, classes)
        held = with_test_folder(paths, labels, test_paths, test_labels, validation_split, seed)
    else:
        held = split_three_ways(paths, labels, test_split, validation_split, seed)
    if not resize:
        check_image_sizes(np.concatenate([s.x for s in held.values()]), shape)
    scale = PIXEL_SCALE if normalization == "scale" else 1.0
    spec = DataSpec(shape, int(num_classes), input_scale=scale, task=kind, class_names=tuple(classes))

    def load(path, label):  # decoded pixels as uint8: what the cache holds, a quarter of their float32 size
        data = tf.io.read_file(path)
        channels = shape[2] if len(shape) == 3 else 1
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        if resize:
            image = tf.cast(tf.clip_by_value(tf.round(tf.image.resize(image, shape[:2])), 0, 255), tf.uint8)
        image = tf.ensure_shape(image, (*shape[:2], channels))
        return (image if len(shape) == 3 else tf.squeeze(image, -1)), label

    splits = {name: data_service.sliced((split.x, split.y), options.served and name == "train")  # served: pieces
              for name, split in held.items()}
    counts = {name: len(split.x) for name, split in held.items()}

    def read(name: str, count: int) -> DataRead:  # the split's first `count` images (data.limit)
        folder = test_directory if name == "test" and test_directory else directory
        paths = [str(p) for p in held[name].x[:count]]
        return files_read(name, os.path.basename(os.path.normpath(directory)), os.path.abspath(folder), paths,
                          count, shape, num_classes, held[name].y[:count].tobytes())

    every = [str(path) for split in held.values() for path in split.x]
    return streamed_datasets(splits, counts, load, spec, options, to_inputs=scaled_pixels(scale),
                             augment=augmenter(augmentation or {}, shape, options.seed), reads=read,
                             explain=lambda err: unreadable_image(err, every, len(shape) == 3 and shape[2] or 1))


def unreadable_image(err: Exception, paths: list[str], channels: int) -> Exception | None:
    """The file an image decode or read failed on, found by decoding each in turn (only once the error has
    happened: the pipeline decodes in parallel and TensorFlow's message names no file), as one DataError."""
    import tensorflow as tf

    reading = isinstance(err, (tf.errors.NotFoundError, tf.errors.PermissionDeniedError, tf.errors.DataLossError))
    decoding = isinstance(err, tf.errors.InvalidArgumentError) and any(
        word in str(err) for word in ("Decode", "decode", "image file format", "PNG", "JPEG", "GIF", "BMP"))
    if not (reading or decoding):
        return None
    for path in paths:
        try:
            tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
        except tf.errors.OpError as failed:
            reason = failed.message.strip().splitlines()[0]
            return DataError(f"{path} cannot be read as an image ({reason}).",
                             fix="replace or remove that file (the others read): the run's backup is kept, so the "
                             "same command resumes")
    return None


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


def require_class_folders(directory: str, classes: list[str], num_classes: int, task: str) -> None:
    """A folder of class folders (images or texts) holds the declared classes; two for task=binary."""
    if task == "binary" and len(classes) != 2:
        raise DataError(f"task=binary: {directory} has {len(classes)} class folders; a binary task has two (the "
                        f"first in sorted order is 0: {', '.join(classes[:3])}).",
                        fix="two class folders, or task=classification")
    if task == "classification" and len(classes) != num_classes:
        raise DataError(f"data.num_classes={num_classes} does not match {directory}: it has {len(classes)} class "
                        f"folders ({', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''}).",
                        fix=f"data.num_classes={len(classes)}")


def require_same_class_folders(test_directory: str, test_classes: list[str], classes: list[str]) -> None:
    if test_classes != classes:
        raise DataError(f"data.test_directory={test_directory} has classes {test_classes}, "
                        f"data.directory has {classes}.", fix="give both folders the same class folders")


def tagged_images(directory: str, labels_csv: str | None, delimiter: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tag names in sorted order, image paths, multi-hot rows) from `labels_csv`'s `file` and `tags` columns."""
    from tfx_hydra.data.table import read_columns, read_header

    if not labels_csv:
        raise ConfigError("task=multilabel on images needs their tags: data.labels_csv.",
                          fix="data.labels_csv=/abs/path/tags.csv (columns: file, tags; tags such as cat;dog)")
    header = read_header("data.labels_csv", labels_csv)
    if not {"file", "tags"} <= set(header):
        raise DataError(f"data.labels_csv={labels_csv} has columns {', '.join(header)}; it needs `file` and `tags`.",
                        fix="a header row: file,tags")
    columns = read_columns("data.labels_csv", labels_csv, text=["file", "tags"])
    files, tags = list(columns["file"]), list(columns["tags"])
    paths = [os.path.join(directory, file) for file in files]
    for number, path in enumerate(paths, start=2):
        if not os.path.isfile(path):
            raise DataError(f"{labels_csv}, row {number}: {path} is not a file.",
                            fix="file names relative to data.directory")
    split = [[t.strip() for t in value.split(delimiter) if t.strip()] for value in tags]
    names = sorted({t for row in split for t in row})
    hot = np.zeros((len(paths), len(names)), dtype="float32")
    for row, found in enumerate(split):
        hot[row, [names.index(t) for t in found]] = 1
    return names, np.asarray(paths), hot


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
