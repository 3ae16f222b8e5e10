"""Tables read column by column (pyarrow's CSV reader): the values as the file has them, and every way a
file can be wrong named where a user opens it -- the row and the column of a bad cell, even far down a
large file, which pyarrow itself does not say."""

from __future__ import annotations

import numpy as np
import pytest

from tfx_hydra.data import csv, text_table
from tfx_hydra.data.table import read_columns
from tfx_hydra.errors import DataError


def test_numeric_columns_arrive_as_float32_and_text_as_stripped_strings(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n1.5,2,cat \n-3,4e2, dog\n")
    columns = read_columns("data.path", str(path), numeric=["a", "b"], text=["label"])
    assert columns["a"].dtype == np.float32 and columns["a"].tolist() == [1.5, -3.0]
    assert columns["b"].tolist() == [2.0, 400.0] and columns["label"].tolist() == ["cat", "dog"]


def test_a_bad_cell_far_down_a_large_file_is_named_by_row_and_column(tmp_path):
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(60_000, 4)).round(4)
    lines = [",".join(f"{v}" for v in row) + f",{i % 2}" for i, row in enumerate(rows)]
    lines[54_321] = lines[54_321].replace(",", ",n/a,", 1).replace(f",{rows[54_321][1]}", "", 1)
    path = tmp_path / "big.csv"
    path.write_text("f0,f1,f2,f3,label\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"big.csv, row 54323, column f1: 'n/a' is not a number\.(?s:.*)"
                                        r"Fix: fix the file, or leave the column out with data.feature_columns"):
        csv(str(path), "label", [4], 2, batch_size=32, seed=0)
    data = csv(str(path), "label", [3], 2, batch_size=32, seed=0, feature_columns=["f0", "f2", "f3"])
    assert data.num_train + data.num_validation + data.num_test == 60_000  # the column left out: it reads


@pytest.mark.parametrize("text, said", [
    ("a,b,label\n1,,0\n", r"e.csv, row 2, column b: '' is not a number"),
    ("a,b,label\n1,2,0\n3,4\n", r"e.csv: a row has 2 cells where the header has 3 columns: 3,4"),
    ("", r"data.path=.*e.csv has no header or no rows"),
    ("a,b,label\n", r"data.path=.*e.csv has no header or no rows"),
])
def test_empty_cells_ragged_rows_and_empty_files_are_one_error_each(tmp_path, text, said):
    path = tmp_path / "e.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=said):
        csv(str(path), "label", [2], 2, batch_size=1, seed=0)


