"""data=text_corpus: a text file, or a folder of `.txt` files, as the examples of a language model (task=causal_lm):
one per line (`data.unit=line`, empty lines skipped) or one per file (`data.unit=file`). There are no labels to
read: each text is its own (the model's preprocessor makes the next tokens of it). Splits are seeded fractions
of the examples.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import Split, split_three_ways
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice, require_path

UNITS = ("line", "file")


def text_corpus(path, batch_size, seed, input_shape=(), num_classes=0, unit="line", validation_split=0.1,
                test_split=0.1, task="causal_lm", inputs="text", encoding="utf-8", **pipeline) -> Datasets:
    """The texts of `path` (a file, or every `.txt` file of a folder in sorted order), split by seeded fractions;
    each example's label is its own text."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.unit", unit, UNITS)
    require_choice("data.task", task, ("causal_lm",), fix="task=causal_lm (a corpus has no labels but its text)")
    texts = np.asarray(read_corpus(path, unit, encoding), dtype=object)
    held = split_three_ways(np.arange(len(texts)), np.arange(len(texts)), test_split, validation_split, seed)
    splits = {name: Split(texts[split.x], texts[split.x]) for name, split in held.items()}
    return from_arrays(splits, input_shape, num_classes, options, "none", named=os.path.basename(
        os.path.normpath(path)), source=os.path.abspath(path), source_type="local", task=task)


def read_corpus(path: str, unit: str, encoding: str) -> list[str]:
    """The examples of `path`: its non-empty lines, or its files whole."""
    require_path("data.path", path, fix="data.path=/abs/path/corpus.txt (or a folder of .txt files)")
    files = ([os.path.join(path, name) for name in sorted(os.listdir(path)) if name.endswith(".txt")]
             if os.path.isdir(path) else [path])
    texts = []
    for file in files:
        try:
            with open(file, encoding=encoding) as handle:
                content = handle.read()
        except UnicodeDecodeError as err:
            raise DataError(f"{file} is not {encoding} text ({err.reason} at byte {err.start}).",
                            fix="data.encoding=<its encoding>, e.g. latin-1") from None
        if unit == "file":
            texts += [content] if content.strip() else []
        else:
            texts += [line.strip() for line in content.splitlines() if line.strip()]
    if not texts:
        raise DataError(f"data.path={path} holds no text.", fix="a .txt file of one example per line, or a folder "
                        "of .txt files (data.unit=file: one example each)")
    return texts
