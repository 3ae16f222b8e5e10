"""Real-sized data, proven with small budgets set by config: what a run does when its decoded data does not
fit the memory it is given, met through the command a user types."""

from __future__ import annotations

import pytest

from tests.e2e.test_bad_input import assert_only_the_message
from tests.helpers import mlflow_client, mlflow_runs
from tests.helpers.in_process import run_cli_in_process
from tests.unit.test_data_sources import write_images

pytestmark = pytest.mark.slow


@pytest.fixture
def pets(tmp_path):
    return write_images(tmp_path / "pets", {"cats": [(12, 10)] * 30, "dogs": [(10, 12)] * 30})


def image_run(pets, *overrides):
    return ["data=image_folder", f"data.directory={pets}", "data.input_shape=[8,8,3]", "data.num_classes=2",
            "trainer.batch_size=8", "trainer.epochs=2", "export=none", *overrides]


def test_a_split_larger_than_the_budget_is_cached_on_disk_and_the_run_says_so(pets, tmp_path, capfd):
    scratch = tmp_path / "scratch"
    on_disk = [arg.replace("export=none", "export=savedmodel")
               for arg in image_run(pets, "data.cache_budget=4KiB", f"data.cache_dir={scratch}")]
    done = run_cli_in_process(on_disk, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # the first read of each split's cache file makes TensorFlow warn that it was not read whole, though it was
    # (the file is complete): in the job log, not on the terminal (descriptor 2, which capfd holds)
    assert "did not fully read the dataset being cached" not in capfd.readouterr().err
    (trained,) = mlflow_runs(tmp_path)
    scored = run_cli_in_process([*on_disk, "mode=evaluate", f"export.source=runs:/{trained.info.run_id}"],
                                cwd=tmp_path)  # its test split read once, from a cache on disk too
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "did not fully read the dataset being cached" not in capfd.readouterr().err
    (line,) = [line for line in done.stdout.splitlines() if "data: image_folder" in line]
    assert f"; cache: disk under {scratch}, 11.7 KiB decoded does not fit 4.0 KiB of memory " \
           "(data.cache_budget=4KiB)" in line, line
    assert list(scratch.iterdir()) == []  # the run's scratch cache went with it
    assert trained.info.status == "FINISHED" and "test_accuracy" in trained.data.metrics  # trained and tested


def test_an_explicit_memory_cache_that_cannot_fit_fails_before_training_and_loses_nothing(pets, tmp_path):
    done = run_cli_in_process(image_run(pets, "data.cache=memory", "data.cache_budget=4KiB"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("DataError: data.cache=memory: the decoded splits take 11.7 KiB (train 8.4 KiB) "
                                  "and the shuffle buffer 1000 B, more than the budget of 4.0 KiB "
                                  "(data.cache_budget=4KiB)."), done.stderr[-3000:]
    assert "Fix: data.cache=auto (on disk when memory cannot hold it)" in done.stderr
    assert_only_the_message(done.stderr)
    assert "epoch 1/2" not in done.stdout  # not a step trained
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("DataError: data.cache=memory")


def test_tfrecords_train_with_no_count_read_up_front_and_a_corrupt_record_fails_in_the_epoch_named(tmp_path):
    """A shard whose last record rotted after to_tfrecord wrote it (same size: its index still holds): the run
    starts without reading the files -- so nothing fails before training -- and the epoch that reaches the record
    fails the run, naming the file and the record, with nothing left RUNNING."""
    from tfx_hydra.data.to_tfrecord import main as to_tfrecord

    assert to_tfrecord([str(tmp_path / "tfr"), "--shards", "3", "data=digits"]) == 0
    rotted = tmp_path / "tfr" / "train-00002-of-00003.tfrecord"
    data = bytearray(rotted.read_bytes())
    data[-10] ^= 0xFF  # inside the last record's payload: its checksum no longer matches
    rotted.write_bytes(bytes(data))
    done = run_cli_in_process(["data=tfrecord", f"data.train_files={tmp_path / 'tfr' / 'train-*.tfrecord'}",
                               f"data.test_files={tmp_path / 'tfr' / 'test-*.tfrecord'}", "data.input_shape=[8,8]",
                               "data.num_classes=10", "data.raw_scale=0.0625", "trainer.epochs=2", "export=none"],
                              cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "counted the records" not in done.stdout + done.stderr  # the index's counts: no pass before training
    assert "data: tfrecord, " in done.stdout and "model: mlp" in done.stdout  # the data step passed: training began
    assert done.stderr.startswith(f"DataError: the TFRecord file {rotted} is corrupt or truncated after record 430 "
                                  "("), done.stderr[-3000:]
    assert "the run's backup is kept, so the same command resumes" in done.stderr
    assert_only_the_message(done.stderr)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("DataError: the TFRecord file")


def test_a_table_larger_than_the_budget_streams_from_its_file_and_trains(tmp_path):
    """data=csv with a budget smaller than the table: read by tf.data as it trains, not into memory, split and
    standardized without a pass over it, and learnt; the SavedModel answers the file's raw rows (the stream's
    standardization is in front of the model, as an in-memory table's is)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 2.0, size=(400, 3)).round(3)
    path = tmp_path / "table.csv"
    path.write_text("a,b,c,label\n" + "".join(f"{a},{b},{c},{'up' if a > 5 else 'down'}\n" for a, b, c in x))
    done = run_cli_in_process(["data=csv", f"data.path={path}", "data.input_shape=[3]", "data.num_classes=2",
                               "data.cache_budget=2KiB", "trainer.batch_size=16", "trainer.epochs=6",
                               "optimizer.learning_rate=0.01", "export=savedmodel",
                               "export.savedmodel.warmup_requests=0", "export.mlflow_model=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if "data: csv, " in line]
    assert "; the table streams from its file: 6.2 KiB as float32 is more than 2.0 KiB (data.cache_budget=2KiB); " \
           "figures and classes from its first 400 rows" in line, line
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED" and run.data.metrics["test_accuracy"] > 0.85  # learnt from the stream
    import tensorflow as tf

    serve = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    answers = serve(inputs=tf.constant(x, tf.float32))  # the rows as the file holds them, unstandardized
    classes = np.asarray(answers["probabilities"]).argmax(axis=1)  # down = 0, up = 1: the names sorted
    assert (classes == (x[:, 0] > 5)).mean() > 0.85


def test_a_long_epoch_is_followed_mid_epoch_in_the_log_and_in_mlflow(tmp_path):
    """trainer.log_every (here every 10 steps; 1min by default) where no bar shows (this output is not a
    terminal): a line with the running metrics and the time left, and the running metrics in MLflow at the
    global step -- a curve inside each epoch."""
    done = run_cli_in_process(["trainer.epochs=2", "trainer.log_every=10", "trainer.steps_per_execution=8",
                               "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    midway = [line for line in done.stdout.splitlines() if "  batch " in line]
    # Keras ends a batch once per 8-step call: reports at the calls ending at steps 16 and 32 of the 41
    assert [line.split("  ")[0:2] for line in midway] == [["epoch 1/2", "batch 16/41"], ["epoch 1/2", "batch 32/41"],
                                                          ["epoch 2/2", "batch 16/41"], ["epoch 2/2", "batch 32/41"]]
    assert all(" ex/s  left: epoch " in line and ", run " in line for line in midway), midway
    assert "  loss " in midway[0] and "  accuracy " in midway[0]
    (run,) = mlflow_runs(tmp_path)
    from tests.helpers import mlflow_client

    history = mlflow_client(tmp_path).get_metric_history(run.info.run_id, "running_loss")
    assert [m.step for m in history] == [16, 32, 57, 73]  # the optimizer's steps: epoch 2 began at 41
    assert history[0].value > history[-1].value  # the digits are learnt
    assert [m.step for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/loss")] == [0, 1]


SLOW_PIPELINE = '''
import time

import numpy as np
import tensorflow as tf

from tfx_hydra.data import from_pipelines


def slowly(x, y):  # a pipeline that cannot keep up: 2 ms per example, one at a time
    x = tf.py_function(lambda v: (time.sleep(0.002), v)[1], [x], tf.float32)
    return tf.ensure_shape(x, [8]), y


def stream(batch_size, seed, **kwargs):
    x = np.random.default_rng(0).random((1600, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int64")
    train, validation, test = (tf.data.Dataset.from_tensor_slices((x[a:b], y[a:b]))
                               for a, b in ((0, 1280), (1280, 1440), (1440, 1600)))
    return from_pipelines(train.map(slowly), validation, test, input_shape=(8,), num_classes=2,
                          batch_size=batch_size, seed=seed, cache=False, digest=False)
'''


def test_an_input_bound_epoch_says_so_with_the_levers_and_logs_its_wait(tmp_path, monkeypatch):
    """A user's pipeline that waits 2 ms per example (fault injection: a sleep stands for a slow decode) feeds a
    step of about a millisecond per batch of 32: most of the epoch is spent waiting for data, and the run says so."""
    (tmp_path / "slowdata.py").write_text(SLOW_PIPELINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    done = run_cli_in_process(["data._target_=slowdata.stream", "data.num_classes=2", "data.input_shape=[8]",
                               "trainer.epochs=2", "trainer.batch_size=32",
                               "trainer.steps_per_execution=1", "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2 and all("  input-bound: " in line and "% waiting for data" in line for line in epochs)
    (row,) = [line for line in done.stdout.splitlines() if "input-bound" in line and "│" in line]
    assert "of epoch" in row and "data.cache=auto" in row and "data.map_parallelism=auto" in row
    (run,) = mlflow_runs(tmp_path)
    waits = [m.value for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "input_wait")]
    assert len(waits) == 2 and all(0.5 < wait <= 1 for wait in waits)
    assert run.data.tags["input_bound"].startswith(f"{max(waits):.0%} of epoch ")
    assert "data.service=grpc://host:port (the decoding on tf.data service workers" in run.data.tags["input_bound"]


LATE_BAD_LABEL = '''
import numpy as np
import tensorflow as tf

from tfx_hydra.data import from_pipelines


def stream(batch_size, seed, **kwargs):  # 3,200 examples; the one at 3,000 says class 7 of 2
    x = np.random.default_rng(0).random((3200, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int64")
    y[3000] = 7
    train = tf.data.Dataset.from_tensor_slices((x, y))
    small = tf.data.Dataset.from_tensor_slices((x[:200], (x[:200].sum(axis=1) > 4).astype("int64")))
    return from_pipelines(train, small, small, input_shape=(8,), num_classes=2, batch_size=batch_size, seed=seed,
                          name="late", shuffle_buffer=0)
'''


def test_a_class_past_num_classes_after_the_sample_fails_the_run_named_with_nothing_left_running(tmp_path,
                                                                                                    monkeypatch):
    """A user's from_pipelines source: only its first 2,048 examples are checked before training, so a bad label
    later on is met by the loss mid-epoch, and the run ends with the source's DataError, not TensorFlow's."""
    (tmp_path / "latedata.py").write_text(LATE_BAD_LABEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    done = run_cli_in_process(["data._target_=latedata.stream", "data.num_classes=2", "data.input_shape=[8]",
                               "trainer.epochs=1", "export=none"], cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:]
    assert done.stderr.startswith("DataError: late: a label of 7 after the first 2,048 examples (which were "
                                  "checked) is not a class of num_classes=2."), done.stderr[-3000:]
    assert_only_the_message(done.stderr)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("DataError: late: a label of 7")