def test_nan_cells_still_read_as_numbers_and_are_refused_as_inputs(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("a,b,label\n1,2,0\n3,nan,1\n4,inf,1\n")
    with pytest.raises(DataError, match=r"n.csv, row 3, column b: nan is not a finite number \(2 such cells in all\)"):
        csv(str(path), "label", [2], 2, batch_size=1, seed=0)


def test_text_tables_as_tsv_and_json_lines_read_the_same_texts_and_labels(tmp_path):
    rows = [(f"text number {i}", ["a", "b", "c"][i % 3]) for i in range(30)]
    (tmp_path / "t.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    (tmp_path / "t.jsonl").write_text("".join(f'{{"text": "{t}", "label": "{y}"}}\n' for t, y in rows))
    tsv = text_table(str(tmp_path / "t.tsv"), "text", "label", 3, batch_size=4, seed=0)
    jsonl = text_table(str(tmp_path / "t.jsonl"), "text", "label", 3, batch_size=4, seed=0)
    assert tsv.spec.class_names == jsonl.spec.class_names == ("a", "b", "c")
    first = [np.concatenate([x.numpy() for x, _ in d.test]).tolist() for d in (tsv, jsonl)]
    assert first[0] == first[1] and first[0][0].startswith(b"text number")
    (tmp_path / "bad.jsonl").write_text('{"text": "x", "label": "a"}\n{"text": oops}\n')
    with pytest.raises(DataError, match=r"bad.jsonl, line 2: not a JSON object"):
        text_table(str(tmp_path / "bad.jsonl"), "text", "label", 1, batch_size=1, seed=0)


SPREADSHEET_WAYS = {  # one table, as the tools that write tables write it
    "plain": lambda lines: "\n".join(lines) + "\n",
    "a byte-order mark (Excel's UTF-8)": lambda lines: "\ufeff" + "\n".join(lines) + "\n",
    "CRLF line ends": lambda lines: "\r\n".join(lines) + "\r\n",
    "quoted fields": lambda lines: "\n".join(",".join(f'"{c}"' for c in line.split(",")) for line in lines) + "\n",
    "a trailing empty line": lambda lines: "\n".join(lines) + "\n\n",
    "all of them": lambda lines: "\ufeff" + "\r\n".join(",".join(f'"{c}"' for c in line.split(",")) for line in lines)
    + "\r\n\r\n",
}


@pytest.mark.parametrize("budget", ["1GiB", "1KiB"], ids=["in memory", "streamed"])
def test_every_way_a_spreadsheet_writes_a_table_reads_as_the_same_table(tmp_path, budget):
    rng = np.random.default_rng(0)
    lines = ["size_m2,rooms,label"] + [f"{rng.uniform(30, 200):.1f},{i % 5 + 1},{['cat', 'dog'][i % 2]}"
                                       for i in range(120)]
    read = {}
    for way, written in SPREADSHEET_WAYS.items():
        path = tmp_path / f"{len(read)}.csv"
        path.write_bytes(written(lines).encode("utf-8"))
        data = csv(str(path), "label", None, None, batch_size=8, seed=0, cache_budget=budget)
        assert data.spec.feature_names == ("size_m2", "rooms") and data.spec.class_names == ("cat", "dog"), way
        assert (data.spec.input_shape, data.spec.num_classes) == ((2,), 2), way  # read from the file, unset
        assert data.spec.read_from_file == ("input_shape", "num_classes")
        read[way] = [np.concatenate([np.asarray(x).reshape(len(y), -1)
                                     for x, y in getattr(data, split).as_numpy_iterator()])
                     for split in ("train", "validation", "test")]
    for way, splits in read.items():
        for split, plain in zip(splits, read["plain"]):
            assert np.array_equal(split, plain), way


def test_every_bad_cell_is_named_in_one_message_up_to_twenty_and_the_rest_counted(tmp_path):
    lines = ["a,rooms,label"] + [f"{i},{3},{i % 2}" for i in range(400)]
    lines[37], lines[200] = "36,n/a,0", "199,three,1"  # file rows 38 and 201
    path = tmp_path / "two.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"two.csv: 2 cells are not numbers: row 38, column rooms: 'n/a'; row 201, "
                                        r"column rooms: 'three'\."):
        csv(str(path), "label", None, None, batch_size=8, seed=0)
    lines = ["a,b,label"] + [f"{'x' if i % 10 == 0 else i},{'y' if i % 15 == 0 else 1},0" for i in range(1, 400)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as said:
        csv(str(path), "label", None, None, batch_size=8, seed=0)
    message = str(said.value)
    assert message.startswith(f"DataError: {path}: 65 cells are not numbers: row 11, column a: 'x'; row 16, column b:"
                              " 'y'; row 21, column a: 'x';")
    assert message.count("row ") == 20 and "; and 45 more." in message


def test_a_set_num_classes_or_input_shape_is_checked_against_the_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{['cat', 'dog', 'emu'][i % 3]}\n" for i in range(60)))
    with pytest.raises(DataError, match=r"data.num_classes=2 does not match .*t.csv: its labels name 3 classes "
                                        r"\(cat, dog, emu\)\.(?s:.*)Fix: data.num_classes=3, or data.num_classes=null"):
        csv(str(path), "label", None, 2, batch_size=8, seed=0)
    with pytest.raises(DataError, match=r"data.input_shape=\[3\] does not match the data"):
        csv(str(path), "label", [3], None, batch_size=8, seed=0)
    assert csv(str(path), "label", [2], 3, batch_size=8, seed=0).spec.read_from_file == ()
