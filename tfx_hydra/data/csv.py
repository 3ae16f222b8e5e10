"""data=csv: a CSV file of numeric columns and a label column, read into memory column by column
(table.py: pyarrow's reader, float32 columns).
"""

from __future__ import annotations

import os

import numpy as np

from tfx_hydra.data.finite import NON_FINITE_FIX
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import Datasets, from_arrays
from tfx_hydra.data.splits import Split, split_three_ways
from tfx_hydra.data.table import read_columns, read_header, stacked
from tfx_hydra.errors import DataError
from tfx_hydra.task import get as get_task
from tfx_hydra.validation import require_choice

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
    numbers = [*features, *([weight_column] if weight_column else []), *(labels if label_columns else [])]
    columns = read_columns("data.path", path, numeric=numbers, text=[] if label_columns else labels)
    x = stacked(columns, features)
    if options.check_finite:
        require_finite_cells(path, x, features)
    kind = get_task(task)
    values, names = label_values(path, columns, labels, task, label_delimiter)
    weights = example_weights(path, columns[weight_column], weight_column) if weight_column else None
    del columns  # the features are in x now: the table's own columns need not stay
    y = kind.labels(values, path, int(num_classes), first_row=2)
    if weights is None:
        splits = split_three_ways(x, y, test_split, validation_split, seed)
    else:  # the weights split with their rows (as the last column), then taken apart again
        joined = split_three_ways(np.concatenate([x, weights[:, None]], axis=1), y, test_split, validation_split, seed)
        splits = {name: Split(s.x[:, :-1], s.y, s.x[:, -1]) for name, s in joined.items()}
    return from_arrays(splits, input_shape, num_classes, options, normalization,
                       named=os.path.splitext(os.path.basename(path))[0], source=os.path.abspath(path),
                       source_type="local", task=kind, class_names=names)


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
    values = list(read[columns[0]])
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


def label_indices(path: str, values: list[str]) -> tuple[np.ndarray, list[str] | None]:
    """Class indices as written (151 or 151.0), or class names numbered in sorted order (and those names). A
    column of numbers with fractions holds a quantity to predict: one error naming the row."""
    numbers = [_number(v) for v in values]
    if all(n is not None for n in numbers):
        fraction = next((i for i, n in enumerate(numbers) if not float(n).is_integer()), None)
        if fraction is not None:
            raise DataError(f"task=classification: {path}, row {fraction + 2}, has label {values[fraction]}: a number "
                            "with a fraction, not a class.", fix="task=regression (numeric targets)")
        return np.asarray([int(n) for n in numbers], dtype="int64"), None
    names = sorted(set(values))
    index = {name: i for i, name in enumerate(names)}
    return np.asarray([index[v] for v in values], dtype="int64"), names


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None
