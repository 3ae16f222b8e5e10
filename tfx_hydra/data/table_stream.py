"""table_stream: a CSV or TSV whose float32 size is more than data.cache_budget, read by tf.data as
training goes instead of into memory (data=csv, and data=text_table's CSV and TSV files).

What reading the whole table gave an in-memory source, a stream takes from elsewhere:
    - the row count (epochs, schedules): the count cache's (beside the TFRecord counts, keyed by path, size and
      mtime); on a file's first start, its lines counted from its bytes (~1 s a GB) up to COUNTED_FIRST; a larger
      file's rows estimated from its size, its first start's epochs of unknown length, and its lines counted in
      a thread while it trains, for the next start;
    - the splits: each row's split is drawn from a seeded pattern of ROW_PATTERN rows repeated down the file
      (test_split of each block, then validation_split of the rest), so every split spans the whole file and
      its size follows from the row count; not stratified by class, as an in-memory table's are;
    - standardization, class names and the label checks: the first SAMPLE_ROWS rows (a bounded sample,
      said on the data line); a class name the sample did not hold stops the run where it is read.
A cell that is not a number, met mid-epoch, is one DataError naming its row and column, as an in-memory
read names it before training. A cell holding a newline inside quotes is not supported in a stream.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from typing import Sequence

import numpy as np

from tfx_hydra.data import record_index
from tfx_hydra.data.cache import budget, sized
from tfx_hydra.data.lineage import files_read
from tfx_hydra.data.pipeline import Datasets, streamed_datasets
from tfx_hydra.data.spec import DataSpec
from tfx_hydra.data.splits import feature_moments, target_figures
from tfx_hydra.data.table import NOT_A_NUMBER_FIX, count_rows, first_non_number
from tfx_hydra.errors import DataError

SAMPLE_ROWS = 100_000  # what standardization, class names and label checks are taken from
ROW_PATTERN = 1_000  # rows per block of the split pattern
STRING_BYTES = 64  # what Python adds to each row's text held in memory
LINES = 4_096  # lines read, masked and parsed at a time
UNKNOWN_CLASS = "a class name the first rows of the table did not hold"
PARTS = ("train", "validation", "test")


@dataclasses.dataclass
class Table:
    """What a source reads from a table: where, which columns, and what they are."""

    path: str
    header: list[str]
    features: list[str]  # numeric input columns (data=csv), or the one text column (data=text_table)
    labels: list[str]
    label_columns: bool  # several numeric label columns (else one column, read as text)
    weight: str | None = None
    delimiter: str = ","
    text_inputs: bool = False  # the input is one column of raw text

    def held(self, rows: int) -> int:
        """Bytes the table takes read whole: float32 cells, or a text table's bytes and a string object a row."""
        if self.text_inputs:
            return os.path.getsize(self.path) + STRING_BYTES * rows
        return rows * (len(self.features) + len(self.labels) + (self.weight is not None)) * 4


def data_rows(path: str) -> int:
    """The table's rows (lines that are not blank, less the header): counted from its bytes once, then
    read from the count cache while the file is unchanged."""
    known = record_index.known_counts([path])
    if path in known:
        return known[path]
    rows = count_rows(path)
    record_index.remember({path: rows})
    return rows


def table_rows(path: str) -> tuple[int, bool]:
    """(the table's rows, whether that is their count): the count cache's; a file of up to COUNTED_FIRST bytes
    counted now (a quarter of a second); a larger one estimated from its size and its first lines'
    (ESTIMATE_LINES), so nothing reads it through before it is known to stay in memory (then data_rows counts it,
    as it is read whole anyway) or to stream (then a thread counts it while the run trains, for the next start:
    count_in_background). The splits are the pattern's either way: only the first start's epoch length differs."""
    known = record_index.known_counts([path])
    if path in known:
        return known[path], True
    if os.path.getsize(path) <= COUNTED_FIRST:
        return data_rows(path), True
    with open(path, "rb") as file:
        head = [line for line in itertools.islice(file, ESTIMATE_LINES + 1)]
    lines = [line for line in head[1:] if line.strip()] or [b"\n"]
    return int((os.path.getsize(path) - len(head[0])) / (sum(map(len, lines)) / len(lines))), False


