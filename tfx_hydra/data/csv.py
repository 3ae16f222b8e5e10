"""data=csv: a CSV file of numeric columns and a label column, read into memory column by column
(table.py: pyarrow's reader, float32 columns).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from tfx_hydra.data.finite import NON_FINITE_FIX
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, check_against_spec, from_arrays
from tfx_hydra.data.spec import DataSpec
from tfx_hydra.data.splits import split_three_ways
from tfx_hydra.data.table import column_dtypes, read_header, read_table, stacked
from tfx_hydra.data.table_stream import (
    SAMPLE_ROWS,
    Table,
    data_rows,
    split_pattern,
    streamed_table,
    streams,
    table_rows,
)
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice
from tfx_hydra.task import get as get_task

CSV_NORMALIZATIONS = ("standardize", "none")


def csv(path, label_column, input_shape, num_classes, batch_size, seed, feature_columns=None, test_split=0.2,
        validation_split=0.1, normalization="standardize", task="classification", label_columns=None,
        label_delimiter=None, weight_column=None, **pipeline) -> Datasets:
    """A CSV file with a header: the label and numeric feature columns (all the others unless
    `feature_columns` lists them). The label, by task: a class (integers 0..n-1, or class names numbered
    in sorted order); 0/1 (binary); numbers (regression: `label_column`, or several `label_columns`);
    multi-hot (multilabel: several 0/1 `label_columns`, or one `label_column` of tags separated by
    `label_delimiter`, numbered in sorted order). `standardize` uses the training split's mean and std
    per column; exports take the CSV's raw values and standardize in their graph. `weight_column`: each
    example's weight in the training loss (validation and test metrics stay unweighted)."""
    options = options_from(batch_size, seed, pipeline)
    require_choice("data.normalization", normalization, CSV_NORMALIZATIONS)
    header = read_header("data.path", path)
    labels = list(label_columns) if label_columns else [label_column]
    missing = [c for c in labels if c not in header]
    if missing and not label_columns:
        raise DataError(f"data.label_column={label_column} is not a column of {path} (columns: {', '.join(header)}).",
                        fix=f"data.label_column={header[-1]}")
    if missing:
        raise DataError(f"data.label_columns: {', '.join(missing)} not in {path} (columns: {', '.join(header)}).",
                        fix="list columns the file has")
    if weight_column is not None and weight_column not in header:
        raise DataError(f"data.weight_column={weight_column} is not a column of {path} (columns: {', '.join(header)}).",
                        fix="data.weight_column=<a column of non-negative numbers>, or null")
    features = list(feature_columns) if feature_columns else [c for c in header if c not in [*labels, weight_column]]
    missing = [c for c in features if c not in header]
    if missing:
        raise DataError(f"data.feature_columns: {', '.join(missing)} not in {path} (columns: {', '.join(header)}).",
                        fix="list columns the file has, or data.feature_columns=null for all but the label")
    table = Table(path, header, features, labels, bool(label_columns), weight_column)
    kind = get_task(task)
    rows, counted = table_rows(path)  # counted, or estimated from the file's size: nothing read through yet
    why = streams(table, rows, options) if label_columns or task != "multilabel" else None  # tags: read whole
    rows = rows if counted else None if why else data_rows(path)  # read whole: counted as it is read anyway
    x, y, weights, names, width = read_checked(table, kind, num_classes, options.check_finite, label_delimiter,
                                               limit=SAMPLE_ROWS if why else None, rows=rows)
    named = os.path.splitext(os.path.basename(path))[0]
    read = (*(["input_shape"] if input_shape is None else []), *(["num_classes"] if num_classes is None else []))
    input_shape = [len(features)] if input_shape is None else input_shape
    if why:
        spec = DataSpec(tuple(int(d) for d in input_shape), width, task=kind, class_names=tuple(names or ()))
        check_against_spec("sample", x.shape[1:], len(x), spec)
        datasets = streamed_table(table, spec, options, {"x": x, "y": y, "names": names},
                                  split_pattern(test_split, validation_split, seed), rows, normalization, why, named)
    else:
        splits = split_three_ways(x, y, test_split, validation_split, seed, weights=weights)
        del x, y, weights  # the splits are copies: the whole table need not stay beside them
        datasets = from_arrays(splits, input_shape, width, options, normalization, named=named,
                               source=os.path.abspath(path), source_type="local", task=kind, class_names=names)
    datasets.spec = dataclasses.replace(datasets.spec, feature_names=tuple(features),
                                        feature_dtypes=column_dtypes(path, features), read_from_file=read)
    return datasets


def read_checked(table: Table, kind, width: int | None, check_finite: bool, label_delimiter: str | None,
                 limit: int | None = None, rows: int | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list[str] | None, int]:
    """(inputs, labels as the task takes them, weights or None, the classes' names or None, the labels' width) of
    the table's `rows` (`limit`: its first rows), each cell checked: a bad one is a DataError naming its row and
    column. `width` None (data.num_classes unset): the labels' own (their classes, tags or columns)."""
    numbers = [*([table.weight] if table.weight else []), *(table.labels if table.label_columns else [])]
    x, columns = read_table("data.path", table.path, matrix=table.features, numeric=numbers,
                            text=[] if table.label_columns else table.labels, limit=limit, rows=rows)
    if check_finite:
        require_finite_cells(table.path, x, table.features)
    values, names = label_values(table.path, columns, table.labels, kind.name, label_delimiter)
    weights = example_weights(table.path, columns[table.weight], table.weight) if table.weight else None
    width = labels_width(kind.name, values, names, len(table.labels)) if width is None else int(width)
    require_width_of_names(table.path, width, names, kind.name)
    return x, kind.labels(values, table.path, width, first_row=2), weights, names, width


