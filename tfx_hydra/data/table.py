"""table: a CSV or TSV file read column by column with pyarrow's CSV reader (installed with MLflow), or a
JSON Lines file, for data=csv, data=text_table and an image folder's tags.

pyarrow parses in parallel blocks straight into typed columns: the numeric columns a source asks for
arrive as float32 (a file costs about its float32 size, plus the one copy that makes it an array), and a
1 GB file reads in seconds; the csv module's lists of strings took tens of times the file's size. pyarrow
names the column of a cell it cannot read but not the row: that row is found by reading the one column
again as text, only once a cell has failed.
"""

from __future__ import annotations

import csv as csv_module
import json
import re
from typing import Sequence

import numpy as np

from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_path

NOT_A_NUMBER_FIX = "fix the file, or leave the column out with data.feature_columns=[...]"


def read_header(key: str, path: str, delimiter: str = ",") -> list[str]:
    """The column names: a CSV/TSV's first row, or a JSON Lines file's first object's keys."""
    require_path(key, path, fix=f"{key}=/abs/path/table.csv (with a header row)", file=True)
    with open(path, newline="", encoding="utf-8-sig") as file:  # a spreadsheet's byte-order mark is no column's
        if path.endswith(".jsonl"):
            first = next((line for line in file if line.strip()), None)
            if first is None:
                raise DataError(f"{key}={path} has no lines.", fix="one JSON object per line")
            return list(_json_object(path, 1, first))
        header = [name.strip() for name in next(csv_module.reader(file, delimiter=delimiter), [])]
    if not header:
        raise DataError(f"{key}={path} has no header or no rows.", fix="a header row, then one row per example")
    return header


def read_columns(key: str, path: str, numeric: Sequence[str] = (), text: Sequence[str] = (),
                 delimiter: str = ",") -> dict[str, np.ndarray]:
    """The named columns of a table: `numeric` as float32 arrays, `text` as arrays of stripped strings.
    A cell of a numeric column that is not a number is one DataError naming its row and column."""
    return read_table(key, path, numeric=numeric, text=text, delimiter=delimiter)[1]


def read_table(key: str, path: str, matrix: Sequence[str] = (), numeric: Sequence[str] = (),
               text: Sequence[str] = (), delimiter: str = ",", limit: int | None = None,
               rows: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the `matrix` columns side by side as one float32 (rows, len(matrix)) array, the other columns as
    read_columns gives them). The file streams in blocks straight into those arrays, so the table costs
    its float32 size: neither pyarrow's whole table nor a copy of each column is ever held. A text
    column keeps one string per distinct value (a label column of 1M rows is pointers, not 1M strings).
    `limit`: the first rows only (a sample of a table too large to hold): the rest is not read. `rows`: the
    table's rows where the caller counted them already (count_rows), else they are counted here."""
    if path.endswith(".jsonl"):
        columns = _json_lines_columns(path, [*matrix, *numeric], text)
        return stacked(columns, matrix), {name: columns[name] for name in [*numeric, *text]}
    import pyarrow as pa
    import pyarrow.csv as arrow_csv

    header = read_header(key, path, delimiter)
    types = ({name: pa.float32() for name in [*matrix, *numeric]}
             | {name: pa.dictionary(pa.int32(), pa.string()) for name in text})
    rows = limit if limit is not None else count_rows(path) if rows is None else rows
    source = path if limit is None else _first_lines(path, limit + 1)  # what lies past them is never parsed
    x = np.empty((rows, len(matrix)), dtype="float32")
    numbers = {name: np.empty(rows, dtype="float32") for name in numeric}
    texts = {name: _Coded(rows) for name in text}
    filled = 0
    try:
        reader = arrow_csv.open_csv(
            source, read_options=arrow_csv.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=arrow_csv.ParseOptions(delimiter=delimiter),
            convert_options=arrow_csv.ConvertOptions(column_types=types, include_columns=list(types), null_values=[],
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False),
            memory_pool=pa.system_memory_pool())  # blocks freed as read, not kept by an arena
        for batch in reader:
            if filled == rows:
                break
            batch = batch.slice(0, rows - filled)
            end = filled + batch.num_rows
            for index, name in enumerate(matrix):
                x[filled:end, index] = batch.column(name).to_numpy()
            for name, kept in numbers.items():
                kept[filled:end] = batch.column(name).to_numpy()
            for name, coded in texts.items():
                coded.add(filled, batch.column(name))
            filled = end
    except pa.ArrowInvalid as err:
        raise _bad_cell(key, path, header, str(err), delimiter, [*matrix, *numeric]) from None
    if filled == 0:
        raise DataError(f"{key}={path} has no header or no rows.", fix="a header row, then one row per example")
    columns = {name: kept[:filled] for name, kept in numbers.items()} | {
        name: coded.strings(filled) for name, coded in texts.items()}
    return x[:filled], columns