def count_while_training(path: str) -> None:
    """A streamed table's rows counted in a thread while the run trains, kept for the next start."""
    record_index.count_in_background([path], lambda file, stopped: count_rows(file), "table")


ESTIMATE_LINES = 1_000  # a table's first lines, whose mean length estimates its rows
COUNTED_FIRST = 256 << 20  # a table up to this size is counted before training: ~0.25 s (count_rows: ~1 GB/s)


def streams(table: Table, rows: int, options) -> str | None:
    """Why the table streams (its float32 size is more than the cache budget), or None: it is read whole."""
    allowed, how = budget(options.cache_budget)
    size = table.held(rows)
    if size <= allowed:
        return None
    if options.fold is not None:
        raise DataError(f"cv=kfold cuts folds from a table held in memory, and {table.path} ({sized(size)}) is more "
                        f"than data.cache_budget allows ({sized(allowed)}, {how}): it would stream.",
                        fix=f"a data.cache_budget of {sized(size)} or more (if memory holds it), or cv=none")
    return (f"the table streams from its file: {sized(size)} {'in memory' if table.text_inputs else 'as float32'} "
            f"is more than {sized(allowed)} ({how})")


def split_pattern(test_split: float, validation_split: float, seed) -> np.ndarray:
    """Each row's split (0 train, 1 validation, 2 test) within a block of ROW_PATTERN rows, drawn by `seed`."""
    test = int(round(ROW_PATTERN * test_split))
    validation = int(round((ROW_PATTERN - test) * validation_split))
    pattern = np.zeros(ROW_PATTERN, dtype="int64")
    order = np.random.default_rng(seed).permutation(ROW_PATTERN)
    pattern[order[:test]], pattern[order[test:test + validation]] = 2, 1
    return pattern


def split_counts(rows: int, pattern: np.ndarray) -> dict[str, int]:
    """Rows per split: whole blocks, then the last block's first rows."""
    blocks, rest = divmod(rows, len(pattern))
    return {name: int(blocks * (pattern == index).sum() + (pattern[:rest] == index).sum())
            for index, name in enumerate(PARTS)}


def streamed_table(table: Table, spec: DataSpec, options, sample: dict, pattern: np.ndarray, rows: int,
                   normalization: str, why: str, named: str) -> Datasets:
    """The three splits read from the file by tf.data: its lines filtered by the split pattern, parsed a batch
    of lines at a time (tf.io.decode_csv), standardized with the sample's figures. `sample`: the first rows as
    the source read them (x, y as the task takes them, class names), for the figures and the checks."""
    kind = spec.task
    train = pattern[np.arange(len(sample["y"])) % len(pattern)] == 0
    offset, scale = (0.0, 1.0)
    if normalization == "standardize" and not table.text_inputs:
        offset, std = feature_moments(sample["x"][train])
        scale = tuple(1.0 / max(value, 1e-7) for value in std)
    spec = dataclasses.replace(spec, input_offset=offset, input_scale=scale,
                               **target_figures(kind, sample["y"][train]))
    counts = split_counts(rows, pattern) if rows is not None else dict.fromkeys(PARTS)  # None: counted meanwhile
    parse = _line_parser(table, spec, sample["names"], offset, scale)
    splits = {name: _rows_of(table.path, pattern, index).map(parse, num_parallel_calls=options.parallel_calls,
                                                             deterministic=True).unbatch()
              for index, name in enumerate(PARTS)}
    def read(name: str, count: int | None):  # the same digest whether the rows are counted yet or not
        return files_read(name, named, table.path, [table.path], count, spec.input_shape, spec.num_classes,
                          f"rows of split {name} by a pattern seeded {options.seed}", f"limit {options.limit}",
                          count_in_digest=False)

    datasets = streamed_datasets(splits, counts, None, spec, options, reads=read,
                                 check_finite_as=None if table.text_inputs else f"data.path={table.path}",
                                 explain=lambda err: bad_cell_met(err, table))
    if rows is None:
        count_while_training(table.path)
    sampled = len(sample["y"])
    return dataclasses.replace(datasets, cache=f"{datasets.cache}; {why}; figures and classes from its first "
                               f"{sampled:,} rows")