def require_width_of_names(path: str, width: int, names: list[str] | None, task: str) -> None:
    """data.num_classes, set, against the classes (or tags) the file names."""
    if names and task in ("classification", "multilabel") and width != len(names):
        what = "classes" if task == "classification" else "labels"
        raise DataError(f"data.num_classes={width} does not match {path}: its labels name {len(names)} {what} "
                        f"({', '.join(names[:8])}{', ...' if len(names) > 8 else ''}).",
                        fix=f"data.num_classes={len(names)}, or data.num_classes=null to read it from the file")


def labels_width(task: str, values: np.ndarray, names: list[str] | None, columns: int) -> int:
    """data.num_classes as the file says it: its class names' count, or its largest class index + 1
    (classification); its tags or 0/1 columns (multilabel); 1 (binary); its target columns (regression)."""
    if task == "classification":
        return len(names) if names else int(np.max(values)) + 1 if len(values) else 0
    if task == "multilabel":
        return len(names) if names else columns
    return 1 if task == "binary" else columns


def example_weights(path: str, weights: np.ndarray, column: str) -> np.ndarray:
    """data.weight_column: a finite, non-negative number per row, not all zero."""
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        raise DataError(f"{path}, row {bad[0] + 2}, column {column}: weight {weights[bad[0]]:g} is not a finite "
                        "number >= 0.", fix="weights of 0 or more (0 leaves the row out of the training loss)")
    if not weights.any():
        raise DataError(f"{path}: every weight in column {column} is 0: nothing would be trained on.",
                        fix="positive weights, or data.weight_column=null")
    return weights


def label_values(path: str, read: dict[str, np.ndarray], columns: list[str], task: str,
                 delimiter: str | None) -> tuple[np.ndarray, list[str] | None]:
    """The label column(s) as the task reads them (its own check then names a bad row), and the names the
    file gives the classes: class strings, tags, or a multilabel's 0/1 columns (None: numbered). `read`:
    the table's columns (read_columns): several label columns as numbers, one as text."""
    if len(columns) > 1:
        return stacked(read, columns), (list(columns) if task == "multilabel" else None)
    values = read[columns[0]]
    if task == "classification":
        return label_indices(path, values)
    if task == "multilabel":
        if not delimiter:
            raise DataError(f"task=multilabel reads one label column ({columns[0]}) only as delimited tags.",
                            fix="\"data.label_delimiter=';'\" (tags such as cat;dog), or data.label_columns=[a,b,c] "
                            "(one 0/1 column per label)")
        tags = [[tag.strip() for tag in value.split(delimiter) if tag.strip()] for value in values]
        names = sorted({tag for row in tags for tag in row})
        hot = np.zeros((len(values), len(names)), dtype="float32")
        for r, row in enumerate(tags):
            hot[r, [names.index(tag) for tag in row]] = 1
        return hot, names
    return np.asarray(values, dtype=object), None


def require_finite_cells(path: str, x: np.ndarray, columns: list[str]) -> None:
    """Cells such as `nan` or `inf` parse as numbers; as inputs they make NaN weights."""
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        row, column = (int(i) for i in bad[0])
        more = f" ({len(bad):,} such cells in all)" if len(bad) > 1 else ""
        raise DataError(f"{path}, row {row + 2}, column {columns[column]}: {x[row, column]} is not a finite "
                        f"number{more}; the inputs must be finite numbers.", fix=NON_FINITE_FIX)


def label_indices(path: str, values: np.ndarray) -> tuple[np.ndarray, list[str] | None]:
    """Class indices as written (151 or 151.0), or class names numbered in sorted order (and those names). A
    column of numbers with fractions holds a quantity to predict: one error naming the row. Each distinct
    value is looked at once (pandas' factorize), not each row."""
    import pandas

    codes, distinct = pandas.factorize(np.asarray(values, dtype=object))
    numbers = [_number(v) for v in distinct]
    if all(n is not None for n in numbers):
        fractions = [i for i, n in enumerate(numbers) if not float(n).is_integer()]
        if fractions:
            row = int(np.flatnonzero(np.isin(codes, fractions))[0])
            raise DataError(f"task=classification: {path}, row {row + 2}, has label {values[row]}: a number "
                            "with a fraction, not a class.", fix="task=regression (numeric targets)")
        return np.asarray([int(n) for n in numbers], dtype="int64")[codes], None
    names = sorted(distinct)
    rank = np.empty(len(names), dtype="int64")
    rank[np.argsort(np.asarray(distinct, dtype=object))] = np.arange(len(names))
    return rank[codes], names


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None
