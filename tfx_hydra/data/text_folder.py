"""data=text_folder: a folder of class folders of `.txt` files (`directory/<class>/<file>.txt`, Keras'
text_dataset_from_directory layout), one example per file, read into memory as raw strings: the model's
own layers tokenize them (model=text_baseline, model=hub_text), so every export takes raw text.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.pipeline import Datasets, from_arrays, options_from
from tfx_hydra.data.splits import Split, split_three_ways, split_two_ways
from tfx_hydra.errors import DataError
from tfx_hydra.validation import require_choice, require_fraction, require_path

TEXT_INPUTS = ("text",)


def text_folder(directory, num_classes, batch_size, seed, input_shape=(), test_directory=None, validation_split=0.1,
                test_split=0.2, task="classification", inputs="text", encoding="utf-8", **pipeline) -> Datasets:
    """`directory/<class name>/*.txt` (classes in sorted order, as Keras names them; two classes make a
    binary task's 0 and 1). Splits without a folder of their own are held out of `directory`, stratified
    and seeded."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.inputs", inputs, TEXT_INPUTS)
    classes, texts, labels = read_text_folder("data.directory", directory, encoding)
    if task == "classification" and len(classes) != num_classes:
        raise DataError(f"data.num_classes={num_classes} does not match {directory}: it has {len(classes)} class "
                        f"folders ({', '.join(classes[:10])}).", fix=f"data.num_classes={len(classes)}")
    if task == "binary" and len(classes) != 2:
        raise DataError(f"task=binary: {directory} has {len(classes)} class folders; a binary task has two "
                        f"(the first in sorted order is 0: {', '.join(classes[:3])}).",
                        fix="two class folders, or task=classification")
    if test_directory:
        test_classes, test_texts, test_labels = read_text_folder("data.test_directory", test_directory, encoding)
        if test_classes != classes:
            raise DataError(f"data.test_directory={test_directory} has classes {test_classes}, "
                            f"data.directory has {classes}.", fix="give both folders the same class folders")
        require_fraction("data.validation_split", validation_split)
        train_x, val_x, train_y, val_y = split_two_ways(texts, labels, validation_split, seed)
        splits = {"train": Split(train_x, train_y), "validation": Split(val_x, val_y),
                  "test": Split(test_texts, test_labels)}
    else:
        splits = split_three_ways(texts, labels, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, "none", named=os.path.basename(
        os.path.normpath(directory)), source=os.path.abspath(directory), source_type="local", task=task)


def read_text_folder(key: str, directory: str, encoding: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(class names, the texts, their class indices) of `directory/<class>/*.txt`."""
    require_path(key, directory, fix=f"{key}=/abs/path/folder (one sub-folder of .txt files per class)")
    classes = sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))
    texts, labels = [], []
    for index, name in enumerate(classes):
        folder = os.path.join(directory, name)
        for file in sorted(f for f in os.listdir(folder) if f.endswith(".txt")):
            path = os.path.join(folder, file)
            try:
                with open(path, encoding=encoding) as handle:
                    texts.append(handle.read())
            except UnicodeDecodeError as err:
                raise DataError(f"{path} is not {encoding} text ({err.reason} at byte {err.start}).",
                                fix="data.encoding=<its encoding>, e.g. latin-1") from None
            labels.append(index)
    if not texts:
        raise DataError(f"{key}={directory} has no .txt files in class folders.",
                        fix="one sub-folder per class, each holding .txt files (Keras' text_dataset_from_directory "
                        "layout)")
    return classes, np.asarray(texts, dtype=object), np.asarray(labels, dtype="int64")
