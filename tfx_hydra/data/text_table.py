"""data=text_table: a table of raw text and labels -- a CSV, a TSV (.tsv) or JSON Lines (.jsonl, one object
per line) -- read into memory column by column (table.py), or, a CSV or TSV larger than data.cache_budget,
streamed from its file (table_stream.py). The label columns are read as data=csv reads them, for any task
(a class or its name, 0/1, numbers, several columns, or tags split at label_delimiter).
"""

from __future__ import annotations

import dataclasses
import os

from tfx_hydra.data.csv import label_values, labels_width, require_width_of_names
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.spec import DataSpec
from tfx_hydra.data.splits import split_three_ways
from tfx_hydra.data.table import read_header, read_table
from tfx_hydra.data.table_stream import (
    SAMPLE_ROWS,
    Table,
    data_rows,
    split_pattern,
    streamed_table,
    streams,
    table_rows,
)
from tfx_hydra.data.text_folder import TEXT_INPUTS
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice
from tfx_hydra.task import get as get_task


def text_table(path, text_column, label_column, num_classes, batch_size, seed, input_shape=(), label_columns=None,
               label_delimiter=None, test_split=0.2, validation_split=0.1, task="classification", inputs="text",
               **pipeline) -> Datasets:
    """`text_column` holds the raw text; the label as data=csv reads it (by task)."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.inputs", inputs, TEXT_INPUTS)
    delimiter = "\t" if path.endswith(".tsv") else ","
    header = read_header("data.path", path, delimiter)
    labels = list(label_columns) if label_columns else [label_column]
    missing = [c for c in [text_column, *labels] if c not in header]
    if missing:
        raise DataError(f"{path} has no column {', '.join(missing)} (columns: {', '.join(header)}).",
                        fix="data.text_column=<the text's column> data.label_column=<the label's>")
    kind = get_task(task)
    first_row = 1 if path.endswith(".jsonl") else 2
    table = Table(path, header, [text_column], labels, bool(label_columns), delimiter=delimiter, text_inputs=True)
    rows, counted = (None, True) if path.endswith(".jsonl") else table_rows(path)  # JSON Lines are read whole
    why = streams(table, rows, options) if rows is not None and (label_columns or task != "multilabel") else None
    rows = rows if counted or rows is None else None if why else data_rows(path)
    _, columns = read_table("data.path", path, numeric=labels if label_columns else [],
                            text=[text_column, *([] if label_columns else labels)], delimiter=delimiter,
                            limit=SAMPLE_ROWS if why else None, rows=rows)
    texts = columns[text_column]
    values, names = label_values(path, columns, labels, task, label_delimiter)
    width = labels_width(task, values, names, len(labels)) if num_classes is None else int(num_classes)
    require_width_of_names(path, width, names, task)
    y = kind.labels(values, path, width, first_row=first_row)
    named = os.path.splitext(os.path.basename(path))[0]
    if why:
        spec = DataSpec(tuple(int(d) for d in input_shape), width, task=kind, input_dtype="string",
                        class_names=tuple(names or ()))
        datasets = streamed_table(table, spec, options, {"x": texts, "y": y, "names": names},
                                  split_pattern(test_split, validation_split, seed), rows, "none", why, named)
    else:
        splits = split_three_ways(texts, y, test_split, validation_split, seed)
        datasets = from_arrays(splits, input_shape, width, options, "none", named=named,
                               source=os.path.abspath(path), source_type="local", task=kind, class_names=names)
    if num_classes is None:
        datasets.spec = dataclasses.replace(datasets.spec, read_from_file=("num_classes",))
    return datasets
