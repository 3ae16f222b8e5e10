"""A table larger than data.cache_budget streams from its file (tfx_hydra.data.table_stream): the same rows, once
each, in three splits sized without a pass; a bad cell or an unknown class met mid-epoch named by row and column."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfx_hydra.data import table_stream
from tfx_hydra.data.csv import csv
from tfx_hydra.errors import DataError


@pytest.fixture(autouse=True)
def count_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_rows_are_the_lines_that_are_not_blank_less_the_header_counted_once(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\r\n1,2\r\n\r\n3,4\n\n5,6")  # CRLF, blank lines, no newline at the end
    assert table_stream.data_rows(str(path)) == 3
    assert tf.data.TextLineDataset(str(path)).skip(1).filter(lambda line: tf.strings.length(line) > 0) \
        .reduce(0, lambda n, _: n + 1).numpy() == 3  # what the stream reads
    path.write_bytes(b"a,b\n1,2\n")  # written again (another size): counted again, not read from the cache
    assert table_stream.data_rows(str(path)) == 1


def test_the_split_pattern_sizes_each_split_from_the_row_count():
    pattern = table_stream.split_pattern(0.2, 0.1, seed=3)
    assert (pattern == 2).sum() == 200 and (pattern == 1).sum() == 80  # a tenth of the rest
    assert np.array_equal(pattern, table_stream.split_pattern(0.2, 0.1, seed=3))
    assert not np.array_equal(pattern, table_stream.split_pattern(0.2, 0.1, seed=4))
    counts = table_stream.split_counts(2_345, pattern)
    assert sum(counts.values()) == 2_345
    assert counts["test"] == 400 + (pattern[:345] == 2).sum()


def write_table(path, rows: int, bad: dict[int, str] | None = None):
    """`rows` rows of two numbers and a class name; `bad`: row number (as a file counts it, header = 1) -> a line."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 2)).round(3)
    lines = ["a,b,label"] + [f"{a},{b},{'cat' if a > 0 else 'dog'}" for a, b in x]
    for row, line in (bad or {}).items():
        lines[row - 1] = line
    path.write_text("\n".join(lines) + "\n")
    return x


def examples(dataset):
    """Every (inputs, label) a split gives, as arrays."""
    inputs, labels = zip(*[(x.numpy(), y.numpy()) for x, y in dataset.unbatch()])
    return np.stack(inputs), np.asarray(labels)


def test_a_table_larger_than_the_budget_streams_every_row_once_standardized_as_in_memory(tmp_path):
    path = tmp_path / "t.csv"
    x = write_table(path, 300)
    whole = csv(str(path), "label", [2], 2, batch_size=16, seed=0)
    streamed = csv(str(path), "label", [2], 2, batch_size=16, seed=0, cache_budget="1KiB")
    assert "the table streams" not in whole.cache  # under the budget: read whole
    assert streamed.cache.endswith("; the table streams from its file: 3.5 KiB as float32 is more than 1.0 KiB "
                                   "(data.cache_budget=1KiB); figures and classes from its first 300 rows"), \
        streamed.cache
    assert streamed.spec.class_names == whole.spec.class_names == ("cat", "dog")
    assert streamed.num_train + streamed.num_validation + streamed.num_test == 300
    counts = table_stream.split_counts(300, table_stream.split_pattern(0.2, 0.1, seed=0))
    assert (streamed.num_test, streamed.num_validation) == (counts["test"], counts["validation"])
    assert 50 <= counts["test"] <= 70 and 15 <= counts["validation"] <= 35  # about 20 % and 10 % of the rest
    seen = []
    for split, count in (("train", streamed.num_train), ("validation", streamed.num_validation),
                         ("test", streamed.num_test)):
        inputs, labels = examples(getattr(streamed, split))
        assert len(inputs) == count  # the count Keras is told is the count read
        raw = inputs / np.asarray(streamed.spec.input_scale) + np.asarray(streamed.spec.input_offset)
        assert np.array_equal(labels, np.where(raw[:, 0] > 0, 0, 1))  # cat = 0, dog = 1: sorted names
        seen.append(raw)
    rows = np.concatenate(seen)
    assert np.allclose(rows[np.lexsort(rows.T[::-1])], x[np.lexsort(x.T[::-1])], atol=1e-4)  # each row once
    # the figures are the training rows' (here the whole table is the sample), as an in-memory read takes them
    assert np.allclose(streamed.spec.input_offset, whole.spec.input_offset, atol=0.15)


