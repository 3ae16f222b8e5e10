"""Data sources on tiny files the tests write: TFRecords (and the converter), image folders, CSV,
Keras' built-ins from a local .npz, TensorFlow Datasets; and each bad-data case, said clearly."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tfx_hydra.data import csv, digits, image_folder, keras_dataset, record_index, table_stream, tfds, tfrecord
from tfx_hydra.data.pipeline import DataSpec, PipelineOptions, streamed_datasets
from tfx_hydra.data.to_tfrecord import main as to_tfrecord
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.compose import build, compose

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = pytest.mark.xdist_group("test_data_sources")


def labels(dataset) -> np.ndarray:
    return np.concatenate([y.numpy() for _, y in dataset])


def inputs(dataset) -> np.ndarray:
    return np.concatenate([x.numpy() for x, _ in dataset])


# --- TFRecord -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_tfrecords(tmp_path_factory):
    """The digits written by the converter, as a user would: 3 shards per split."""
    folder = tmp_path_factory.mktemp("tfr")
    assert to_tfrecord([str(folder), "--shards", "3", "data=digits"]) == 0
    return folder


def test_to_tfrecord_writes_shards_and_the_config_that_reads_them(digits_tfrecords, capsys):
    names = sorted(os.listdir(digits_tfrecords))
    assert "train-00000-of-00003.tfrecord" in names and "test-00002-of-00003.tfrecord" in names
    text = (digits_tfrecords / "data" / f"{digits_tfrecords.name}.yaml").read_text()
    assert "raw_scale: 0.0625" in text and "1293 train, 144 validation, 360 test examples" in text
    # the written file is a data option: a run selects it by name through Hydra's search path
    option = f"data={digits_tfrecords.name}"
    assert f"# python -m tfx_hydra hydra.searchpath=[file://{digits_tfrecords}] {option}\n" in text
    cfg = compose([f"hydra.searchpath=[file://{digits_tfrecords}]", option])
    assert cfg.data._target_ == "tfx_hydra.data.tfrecord" and list(cfg.data.input_shape) == [8, 8]
    assert cfg.data.train_files == str(digits_tfrecords / "train-*.tfrecord")
    data = build(cfg.data, "data", batch_size=32)
    assert (data.num_train, data.num_validation, data.num_test) == (1293, 144, 360)


def test_ten_or_more_training_files_carve_validation_and_test_as_whole_files_skipping_nothing(tmp_path, caplog):
    """Carved by records, the training split would start by reading past the validation and test records; with
    enough files they are whole files instead, drawn by the seed, and the training pipeline skips nothing."""
    caplog.set_level("INFO")
    assert to_tfrecord([str(tmp_path), "--shards", "12", "data=digits"]) == 0
    train = str(tmp_path / "train-*.tfrecord")
    data = tfrecord(train, None, [8, 8], 10, batch_size=32, seed=0, raw_scale=1 / 16)
    assert "data: test is 2 whole files and validation is 1 whole file of the 12 training files (drawn by " \
           "data.seed)" in caplog.text
    assert data.reads["test"].details["files"] == 2 and data.reads["validation"].details["files"] == 1
    assert data.num_train + data.num_validation + data.num_test == 1293  # every training record, once
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=data.train._variant_tensor, external_state_policy=1)
    assert b"SkipDataset" not in graph.numpy()
    few = tfrecord(str(tmp_path / "train-0000[0-3]-*.tfrecord"), None, [8, 8], 10, batch_size=32, seed=0)
    assert few.reads["test"].details["files"] == 4  # under 10 files: the first records, as before


def test_tfrecord_reads_back_exactly_what_the_in_memory_source_gives(digits_tfrecords):
    files = {split: str(digits_tfrecords / f"{split}-*.tfrecord") for split in ("train", "validation", "test")}
    data = tfrecord(files["train"], files["test"], [8, 8], 10, batch_size=32, seed=0,
                    validation_files=files["validation"], raw_scale=1 / 16)
    memory = digits([8, 8], 10, batch_size=32, seed=42)  # the converter ran with the config's seed
    assert (data.num_train, data.num_validation, data.num_test) == (1293, 144, 360)
    assert data.spec == memory.spec
    # same examples (the test split was written round-robin over 3 shards and is read interleaved)
    assert sorted(map(tuple, inputs(data.test).reshape(360, -1).round(6))) == \
        sorted(map(tuple, inputs(memory.test).reshape(360, -1).round(6)))
    x, y = next(iter(data.train))
    assert x.shape == (32, 8, 8) and x.dtype == tf.float32 and y.dtype == tf.int64 and float(tf.reduce_max(x)) <= 1


def test_tfrecord_order_is_deterministic_and_seeded(digits_tfrecords):
    pattern = str(digits_tfrecords / "train-*.tfrecord")
    first = tfrecord(pattern, None, [8, 8], 10, batch_size=64, seed=1, deterministic=True)
    again = tfrecord(pattern, None, [8, 8], 10, batch_size=64, seed=1, deterministic=True)
    assert np.array_equal(labels(first.train), labels(again.train))
    # carved off the training files' records by the seeded pattern of their positions (record_splits.py)
    shares = table_stream.split_counts(1293, table_stream.split_pattern(0.2, 0.1, 1))
    assert (first.num_train, first.num_validation, first.num_test) == (shares["train"], shares["validation"],
                                                                      shares["test"]) == (938, 99, 256)
    assert np.array_equal(labels(first.test), labels(again.test))  # held-out splits never shuffle


def test_tfrecord_cache_file_limit_and_a_training_run(digits_tfrecords, tmp_path):
    pattern = str(digits_tfrecords / "train-*.tfrecord")
    data = tfrecord(pattern, str(digits_tfrecords / "test-*.tfrecord"), [8, 8], 10, batch_size=32, seed=0,
                    raw_scale=1 / 16, cache=str(tmp_path / "cache"), limit=320, map_parallelism=2, prefetch=2)
    assert data.num_train == 320 and len(labels(data.train)) == 320
    keras.utils.set_random_seed(0)  # its own initial weights, whatever ran before it in this process
    model = keras.Sequential([keras.Input((8, 8)), keras.layers.Flatten(), keras.layers.Dense(10, "softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(data.train, validation_data=data.validation, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]  # it learns from what the cache gives back
    assert any(name.startswith("cache.train") for name in os.listdir(tmp_path))  # the file cache was written


def test_tfrecord_images_as_encoded_png(tmp_path):
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(str(tmp_path / "img.tfrecord")) as writer:
        for i in range(40):
            png = tf.io.encode_png(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).numpy()
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2]))})).SerializeToString())
    data = tfrecord(str(tmp_path / "*.tfrecord"), None, [6, 5, 3], 2, batch_size=8, seed=0, kind="image",
                    inputs_key="image", label_key="y", validation_split=0.2, test_split=0.2)
    x, _ = next(iter(data.train))
    assert x.shape == (8, 6, 5, 3) and 0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1
    assert data.spec.input_scale == pytest.approx(1 / 255)


def test_tfrecord_empty_glob(tmp_path):
    with pytest.raises(DataError, match=r"data.train_files: no file matches .*nothing-\*.tfrecord") as caught:
        tfrecord(str(tmp_path / "nothing-*.tfrecord"), None, [8, 8], 10, batch_size=32, seed=0)
    assert "to_tfrecord" in str(caught.value)


def test_a_corrupt_tfrecord_is_named_by_the_epoch_that_reads_it(digits_tfrecords, tmp_path):
    """Nothing reads the files through before training (record_splits.py): a truncated file is met, and named
    with its file and record, where an epoch reads it."""
    good = (digits_tfrecords / "train-00000-of-00003.tfrecord").read_bytes()
    (tmp_path / "a.tfrecord").write_bytes(good)
    (tmp_path / "b.tfrecord").write_bytes(good[: len(good) // 2])  # truncated mid-record, as by a full disk
    data = tfrecord(str(tmp_path / "*.tfrecord"), None, [8, 8], 10, batch_size=32, seed=0)
    with pytest.raises(DataError, match=r"the TFRecord file .*b.tfrecord is corrupt or truncated after record 215"):
        with data.named_errors():
            for _ in data.train:
                pass


def test_tfrecord_keys_or_shape_that_do_not_match_the_files(digits_tfrecords):
    pattern = str(digits_tfrecords / "train-*.tfrecord")
    with pytest.raises(DataError, match=r"does not parse as data.inputs_key=pixels"):
        tfrecord(pattern, None, [8, 8], 10, batch_size=32, seed=0, inputs_key="pixels")
    with pytest.raises(DataError, match=r"data.input_shape=\[28, 28\]"):
        tfrecord(pattern, None, [28, 28], 10, batch_size=32, seed=0)


def test_tfrecord_fewer_examples_than_a_batch(digits_tfrecords):
    with pytest.raises(DataError, match=r"the training split has 50 examples, fewer than one batch"):
        tfrecord(str(digits_tfrecords / "train-*.tfrecord"), None, [8, 8], 10, batch_size=64, seed=0, limit=50)


# --- image folders ---------------------------------------------------------------------------------

def write_images(root, sizes_by_class: dict[str, list[tuple[int, int]]]):
    rng = np.random.default_rng(0)
    for name, sizes in sizes_by_class.items():
        os.makedirs(root / name, exist_ok=True)
        for i, (w, h) in enumerate(sizes):
            bright = 200 if name == "cats" else 30  # a learnable difference
            pixels = np.clip(rng.normal(bright, 20, (h, w, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i:03d}.png")
    return root


def test_image_folder_resizes_splits_and_augments(tmp_path):
    root = write_images(tmp_path / "pets", {"cats": [(12, 10)] * 20 + [(9, 9)] * 5, "dogs": [(10, 12)] * 25})
    data = image_folder(str(root), [8, 8, 3], 2, batch_size=8, seed=0,
                        augmentation={"flip": "horizontal", "rotation": 0.1, "zoom": 0.1})
    assert (data.num_train, data.num_validation, data.num_test) == (36, 4, 10)
    x, y = next(iter(data.train))
    assert x.shape == (8, 8, 8, 3) and float(tf.reduce_max(x)) <= 1.0
    test_labels = labels(data.test)
    assert sorted(set(test_labels)) == [0, 1]  # cats = 0, dogs = 1 (sorted folder names), stratified
    cats = inputs(data.test)[test_labels == 0]
    assert cats.mean() > 0.6  # decoded pixels, not noise: cats are bright
    first, second = inputs(data.train), inputs(data.train)
    assert not np.allclose(np.sort(first.ravel()), np.sort(second.ravel()))  # fresh augmentation each epoch


def test_image_folder_gray_with_a_test_directory(tmp_path):
    train = write_images(tmp_path / "train", {"a": [(6, 6)] * 10, "b": [(6, 6)] * 10})
    test = write_images(tmp_path / "test", {"a": [(6, 6)] * 3, "b": [(6, 6)] * 3})
    data = image_folder(str(train), [6, 6], 2, batch_size=4, seed=0, test_directory=str(test), resize=False)
    assert (data.num_train, data.num_validation, data.num_test) == (18, 2, 6)
    assert next(iter(data.test))[0].shape == (4, 6, 6)


def test_image_folder_mixed_sizes_without_resize(tmp_path):
    root = write_images(tmp_path / "pets", {"cats": [(8, 8)] * 4, "dogs": [(8, 8)] * 3 + [(9, 7)]})
    with pytest.raises(DataError, match=r"003.png is 9x7 .* data.resize=false: the images have mixed sizes") as caught:
        image_folder(str(root), [8, 8, 3], 2, batch_size=2, seed=0, resize=False)
    assert "data.resize=true" in str(caught.value)


def test_image_folder_missing_or_empty_or_wrong_classes(tmp_path):
    with pytest.raises(DataError, match=r"data.directory=.*nowhere is not a folder"):
        image_folder(str(tmp_path / "nowhere"), [8, 8, 3], 2, batch_size=2, seed=0)
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    with pytest.raises(DataError, match=r"has no images in class sub-folders"):
        image_folder(str(tmp_path / "empty"), [8, 8, 3], 2, batch_size=2, seed=0)
    root = write_images(tmp_path / "three", {"a": [(4, 4)] * 3, "b": [(4, 4)] * 3, "c": [(4, 4)] * 3})
    with pytest.raises(DataError, match=r"data.num_classes=2 does not match .*3 class folders \(a, b, c\)"):
        image_folder(str(root), [4, 4, 3], 2, batch_size=2, seed=0)
    with pytest.raises(ConfigError, match=r"data.augmentation.flip=sideways is not one of"):
        image_folder(str(root), [4, 4, 3], 3, batch_size=2, seed=0, augmentation={"flip": "sideways"})


# --- CSV ---------------------------------------------------------------------------------------------

def write_csv(path, rows: int = 120):
    rng = np.random.default_rng(0)
    lines = ["height,weight,note_id,species"]
    for i in range(rows):
        species = ["setosa", "virginica", "versicolor"][i % 3]
        lines.append(f"{100 + 10 * (i % 3) + rng.normal():.3f},{rng.normal(50, 5):.3f},{i},{species}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csv_standardizes_and_numbers_class_names(tmp_path):
    path = write_csv(tmp_path / "iris.csv")
    data = csv(str(path), "species", [2], 3, batch_size=16, seed=0, feature_columns=["height", "weight"])
    x = inputs(data.train)
    assert x.shape[1] == 2 and abs(x.mean()) < 1e-5 and np.allclose(x.std(axis=0), 1, atol=1e-5)
    assert data.spec.input_offset[0] == pytest.approx(110, abs=2)  # the raw mean, kept for exports
    raw = np.asarray(data.spec.denormalize(x))
    assert raw[:, 0].min() > 95 and raw[:, 1].mean() == pytest.approx(50, abs=2)
    assert sorted(set(labels(data.test))) == [0, 1, 2]  # setosa, versicolor, virginica


def test_csv_missing_label_column_and_bad_values(tmp_path):
    path = write_csv(tmp_path / "iris.csv")
    with pytest.raises(DataError, match=r"data.label_column=class is not a column of .*iris.csv \(columns: height, "
                                        r"weight, note_id, species\)"):
        csv(str(path), "class", [3], 3, batch_size=16, seed=0)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,label\n1,2,0\n3,oops,1\n")
    with pytest.raises(DataError, match=r"bad.csv, row 3, column b: 'oops' is not a number"):
        csv(str(bad), "label", [2], 2, batch_size=1, seed=0)
    with pytest.raises(DataError, match=r"data.path=.*missing.csv does not exist"):
        csv(str(tmp_path / "missing.csv"), "label", [2], 2, batch_size=1, seed=0)
    with pytest.raises(DataError, match=r"data.input_shape=\[2\] does not match the data: train examples have "
                                        r"shape \[3\]"):
        csv(str(path), "species", [2], 3, batch_size=16, seed=0)


# --- Keras built-ins, TFDS ----------------------------------------------------------------------------

def test_cifar10_from_a_local_npz_with_column_labels(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "cifar10.npz"
    np.savez(path, x_train=rng.integers(0, 256, (100, 32, 32, 3), dtype=np.uint8),
             y_train=rng.integers(0, 10, (100, 1)), x_test=rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8),
             y_test=rng.integers(0, 10, (20, 1)))  # Keras' CIFAR labels are (n, 1)
    data = keras_dataset("cifar10", str(path), [32, 32, 3], 10, batch_size=10, seed=0)
    assert (data.num_train, data.num_validation, data.num_test) == (90, 10, 20)
    x, y = next(iter(data.train))
    assert x.shape == (10, 32, 32, 3) and y.shape == (10,) and float(tf.reduce_max(x)) <= 1.0
    with pytest.raises(ConfigError, match=r"data.name=imagenet is not a Keras built-in dataset"):
        keras_dataset("imagenet", str(path), [32, 32, 3], 10, batch_size=10, seed=0)


def test_tfds_a_dataset_that_is_not_downloaded(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(DataError, match=r"the TFDS dataset mnist is not in .*\(data.download=false\)") as caught:
        tfds("mnist", [28, 28, 1], 10, batch_size=32, seed=0, data_dir=str(tmp_path))
    assert "data.download=true" in str(caught.value)


def test_tfds_reads_a_prepared_dataset(tmp_path):
    tensorflow_datasets = pytest.importorskip("tensorflow_datasets")
    # TFDS' own test helper: mnist's real builder, feature spec and split metadata serving random
    # examples; it stands in for the download (download=true calls its no-op download_and_prepare).
    with tensorflow_datasets.testing.mock_data(num_examples=64, data_dir=str(tmp_path)):
        data = tfds("mnist", [28, 28, 1], 10, batch_size=16, seed=0, data_dir=str(tmp_path), download=True,
                    train_split="train", validation_split="test", test_split="test", limit=48)
        x, y = next(iter(data.train))
        assert data.num_train == 48 and x.shape == (16, 28, 28, 1) and y.dtype == tf.int64
        assert float(tf.reduce_max(x)) <= 1.0


def test_tfds_not_installed_says_how_to_install(monkeypatch):
    # Fault injection: hide the installed package, as on a machine without the extra.
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match=r"data=tfds needs TensorFlow Datasets") as caught:
        tfds("mnist", [28, 28, 1], 10, batch_size=32, seed=0)
    assert 'pip install "tfx_hydra[tfds]"' in str(caught.value)


def test_common_options_are_checked():
    with pytest.raises(ConfigError, match=r"data.shard_policy=files is not one of"):
        digits([8, 8], 10, batch_size=32, seed=0, shard_policy="files")
    with pytest.raises(ConfigError,
                       match=r"data.map_parallelism=0 is out of range: expected a positive integer or auto"):
        digits([8, 8], 10, batch_size=32, seed=0, map_parallelism=0)
    with pytest.raises(ConfigError, match=r"data.normalization=zscore is not one of"):
        digits([8, 8], 10, batch_size=32, seed=0, normalization="zscore")
    data = digits([8, 8], 10, batch_size=32, seed=0, normalization="standardize", shard_policy="off")
    options = data.train.options()
    assert options.experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
    assert abs(inputs(data.train).mean()) < 0.05


def test_tfrecord_shard_policy_auto_shards_by_file_unless_splits_are_carved(digits_tfrecords):
    policy = tf.data.experimental.AutoShardPolicy
    files = {split: str(digits_tfrecords / f"{split}-*.tfrecord") for split in ("train", "validation", "test")}
    own = tfrecord(files["train"], files["test"], [8, 8], 10, batch_size=32, seed=0,
                   validation_files=files["validation"])
    assert own.train.options().experimental_distribute.auto_shard_policy == policy.AUTO  # files when enough
    carved = tfrecord(files["train"], None, [8, 8], 10, batch_size=32, seed=0)
    # take/skip carve the first records: per-worker file shards would each carve their own
    assert carved.train.options().experimental_distribute.auto_shard_policy == policy.DATA


def test_the_converter_reports_user_mistakes_without_a_traceback(capsys, tmp_path):
    assert to_tfrecord([str(tmp_path), "--shards", "0", "data=digits"]) == 1
    assert "Error: ConfigError: --shards=0: expected at least 1." in capsys.readouterr().err
    assert to_tfrecord([str(tmp_path), "data=imagenet"]) == 1
    assert "Error: ConfigError: data=imagenet is not an option of 'data'; its options are: " in capsys.readouterr().err
    assert to_tfrecord([str(tmp_path), "data=mnist", f"data.path={tmp_path}/missing.npz"]) == 1
    assert f"DataError: data.path={tmp_path}/missing.npz does not exist." in capsys.readouterr().err
    assert to_tfrecord([str(tmp_path / "pets-tfr"), "data=image_folder", f"data.directory={tmp_path}"]) == 1
    shown = capsys.readouterr().err  # a key the option leaves to the user: named, not omegaconf's traceback
    assert "Error: ConfigError: data.num_classes has no value (image_folder needs it)." in shown, shown
    assert "Traceback" not in shown and not (tmp_path / "pets-tfr").exists()


# --- non-finite inputs: a DataError before training, named where it is -----------------------------

def test_csv_cells_that_are_nan_or_inf_are_named_by_row_and_column(tmp_path):
    path = write_csv(tmp_path / "iris.csv")
    lines = path.read_text().splitlines()
    lines[5] = "nan," + lines[5].split(",", 1)[1]  # data row 5: file line 6
    lines[9] = lines[9].split(",")[0] + ",inf," + ",".join(lines[9].split(",")[2:])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"iris.csv, row 6, column height: nan is not a finite number \(2 such cells "
                                        r"in all\); the inputs must be finite numbers.\n  Fix: clean the data .*"
                                        r"data.check_finite=false"):
        csv(str(path), "species", [2], 3, batch_size=16, seed=0, feature_columns=["height", "weight"])
    kept = csv(str(path), "species", [2], 3, batch_size=16, seed=0, feature_columns=["height", "weight"],
               normalization="none", check_finite=False)  # a model that handles NaN itself
    assert np.isnan(np.concatenate([inputs(kept.train), inputs(kept.validation), inputs(kept.test)])).sum() == 1


def test_npz_arrays_with_nan_are_named_by_array_and_index(tmp_path):
    rng = np.random.default_rng(0)
    x_train, x_test = rng.random((60, 8, 8)).astype("float32"), rng.random((20, 8, 8)).astype("float32")
    x_test[4, 2, 7] = np.inf
    path = tmp_path / "floats.npz"
    np.savez(path, x_train=x_train, y_train=rng.integers(0, 10, 60), x_test=x_test, y_test=rng.integers(0, 10, 20))
    with pytest.raises(DataError, match=rf"data.path={path}: x_test\[4, 2, 7\] is inf \(1 non-finite value in "
                                        r"x_test\); the inputs must be finite numbers"):
        keras_dataset("mnist", str(path), [8, 8], 10, batch_size=10, seed=0, normalization="none")
    x_train[17, 3, 5] = np.nan
    x_train[30] = np.nan
    np.savez(path, x_train=x_train, y_train=rng.integers(0, 10, 60), x_test=x_test, y_test=rng.integers(0, 10, 20))
    with pytest.raises(DataError, match=r"x_train\[17, 3, 5\] is nan \(65 non-finite values in x_train\)"):
        keras_dataset("mnist", str(path), [8, 8], 10, batch_size=10, seed=0, normalization="none")
    data = keras_dataset("mnist", str(path), [8, 8], 10, batch_size=10, seed=0, normalization="none",
                         check_finite=False)
    assert data.num_train == 54


def write_float_tfrecords(folder, files: int = 3, per_file: int = 50, nan_at: tuple[int, int] | None = None):
    """`files` shards of `per_file` 8x8 float records; NaN planted at (file, record), position [2, 3]."""
    rng = np.random.default_rng(0)
    for f in range(files):
        with tf.io.TFRecordWriter(str(folder / f"train-{f}.tfrecord")) as writer:
            for r in range(per_file):
                values = rng.random(64).astype("float32")
                if (f, r) == nan_at:
                    values[2 * 8 + 3] = np.nan
                feature = {"inputs": tf.train.Feature(float_list=tf.train.FloatList(value=values)),
                           "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[r % 10]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(folder / "train-*.tfrecord")


def test_tfrecord_nan_is_named_by_file_and_record_within_the_checked_batches(tmp_path):
    pattern = write_float_tfrecords(tmp_path, nan_at=(1, 7))  # record 57 in file order
    with pytest.raises(DataError, match=rf"data.train_files: record 7 of {tmp_path}/train-1.tfrecord has nan in its "
                                        r"inputs at \[2, 3\]; the inputs must be finite numbers"):
        tfrecord(pattern, None, [8, 8], 10, batch_size=16, seed=0)  # default: 10 batches of 16 = 160 records
    # opt-in depth: the first 3 batches (48 records) do not reach record 57; off checks nothing
    assert tfrecord(pattern, None, [8, 8], 10, batch_size=16, seed=0, check_finite_batches=3).spec.input_shape == (8, 8)
    assert tfrecord(pattern, None, [8, 8], 10, batch_size=16, seed=0, check_finite=False).spec.input_shape == (8, 8)
    with pytest.raises(ConfigError, match=r"data.check_finite_batches=0 is out of range: expected a positive integer, "
                                          r"or null \(every batch\)"):
        tfrecord(pattern, None, [8, 8], 10, batch_size=16, seed=0, check_finite_batches=0)


def test_a_streamed_split_with_nan_is_named_by_source_split_and_example():
    x = np.random.default_rng(0).random((100, 4)).astype("float32")
    x[42, 1] = np.nan
    clean = tf.data.Dataset.from_tensor_slices((x[:40], np.zeros(40, "int64")))
    test = tf.data.Dataset.from_tensor_slices((x, np.zeros(100, "int64")))
    splits = {"train": clean, "validation": clean, "test": test}
    counts = {"train": 40, "validation": 40, "test": 100}
    with pytest.raises(DataError, match=r"data=tfds data.name=floats: example 42 of the test split \(in reading "
                                        r"order\) has nan in its inputs at \[1\]"):
        streamed_datasets(dict(splits), dict(counts), lambda a, b: (a, b), DataSpec((4,), 2),
                          PipelineOptions(batch_size=8), check_finite_as="data=tfds data.name=floats")
    data = streamed_datasets(dict(splits), dict(counts), lambda a, b: (a, b), DataSpec((4,), 2),
                             PipelineOptions(batch_size=8, check_finite_batches=5), check_finite_as="data=tfds")
    assert data.num_test == 100  # 5 batches of 8: example 42 lies beyond what was checked


# --- TFRecord counts without a pass -----------------------------------------------------------------

def test_to_tfrecord_writes_the_index_its_readers_count_from(digits_tfrecords):
    index = json.loads((digits_tfrecords / record_index.INDEX_FILE).read_text())["files"]
    assert sum(entry["records"] for name, entry in index.items() if name.startswith("train-")) == 1293
    entry = index["test-00001-of-00003.tfrecord"]
    assert entry == {"records": 120, "bytes": (digits_tfrecords / "test-00001-of-00003.tfrecord").stat().st_size}
    files = sorted(str(p) for p in digits_tfrecords.glob("*.tfrecord"))
    assert record_index.known_counts(files) == {f: index[os.path.basename(f)]["records"] for f in files}


def counted_in_the_background(files: list[str], timeout: float = 60) -> dict[str, int]:
    """What the count cache holds for `files` once the run's background count has kept them all."""
    deadline = time.monotonic() + timeout
    while len(known := record_index.known_counts(files)) < len(files):
        assert time.monotonic() < deadline, "the background count did not finish"
        time.sleep(0.1)
    return known