def _rows_of(path: str, pattern: np.ndarray, index: int):
    """Batches of the lines (blank ones left out) whose row number the pattern gives to split `index`. The
    lines are taken LINES at a time and masked as a batch: one filter call per line cost 20x the parsing."""
    import tensorflow as tf

    pattern = tf.constant(pattern)

    def masked(rows_before, lines):
        filled = tf.strings.length(lines) > 0
        rows = rows_before + tf.cumsum(tf.cast(filled, tf.int64)) - 1  # each line's row number
        kept = filled & (tf.gather(pattern, rows % len(pattern)) == index)
        return rows_before + tf.reduce_sum(tf.cast(filled, tf.int64)), tf.boolean_mask(lines, kept)

    return tf.data.TextLineDataset(path).skip(1).batch(LINES).scan(tf.constant(0, tf.int64), masked)


def _line_parser(table: Table, spec: DataSpec, names: Sequence[str] | None, offset, scale):
    """A batch of lines -> a batch of (inputs, label[, weight]) as the in-memory source gives them."""
    import tensorflow as tf

    numeric = [*([] if table.text_inputs else table.features), *(table.labels if table.label_columns else []),
               *([table.weight] if table.weight else [])]
    wanted = sorted({table.header.index(name) for name in [*table.features, *table.labels,
                                                             *([table.weight] if table.weight else [])]})
    defaults = [tf.constant([], tf.float32 if table.header[i] in numeric else tf.string) for i in wanted]
    kind = spec.task
    lookup = None
    if names:
        lookup = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(names)), tf.range(len(names), dtype=tf.int64)), default_value=-1)
    offset_, scale_ = tf.constant(offset, tf.float32), tf.constant(scale, tf.float32)

    def parse(lines):
        cells = dict(zip([table.header[i] for i in wanted],
                         tf.io.decode_csv(lines, defaults, field_delim=table.delimiter, select_cols=wanted)))
        if table.text_inputs:
            inputs = tf.strings.strip(cells[table.features[0]])
        else:
            inputs = (tf.stack([cells[name] for name in table.features], axis=1) - offset_) * scale_
        if table.label_columns:
            label = tf.stack([cells[name] for name in table.labels], axis=1)
        elif lookup is not None:
            label = lookup.lookup(tf.strings.strip(cells[table.labels[0]]))
            tf.debugging.assert_non_negative(label, message=UNKNOWN_CLASS)
        else:
            label = tf.strings.to_number(tf.strings.strip(cells[table.labels[0]]), tf.float64)
        if kind.name in ("binary", "regression") and not table.label_columns:
            label = tf.reshape(label, [-1, 1])
        label = tf.cast(label, kind.label_dtype)
        if table.weight:
            return inputs, label, cells[table.weight]
        return inputs, label

    return parse


def bad_cell_met(err: Exception, table: Table) -> Exception | None:
    """TensorFlow's account of a cell it could not read mid-epoch, as the row and column a user opens the
    file at (found by reading that one column again, only now that it failed)."""
    message = str(getattr(err, "message", err))
    if UNKNOWN_CLASS in message:
        return DataError(f"{table.path}: a row's label is {UNKNOWN_CLASS} ({SAMPLE_ROWS:,}), from which the "
                         "classes were named.", fix="class indices 0..n-1 as the label, or the table read in memory "
                         "(a larger data.cache_budget)")
    found = re.search(r"Field (\d+) in record \d+ is not a valid (float|int)", message)
    if found is None:
        return None
    numeric = [name for name in [*table.features, *table.labels, *([table.weight] if table.weight else [])]
               if name in table.header]
    wanted = sorted(table.header.index(name) for name in numeric)
    column = table.header[wanted[int(found.group(1))]] if int(found.group(1)) < len(wanted) else None
    if column is None:
        return None
    row, value = first_non_number(table.path, column, table.delimiter)
    return DataError(f"{table.path}, row {row}, column {column}: '{value}' is not a number.", fix=NOT_A_NUMBER_FIX)
