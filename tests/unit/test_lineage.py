"""What a run read, per split (data/lineage.py): digests that change when the data does and only
then, for every kind of source; the file digest's bounded reads; MLflow's dataset entities."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.test_data_sources import digits_tfrecords, write_csv, write_images  # noqa: F401 - a fixture
from tfx_hydra.data import csv, digits, image_folder, keras_dataset, lineage, tfrecord
from tfx_hydra.tracking.datasets import dataset_inputs, described


def digests(data) -> dict[str, str]:
    return {split: read.digest for split, read in data.reads.items()}


def test_in_memory_splits_are_digested_as_read_and_the_same_seed_gives_the_same_digests():
    first, again = digits([8, 8], 10, batch_size=32, seed=0), digits([8, 8], 10, batch_size=64, seed=0)
    assert digests(first) == digests(again)  # the batch size reads the same data
    assert len(set(digests(first).values())) == 3
    read = first.reads["train"]
    assert (read.name, read.source, read.source_type, read.context) == (
        "digits-train", "sklearn.datasets.load_digits", "code", "training")
    assert (read.num_examples, read.input_shape, read.num_classes) == (first.num_train, (8, 8), 10)
    assert digests(digits([8, 8], 10, batch_size=32, seed=1))["test"] != digests(first)["test"]  # another split
    limited = digits([8, 8], 10, batch_size=32, seed=0, limit=100)
    assert limited.reads["train"].digest != read.digest and limited.reads["test"].digest == first.reads["test"].digest


def test_a_changed_value_in_a_local_npz_changes_only_its_split(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 255, (60, 4, 4), dtype=np.uint8), "y_train": np.arange(60) % 3,
              "x_test": rng.integers(0, 255, (20, 4, 4), dtype=np.uint8), "y_test": np.arange(20) % 3}
    np.savez(tmp_path / "a.npz", **arrays)
    before = keras_dataset("mnist", str(tmp_path / "a.npz"), [4, 4], 3, batch_size=8, seed=0)
    arrays["x_test"][5, 1, 1] ^= 1
    np.savez(tmp_path / "a.npz", **arrays)
    after = keras_dataset("mnist", str(tmp_path / "a.npz"), [4, 4], 3, batch_size=8, seed=0)
    assert before.reads["test"].digest != after.reads["test"].digest
    assert before.reads["train"].digest == after.reads["train"].digest
    assert after.reads["test"].source == str(tmp_path / "a.npz") and after.reads["test"].source_type == "local"


def test_tfrecord_splits_carved_from_the_same_files_differ_and_follow_the_files(digits_tfrecords, tmp_path):  # noqa: F811
    files = str(digits_tfrecords / "train-*.tfrecord")
    carved = tfrecord(files, None, [8, 8], 10, batch_size=32, seed=0)
    assert len(set(digests(carved).values())) == 3  # three record ranges of the same files
    assert carved.reads["train"].details == {"files": 3} and carved.reads["train"].source == files
    again = tfrecord(files, None, [8, 8], 10, batch_size=32, seed=0)
    assert digests(again) == digests(carved)
    copy = tmp_path / "copy"  # the same files elsewhere: the same data
    copy.mkdir()
    for path in sorted(digits_tfrecords.glob("train-*.tfrecord")):
        (copy / path.name).write_bytes(path.read_bytes())
    assert digests(tfrecord(str(copy / "train-*.tfrecord"), None, [8, 8], 10, batch_size=32, seed=0)) == \
        digests(carved)
    last = sorted(copy.glob("train-*.tfrecord"))[-1]
    data = bytearray(last.read_bytes())
    data[-3] ^= 0xFF  # a flipped byte inside the last record's payload (checksum left stale is not read here)
    last.write_bytes(bytes(data))
    assert lineage.files_digest(sorted(map(str, copy.glob("*.tfrecord")))) != \
        lineage.files_digest(sorted(map(str, digits_tfrecords.glob("train-*.tfrecord"))))


def test_image_folder_and_csv_are_digested_by_their_files_and_values(tmp_path):
    root = write_images(tmp_path / "pets", {"cats": [(8, 8)] * 10, "dogs": [(8, 8)] * 10})
    before = image_folder(str(root), [8, 8, 3], 2, batch_size=4, seed=0)
    assert before.reads["train"].details == {"files": before.num_train}
    (root / "dogs" / "extra.png").write_bytes((root / "dogs" / "000.png").read_bytes())
    after = image_folder(str(root), [8, 8, 3], 2, batch_size=4, seed=0)
    assert digests(after) != digests(before)
    table = write_csv(tmp_path / "iris.csv")
    first = csv(str(table), "species", [3], 3, batch_size=8, seed=0)
    assert first.reads["train"].name == "iris-train" and first.reads["train"].source == str(table)
    assert digests(csv(str(table), "species", [3], 3, batch_size=8, seed=0, normalization="none")) == digests(first)


def test_a_file_digest_reads_a_bounded_sample_of_a_large_dataset(tmp_path, monkeypatch):
    paths = []
    for i in range(300):
        path = tmp_path / f"part-{i:03d}"
        path.write_bytes(bytes([i % 256]) * (200 * 1024 if i == 0 else 10))
        paths.append(str(path))
    read = []
    real = lineage.file_sample
    monkeypatch.setattr(lineage, "file_sample", lambda p: read.append(p) or real(p))  # counts reads, real bytes
    lineage.files_digest(paths)
    assert len(read) == lineage.SAMPLED_FILES and read[0] == paths[0] and read[-1] == paths[-1]
    assert len(real(paths[0])) == 2 * lineage.SAMPLE_BYTES  # a large file: its two ends only
    before = lineage.files_digest(paths)
    (tmp_path / "part-000").write_bytes(b"\1" * (200 * 1024))  # same size, changed first bytes
    assert lineage.files_digest(paths) != before


def test_reads_become_mlflow_datasets_with_context_schema_and_profile():
    data = digits([8, 8], 10, batch_size=32, seed=0)
    (train, validation, test) = dataset_inputs(described(data.reads.values()))
    assert [i.tags[0].value for i in (train, validation, test)] == ["training", "validation", "test"]
    assert train.dataset.digest == data.reads["train"].digest and len(train.dataset.digest) <= 36
    assert json.loads(train.dataset.source) == {"tags": {"mlflow.source.name": "sklearn.datasets.load_digits"}}
    features = json.loads(json.loads(train.dataset.schema)["mlflow_tensorspec"]["features"])
    assert features[0]["tensor-spec"] == {"dtype": "float32", "shape": [-1, 8, 8]}
    assert json.loads(train.dataset.profile)["num_examples"] == data.num_train


@pytest.mark.parametrize("interval", [0, -1])
def test_a_system_metrics_interval_must_be_positive(interval):
    from tfx_hydra.errors import ConfigError
    from tfx_hydra.settings.schemas import SystemMetricsConfig

    with pytest.raises(ConfigError, match="tracking.system_metrics.interval"):
        SystemMetricsConfig(interval=interval)


def test_two_jobs_logging_the_same_new_dataset_at_once_both_get_it(tmp_path):
    """The race two parallel sweep jobs ran into, caused for real on a SQLite store: MLflow looks the
    dataset up, and before its insert runs, "the other job" (a second run, through the same store)
    creates that very dataset. MLflow's insert then fails on the unique key; the retry links the
    dataset that now exists, so both runs list it and nothing goes to the offline journal."""
    from mlflow.tracking import MlflowClient
    from sqlalchemy import event

    from tfx_hydra.tracking.datasets import recorded_digests, send_datasets

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("race")
    mine, other = (client.create_run(experiment).info.run_id for _ in range(2))
    descriptions = described(digits([8, 8], 10, batch_size=32, seed=0).reads.values())
    engine = client._tracking_client.store.engine
    raced = []

    def the_other_job_inserts_first(conn, cursor, statement, *rest):
        if statement.lstrip().upper().startswith("INSERT INTO DATASETS") and not raced:
            raced.append(statement)
            send_datasets(client, other, descriptions)  # after our lookup missed, before our insert

    event.listen(engine, "before_cursor_execute", the_other_job_inserts_first)
    try:
        send_datasets(client, mine, descriptions)
    finally:
        event.remove(engine, "before_cursor_execute", the_other_job_inserts_first)
    assert raced  # the race did happen
    expected = {d["context"]: (d["name"], d["digest"]) for d in descriptions}
    for run_id in (mine, other):
        assert recorded_digests(client.get_run(run_id)) == expected
    with engine.connect() as conn:  # one dataset row per split, shared by the two runs
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM datasets").scalar() == 3
