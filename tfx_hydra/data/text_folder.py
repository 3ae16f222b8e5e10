"""data=text_folder: a folder of class folders of `.txt` files (`directory/<class>/<file>.txt`, Keras'
text_dataset_from_directory layout), one example per file, read into memory as raw strings: the model's
own layers tokenize them (model=text_baseline, model=hub_text), so every export takes raw text.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.image_folder import require_class_folders, require_same_class_folders
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import split_three_ways, with_test_folder
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice, require_path

TEXT_INPUTS = ("text",)


def text_folder(directory, num_classes, batch_size, seed, input_shape=(), test_directory=None, validation_split=0.1,
                test_split=0.2, task="classification", inputs="text", encoding="utf-8", **pipeline) -> Datasets:
    """`directory/<class name>/*.txt` (classes in sorted order, as Keras names them; two classes make a
    binary task's 0 and 1). Splits without a folder of their own are held out of `directory`, stratified
    and seeded."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.inputs", inputs, TEXT_INPUTS)
    classes, texts, labels = read_text_folder("data.directory", directory, encoding)
    require_class_folders(directory, classes, num_classes, task)
    if test_directory:
        test_classes, test_texts, test_labels = read_text_folder("data.test_directory", test_directory, encoding)
        require_same_class_folders(test_directory, test_classes, classes)
        splits = with_test_folder(texts, labels, test_texts, test_labels, validation_split, seed)
    else:
        splits = split_three_ways(texts, labels, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, "none", named=os.path.basename(
        os.path.normpath(directory)), source=os.path.abspath(directory), source_type="local", task=task,
        class_names=classes)


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