def test_files_without_an_index_are_not_counted_before_training_and_the_next_start_knows_them(digits_tfrecords,
                                                                                               tmp_path, caplog):
    """No pass over the files before the first step: the first start's epochs are of unknown length while a
    thread counts the files; the next start reads the counts from the cache (the same split either way)."""
    caplog.set_level(logging.INFO, logger="tfx_hydra")
    for shard in digits_tfrecords.glob("train-*.tfrecord"):
        shutil.copy(shard, tmp_path / shard.name)  # a user's own files: no index beside them
    pattern = str(tmp_path / "train-*.tfrecord")
    files = sorted(str(p) for p in tmp_path.glob("train-*.tfrecord"))
    first = tfrecord(pattern, None, [8, 8], 10, batch_size=32, seed=0, raw_scale=1 / 16)
    assert "data: 3 TFRecord files without an index: the epochs' length is learned as they are read" in caplog.text
    assert (first.num_train, first.num_validation, first.num_test) == (None, None, None)
    read = {name: len(labels(getattr(first, name))) for name in ("train", "validation", "test")}
    assert counted_in_the_background(files) == {f: 431 for f in files}  # counted while the first start read
    caplog.clear()
    again = tfrecord(pattern, None, [8, 8], 10, batch_size=32, seed=0, raw_scale=1 / 16)
    assert "without an index" not in caplog.text  # read from the cache: no pass over the files
    assert {"train": again.num_train, "validation": again.num_validation, "test": again.num_test} == read
    assert {name: again.reads[name].digest for name in read} == {name: first.reads[name].digest for name in read}
    shard = tmp_path / "train-00000-of-00003.tfrecord"
    shard.write_bytes(shard.read_bytes() * 2)  # written again: its size and time changed, so it is counted again
    grown = tfrecord(pattern, None, [8, 8], 10, batch_size=32, seed=0, raw_scale=1 / 16)
    assert "data: 1 TFRecord file without an index" in caplog.text and grown.num_train is None
    assert counted_in_the_background(files)[str(shard)] == 862


def test_an_index_entry_edited_into_nonsense_is_no_entry_the_file_is_counted(digits_tfrecords, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tfx_hydra")
    for shard in digits_tfrecords.glob("train-*.tfrecord"):
        shutil.copy(shard, tmp_path / shard.name)
    files = sorted(str(p) for p in tmp_path.glob("train-*.tfrecord"))
    sizes = {os.path.basename(f): os.path.getsize(f) for f in files}
    (tmp_path / record_index.INDEX_FILE).write_text(json.dumps({"format": 1, "files": {
        "train-00000-of-00003.tfrecord": {"records": "many", "bytes": sizes["train-00000-of-00003.tfrecord"]},
        "train-00001-of-00003.tfrecord": "431",
        "train-00002-of-00003.tfrecord": {"records": 431, "bytes": sizes["train-00002-of-00003.tfrecord"]}}}))
    tfrecord(str(tmp_path / "train-*.tfrecord"), None, [8, 8], 10, batch_size=32, seed=0, raw_scale=1 / 16)
    assert "data: 2 TFRecord files without an index" in caplog.text  # the third read from its good entry
    assert counted_in_the_background(files) == {f: 431 for f in files}
