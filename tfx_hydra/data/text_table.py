"""data=text_table: a table of raw text and labels -- a CSV, a TSV (.tsv) or JSON Lines (.jsonl, one object
per line) -- read into memory. The label columns are read as data=csv reads them, for any task (a class
or its name, 0/1, numbers, several columns, or tags split at label_delimiter).
"""

from __future__ import annotations

import json
import os

import numpy as np

from tfx_hydra.data.csv import label_values, read_csv
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import split_three_ways
from tfx_hydra.data.text_folder import TEXT_INPUTS
from tfx_hydra.errors import DataError
from tfx_hydra.task import get as get_task
from tfx_hydra.validation import require_choice, require_path


def text_table(path, text_column, label_column, num_classes, batch_size, seed, input_shape=(), label_columns=None,
               label_delimiter=None, test_split=0.2, validation_split=0.1, task="classification", inputs="text",
               **pipeline) -> Datasets:
    """`text_column` holds the raw text; the label as data=csv reads it (by task)."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.inputs", inputs, TEXT_INPUTS)
    header, rows = read_table(path)
    labels = list(label_columns) if label_columns else [label_column]
    missing = [c for c in [text_column, *labels] if c not in header]
    if missing:
        raise DataError(f"{path} has no column {', '.join(missing)} (columns: {', '.join(header)}).",
                        fix="data.text_column=<the text's column> data.label_column=<the label's>")
    texts = np.asarray([row[header.index(text_column)] for row in rows], dtype=object)
    kind = get_task(task)
    values, names = label_values(path, header, rows, labels, task, label_delimiter)
    y = kind.labels(values, path, int(num_classes), first_row=1 if path.endswith(".jsonl") else 2)
    splits = split_three_ways(texts, y, test_split, validation_split, seed)
    return from_arrays(splits, input_shape, num_classes, options, "none",
                       named=os.path.splitext(os.path.basename(path))[0], source=os.path.abspath(path),
                       source_type="local", task=kind, class_names=names)


def read_table(path: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows as strings) of a .csv, .tsv or .jsonl file (JSON Lines: the first object's keys)."""
    if not path.endswith(".jsonl"):
        return read_csv("data.path", path, delimiter="\t" if path.endswith(".tsv") else ",")
    require_path("data.path", path, fix="data.path=/abs/path/texts.jsonl (one JSON object per line)", file=True)
    objects = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if line.strip():
                try:
                    objects.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}, line {number}: not a JSON object ({err.msg}).",
                                    fix="one JSON object per line") from None
    if not objects:
        raise DataError(f"data.path={path} has no lines.", fix="one JSON object per line")
    header = list(objects[0])
    return header, [["" if o.get(k) is None else str(o.get(k)) for k in header] for o in objects]