def column_dtypes(path: str, columns: Sequence[str], delimiter: str = ",", rows: int = 1_000) -> tuple[str, ...]:
    """Each column's type as a reader of the file gets it (pandas.read_csv, pyarrow): "int64" where the first
    `rows` rows write whole numbers without a point, else "float64". A served table model declares its columns so
    (export/served.py): a client reading the file sends those types."""
    import pyarrow as pa
    import pyarrow.csv as arrow_csv

    if path.endswith(".jsonl"):
        return tuple("float64" for _ in columns)
    table = arrow_csv.read_csv(_first_lines(path, rows + 1), parse_options=arrow_csv.ParseOptions(delimiter=delimiter),
                               convert_options=arrow_csv.ConvertOptions(include_columns=list(columns)))
    return tuple("int64" if pa.types.is_integer(table.schema.field(name).type) else "float64" for name in columns)


BLOCK_BYTES = 1 << 19  # what pyarrow parses at a time (about 2,700 rows of 20 numbers): larger blocks cost more
# memory held while streaming (measured: 4 MiB blocks held 120 MiB more than 512 KiB ones) and read no faster


def _first_lines(path: str, count: int):
    import io
    import itertools

    with open(path, "rb") as file:
        return io.BytesIO(b"".join(itertools.islice(file, count)))


def count_rows(path: str) -> int:
    """The table's rows as a reader meets them: its lines that are not blank (a lone "\r" is blank too, as
    TextLineDataset strips it), less the header; counted from the bytes in blocks, no cell parsed. A quoted
    cell holding a newline counts twice: never fewer rows than there are."""
    lines, carried, previous = 0, 0, 10  # bytes of the line still open; the byte before the block
    with open(path, "rb") as file:
        while block := file.read(16 << 20):
            data = np.frombuffer(block, dtype=np.uint8)
            ends = np.flatnonzero(data == 10)
            if len(ends):
                lengths = np.diff(ends, prepend=-1) - 1  # each line's bytes before its newline
                lengths[0] += carried
                before = np.where(ends > 0, data[np.maximum(ends - 1, 0)], previous)
                lines += int(((lengths - (before == 13)) > 0).sum())
                carried = len(data) - int(ends[-1]) - 1
            else:
                carried += len(data)
            previous = int(data[-1])
    lines += carried > 0  # a last line without a newline
    return max(lines - 1, 0)


class _Coded:
    """A text column as it streams: one code per row, and each distinct (stripped) string once."""

    def __init__(self, rows: int):
        self.codes = np.empty(rows, dtype="int32")
        self.names: dict[str, int] = {}

    def add(self, start: int, column) -> None:
        """A block's dictionary column: its own codes mapped onto the codes of the whole column."""
        if hasattr(column, "combine_chunks"):
            column = column.combine_chunks()
        here = np.asarray([self.names.setdefault(value.strip(), len(self.names))
                           for value in column.dictionary.to_pylist()], dtype="int32")
        self.codes[start:start + len(column)] = here[column.indices.to_numpy()] if len(here) else 0

    def strings(self, rows: int) -> np.ndarray:
        names = np.empty(len(self.names), dtype=object)
        names[:] = list(self.names)
        return names[self.codes[:rows]]