@pytest.mark.parametrize("line, said", [
    ("0.5,x,cat", "row 100051, column b: 'x' is not a number."),
    ("0.5,1.0,bird", "a row's label is a class name the first rows of the table did not hold (100,000)"),
])
def test_a_bad_row_after_the_sample_fails_the_epoch_that_reads_it_named(tmp_path, line, said):
    path = tmp_path / "t.csv"
    write_table(path, 100_100, bad={100_051: line})
    datasets = csv(str(path), "label", [2], 2, batch_size=1024, seed=0, cache_budget="1MiB", check_finite=False)
    assert "the table streams from its file" in datasets.cache  # built: the sample held no bad row
    with pytest.raises(DataError) as caught, datasets.named_errors():
        for split in (datasets.train, datasets.validation, datasets.test):
            for _ in split:
                pass
    assert said in str(caught.value) and str(path) in str(caught.value)


def test_a_text_table_larger_than_the_budget_streams_its_texts(tmp_path):
    from tfx_hydra.data.text_table import text_table

    path = tmp_path / "reviews.tsv"
    texts = [f"{'great' if i % 2 else 'awful'} film number {i}" for i in range(200)]
    path.write_text("review\tstars\n" + "".join(f"{t}\t{'good' if i % 2 else 'bad'}\n" for i, t in enumerate(texts)))
    whole = text_table(str(path), "review", "stars", 2, batch_size=8, seed=0)
    streamed = text_table(str(path), "review", "stars", 2, batch_size=8, seed=0, cache_budget="4KiB")
    assert "the table streams from its file" not in whole.cache
    assert "; the table streams from its file: 17.6 KiB in memory is more than 4.0 KiB (data.cache_budget=4KiB)" \
        in streamed.cache, streamed.cache
    assert streamed.spec.class_names == ("bad", "good") and streamed.spec.input_dtype == "string"
    read = {}
    for split in (streamed.train, streamed.validation, streamed.test):
        for text, label in split.unbatch():
            read[text.numpy().decode()] = int(label)
    assert sorted(read) == sorted(texts)  # every row once, across the three splits
    assert all(label == (1 if text.startswith("great") else 0) for text, label in read.items())


def test_a_table_that_would_stream_is_refused_by_a_k_fold_job_before_training(tmp_path):
    path = tmp_path / "t.csv"
    write_table(path, 300)
    fold = {"folds": 3, "fold": 0, "seed": 0, "stratified": True}  # as the run hands a cv=kfold job's fold
    with pytest.raises(DataError) as caught:
        csv(str(path), "label", [2], 2, batch_size=16, seed=0, cache_budget="1KiB", fold=fold)
    assert str(caught.value) == (f"DataError: cv=kfold cuts folds from a table held in memory, and {path} (3.5 KiB) "
                                 "is more than data.cache_budget allows (1.0 KiB, data.cache_budget=1KiB): it would "
                                 "stream.\n  Fix: a data.cache_budget of 3.5 KiB or more (if memory holds it), or "
                                 "cv=none")
    assert csv(str(path), "label", [2], 2, batch_size=16, seed=0, fold=fold).folded  # in memory: folded


def test_a_streamed_tables_first_start_reads_nothing_through_and_the_next_knows_its_rows(tmp_path, monkeypatch):
    """The first start of a table too large to count at once (over table_stream.COUNTED_FIRST bytes) estimates
    its size from its bytes (it streams), trains with epochs of unknown length while a thread counts its lines,
    and the next start reads the count from the cache: the same splits, the same digests."""
    import time

    from tfx_hydra.data import record_index

    path = tmp_path / "t.csv"
    write_table(path, 3_000)
    monkeypatch.setattr(table_stream, "COUNTED_FIRST", 1024)  # a small table plays a large one: counted meanwhile
    first = csv(str(path), "label", [2], 2, batch_size=16, seed=0, cache_budget="1KiB")
    assert (first.num_train, first.num_validation, first.num_test) == (None, None, None)
    read = {name: len(examples(getattr(first, name))[1]) for name in ("train", "validation", "test")}
    assert sum(read.values()) == 3_000  # every row once, though nothing counted them before
    deadline = time.monotonic() + 60
    while str(path) not in record_index.known_counts([str(path)]):  # counted while the first start read
        assert time.monotonic() < deadline, "the table's rows were not counted in the background"
        time.sleep(0.1)
    again = csv(str(path), "label", [2], 2, batch_size=16, seed=0, cache_budget="1KiB")
    assert {"train": again.num_train, "validation": again.num_validation, "test": again.num_test} == read
    assert {name: again.reads[name].digest for name in read} == {name: first.reads[name].digest for name in read}