def stacked(columns: dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """Numeric columns side by side as one float32 (rows, len(names)) array."""
    rows = len(columns[names[0]]) if names else 0
    x = np.empty((rows, len(names)), dtype="float32")
    for index, name in enumerate(names):
        x[:, index] = columns[name]
    return x


def _bad_cell(key: str, path: str, header: list[str], message: str, delimiter: str,
              numeric: Sequence[str] = ()) -> DataError:
    """pyarrow's error as the rows and columns a user opens the file at: every cell that is not a number, up
    to BAD_CELLS_SAID of them, in one message (the next run does not find the next one)."""
    found = re.search(r"In CSV column #(\d+): CSV conversion error to float: invalid value '(.*)'", message)
    if found and int(found.group(1)) < len(header):
        cells, total = bad_cells(path, list(numeric) or [header[int(found.group(1))]], delimiter)
        if len(cells) == 1:
            row, column, value = cells[0]
            return DataError(f"{path}, row {row}, column {column}: '{value}' is not a number.", fix=NOT_A_NUMBER_FIX)
        listed = "; ".join(f"row {row}, column {column}: '{value}'" for row, column, value in cells)
        more = f"; and {total - len(cells):,} more" if total > len(cells) else ""
        return DataError(f"{path}: {total:,} cells are not numbers: {listed}{more}.", fix=NOT_A_NUMBER_FIX)
    if message.startswith("Empty CSV file"):
        return DataError(f"{key}={path} has no header or no rows.", fix="a header row, then one row per example")
    ragged = re.search(r"Expected (\d+) columns, got (\d+): (.*)", message)
    if ragged:
        return DataError(f"{path}: a row has {ragged.group(2)} cells where the header has {ragged.group(1)} "
                         f"columns: {ragged.group(3)[:80]}", fix="one cell per column in every row (quote cells "
                         "that hold the delimiter)")
    return DataError(f"{path} cannot be read as a table: {message.splitlines()[0]}", fix="a header row, then one "
                     "row per example, cells separated by the delimiter")


BAD_CELLS_SAID = 20  # a file's cells that are not numbers, named in its one error; the rest are counted


def bad_cells(path: str, columns: Sequence[str], delimiter: str) -> tuple[list[tuple[int, str, str]], int]:
    """([(file row, column, cell)] of the first BAD_CELLS_SAID cells of `columns` that float() cannot read, in
    the file's order, and how many there are in all). The file streams in blocks as text; a block's column is
    looked at cell by cell only when pyarrow cannot make it numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as arrow_csv

    reader = arrow_csv.open_csv(path, read_options=arrow_csv.ReadOptions(block_size=BLOCK_BYTES),
                                parse_options=arrow_csv.ParseOptions(delimiter=delimiter),
                                convert_options=arrow_csv.ConvertOptions(
                                    column_types={name: pa.string() for name in columns}, include_columns=list(columns),
                                    null_values=[], strings_can_be_null=False))
    found, total, start = [], 0, 0
    for batch in reader:
        here = []
        for name in columns:
            cells = batch.column(name)
            try:
                pc.cast(cells, pa.float32())
                continue
            except pa.ArrowInvalid:
                here += [(start + index + 2, name, value) for index, value in enumerate(cells.to_pylist())
                         if not is_number(value)]
        total += len(here)
        found = (found + sorted(here))[:BAD_CELLS_SAID]
        start += batch.num_rows
    return found, total


def first_non_number(path: str, column: str, delimiter: str) -> tuple[int, str]:
    """(file row, cell) of the first cell of `column` that float() cannot read; rows count the header as 1."""
    import pyarrow as pa
    import pyarrow.csv as arrow_csv

    table = arrow_csv.read_csv(path, parse_options=arrow_csv.ParseOptions(delimiter=delimiter),
                               convert_options=arrow_csv.ConvertOptions(
                                   column_types={column: pa.string()}, include_columns=[column], null_values=[],
                                   strings_can_be_null=False))
    for index, value in enumerate(table.column(column).to_pylist()):
        if not is_number(value):
            return index + 2, value
    return 0, ""


def _json_object(path: str, number: int, line: str) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}, line {number}: not a JSON object ({err.msg}).", fix="one JSON object per line") \
            from None
    if not isinstance(value, dict):
        raise DataError(f"{path}, line {number}: not a JSON object.", fix="one JSON object per line")
    return value


def _json_lines_columns(path: str, numeric: Sequence[str], text: Sequence[str]) -> dict[str, np.ndarray]:
    """JSON Lines, one object per line: the columns as read_columns gives them (a missing value is '')."""
    require_path("data.path", path, fix="data.path=/abs/path/texts.jsonl (one JSON object per line)", file=True)
    values: dict[str, list] = {name: [] for name in [*numeric, *text]}
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if line.strip():
                found = _json_object(path, number, line)
                for name, kept in values.items():
                    kept.append("" if found.get(name) is None else str(found.get(name)))
    columns = {name: np.asarray([v.strip() for v in kept], dtype=object) for name, kept in values.items()}
    for name in numeric:
        try:
            columns[name] = columns[name].astype("float32")
        except ValueError:
            row = next(i for i, v in enumerate(values[name], start=1) if not is_number(v))
            raise DataError(f"{path}, line {row}, column {name}: '{values[name][row - 1]}' is not a number.",
                            fix=NOT_A_NUMBER_FIX) from None
    return columns


def is_number(text: str) -> bool:
    """What float() reads (nan and inf included: whether a number is finite is the data's check)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
