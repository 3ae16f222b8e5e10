"""Every user mistake the CLI can meet, in one table: one readable message that names the key and
the fix, exit != 0, no traceback, and no run left FINISHED or RUNNING in the MLflow store.
README.md's troubleshooting section lists these cases with their messages."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import free_ports, mlflow_runs, run_cli
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow


CASES = {
    "unknown data option": (["data=imagenet"], ["ConfigError: data=imagenet is not an option of 'data'; its "
                                                 "options are: cifar10,", "digits", "mnist", "synthetic",
                                                 "Fix: data=image_folder (the closest option)"]),
    "unknown hardware option": (["hardware=tpu9000"], ["hardware=tpu9000 is not an option of 'hardware'", "a100",
                                                       "auto",
                                                           "cpu"]),
    "epochs not a number": (["trainer.epochs=abc"], ["trainer.epochs got 'abc'", "expected an integer",
                                                     "Fix: trainer.epochs=5"]),
    "negative epochs": (["trainer.epochs=-1"], ["trainer.epochs=-1 is out of range", "Fix: trainer.epochs=5"]),
    "missing data.path": (["data=mnist", "data.path=/nonexistent/mnist.npz"],
                          ["data.path=/nonexistent/mnist.npz does not exist"]),
    "a home folder as ~ after '='": (["data=mnist", "data.path=~/mnist.npz"], [
        "ConfigError: data.path=~/mnist.npz: the shell does not expand ~ after '=', and Hydra's override syntax does "
        "not take it unquoted.", "Fix: data.path=$HOME/mnist.npz"]),
    "strict hardware mismatch": (["hardware=a100", "hardware.strict=true"],
                                 ["HardwareMismatch: hardware=a100 expects 1 GPU matching 'A100' with at least 39 GiB; "
                                  "found no GPU",
                                  "Fix: use hardware=auto"]),
    "unreachable tracking server": ([f"tracking.uri=http://127.0.0.1:{free_ports(1)[0]}"],
                                    ["TrackingError: tracking.uri=http://127.0.0.1:", "is unreachable",
                                     "tracking=none"]),
    "unknown export option": (["export=coreml"], ["export=coreml is not an option of 'export'", "tflite", "onnx",
                                                   "tfjs"]),
    # In a list Hydra names the bad option but does not list the others; tfx_hydra lists them.
    "unknown export in a list": (["export=[savedmodel,coreml]"], ["export=coreml is not an option of 'export'; its "
                                                                  "options are: keras, none, onnx, savedmodel"]),
    "a group set as one value": (["trainer.early_stopping=null"], [
        "ConfigError: trainer.early_stopping is a group of settings (enabled, monitor, patience, mode, "
        "restore_best_weights), not one value", "Fix: trainer.early_stopping.enabled=false to turn it off"]),
    "misspelt key": (["trainer.epoch=3"], ["ConfigError: trainer.epoch is not a key of 'trainer' (its keys: epochs,",
                                           "Fix: trainer.epochs=3"]),
    # wrong types and ranges, caught before TensorFlow is imported
    "batch size zero": (["trainer.batch_size=0"], ["trainer.batch_size=0 is out of range", "Fix: trainer.batch_size="]),
    "batch size not a number": (["trainer.batch_size=big"], ["trainer.batch_size=big is not a positive integer or auto",
                                                             "Fix: trainer.batch_size=32"]),
    "fractional epochs": (["trainer.epochs=2.5"], ["trainer.epochs got 2.5, which has the wrong type",
                                                   "Fix: trainer.epochs=5"]),
    "jit_compile not a choice": (["trainer.jit_compile=maybe"], ["trainer.jit_compile=maybe is not one of: auto, true, "
                                                                  "false", "Fix: trainer.jit_compile=auto"]),
    "zero steps per execution": (["trainer.steps_per_execution=0"], ["trainer.steps_per_execution=0 is out of range",
                                                                     "Fix: trainer.steps_per_execution=1"]),
    "zero accumulation steps": (["trainer.grad_accum_steps=0"], ["trainer.grad_accum_steps=0 is out of range",
                                                                 "Fix: trainer.grad_accum_steps=1"]),
    "misspelt trainer key": (["+trainer.epoch=3"], ["unknown key 'trainer.epoch'", "Fix: check the spelling"]),
    "negative seed": (["seed=-1"], ["seed=-1 is out of range: expected 0 or more", "Fix: seed=42"]),
    "unknown mode": (["mode=predict"], ["mode=predict is not one of", "train", "evaluate"]),
    "sweep direction": (["sweep.direction=up"], ["sweep.direction=up is not one of: maximize, minimize"]),
    "sweep metric the run never logs": (["sweep.metric=f1"], ["sweep.metric=f1 is not a metric this run logs",
                                                              "val_accuracy"]),
    "zero tracking timeout": (["tracking.connect_timeout=0"], ["tracking.connect_timeout=0.0 is out of range: "
                                                               "expected a number > 0 (seconds)",
                                                               "Fix: tracking.connect_timeout=5"]),
    "store folder missing": (["tracking.uri=sqlite:////nonexistent/dir/mlflow.db"],
                             ["tracking.uri=sqlite:////nonexistent/dir/mlflow.db: the folder /nonexistent/dir does not "
                              "exist", "Fix: point tracking.uri at a writable folder"]),
    "memory growth not a bool": (["hardware.memory_growth=maybe"], ["hardware.memory_growth got 'maybe'"]),
    # unknown options in every group
    "unknown precision": (["precision=fp8"], ["precision=fp8 is not an option of 'precision'", "bf16", "mixed"]),
    "unknown strategy": (["strategy=horovod"], ["strategy=horovod is not an option of 'strategy'", "mirrored",
                                                             "multi_worker"]),
    "multi-worker on Ray without Ray's launcher": (["strategy=multi_worker", "strategy.cluster=ray"], [
        "ConfigError: strategy.cluster=ray trains on Ray Train workers, which hydra/launcher=ray starts for the job",
        "Fix: launch the job through Ray: python -m tfx_hydra -m hydra/launcher=ray strategy=multi_worker "
        "strategy.cluster=ray strategy.workers=2"]),
    "unknown model": (["model=transformer"], ["model=transformer is not an option of 'model'", "cnn", "mlp"]),
    "unknown experiment": (["experiment=nope"], ["experiment=nope is not an option of 'experiment'", "seed_mnist_mlp"]),
    # data and models that need files, checked before TensorFlow is imported
    "tfrecord without its files": (["data=tfrecord"], ["data.input_shape, data.num_classes, data.train_files have no "
                                                       "value (tfrecord needs them)", "Fix: data.input_shape=..."]),
    "tfrecord glob matching nothing": (["data=tfrecord", "data.train_files=/nonexistent/train-*.tfrecord",
                                        "data.input_shape=[8,8]", "data.num_classes=10"],
                                       ["DataError: data.train_files: no file matches /nonexistent/train-*.tfrecord",
                                        "python -m tfx_hydra.data.to_tfrecord"]),
    "missing image folder": (["data=image_folder", "data.directory=/nonexistent/pets", "data.num_classes=2"],
                             ["DataError: data.directory=/nonexistent/pets does not exist"]),
    "hub model without a handle": (["model=hub"], ["model.handle has no value (hub needs it)"]),
    "negative fine-tuning epochs": (["trainer.finetune_epochs=-2"], [
        "trainer.finetune_epochs=-2 is out of range: expected 0 (off) or more", "Fix: trainer.finetune_epochs=3"]),
    "fine-tuning a model without a backbone": (["trainer.finetune_epochs=2"], [
        "trainer.finetune_epochs needs a model with a pretrained backbone; mlp has none", "Fix: model=keras_app"]),
    "unknown launcher": (["hydra/launcher=nope"], ["hydra/launcher=nope is not an option of 'hydra/launcher'", "joblib",
                                                         "parallel"]),
    "unknown search": (["hparams_search=grid"], ["hparams_search=grid is not an option of 'hparams_search'", "optuna"]),
    "a search without -m": (["hparams_search=optuna"], [
        "ConfigError: hparams_search=optuna searches only in a multirun (-m): without it this command would train "
        "once", "Fix: python -m tfx_hydra -m trainer.epochs=1 export=none hparams_search=optuna"]),
    # evaluate mode
    "evaluate without a model": (["mode=evaluate"], ["mode=evaluate needs the model to evaluate",
                                                     "Fix: export.source="]),
    # impossible hardware requests and conflicting options
    "a GPU index that does not exist": (["hardware.gpus=[3]"], ["hardware.gpus=[3]", "Fix: hardware=cpu"]),
    "mirrored over one device under strict hardware": (["strategy=mirrored", "hardware.strict=true"], [
        "HardwareMismatch: strategy=mirrored has one device to mirror over", "Fix: strategy=auto"]),
    # values that trained on nonsense, or failed in a library's traceback, before preflight checked them
    "negative learning rate": (["optimizer.learning_rate=-0.01"], [
        "ConfigError: optimizer.learning_rate=-0.01 is out of range: expected a number > 0.",
        "Fix: optimizer.learning_rate=0.001"]),
    "learning rate not a number": (["optimizer.learning_rate=fast"], ["optimizer.learning_rate=fast is not a number"]),
    "momentum above one": (["optimizer=sgd", "optimizer.momentum=1.5"], [
        "optimizer.momentum=1.5 is out of range: expected a number [0, 1].", "Fix: optimizer.momentum=0.9"]),
    "early stopping on a metric never logged": (["trainer.early_stopping.enabled=true",
                                                 "trainer.early_stopping.monitor=val_acc"], [
        "trainer.early_stopping.monitor=val_acc is not a metric logged every epoch",
        "Fix: one of: loss, accuracy, val_loss, val_accuracy"]),
    "a loss for other targets": (["trainer.loss=mse"], [
        "trainer.loss=mse does not fit task=classification: it expects targets shaped like the model's outputs",
        "Fix: trainer.loss=sparse_categorical_crossentropy"]),
    "tracking uri that is a bare path": (["tracking.uri=mlflow.db"], [
        "tracking.uri=mlflow.db is not a store URI MLflow takes", "Fix: tracking.uri=sqlite:///mlflow.db"]),
    "cache file in a missing folder": (["data.cache=/nonexistent/dir/cache"], [
        "ConfigError: data.cache=/nonexistent/dir/cache cannot be written: /nonexistent/dir does not exist."]),
    "export switch that is not one": (["export.strict=yes"], ["export.strict=yes: expected true or false"]),
    "export value checked before training": (["export=[tflite]", "export.tflite.quantization=int4",
                                              "export.strict=true"], [
        "ConfigError: export.tflite.quantization=int4 is not one of: none, float16, dynamic_range, int8."]),
    "export dir under a file": (["export=[savedmodel]", "export.savedmodel.export_dir=/etc/hostname/export"], [
        "export.savedmodel.export_dir=/etc/hostname/export cannot be written: /etc/hostname is a file."]),
    "a data option out of range, before TensorFlow": (["data.check_finite_batches=0"], [
        "ConfigError: data.check_finite_batches=0 is out of range: expected a positive integer, or null (every batch).",
        "Fix: data.check_finite_batches=10"]),
    "a fine-tuning metric without fine-tuning": (["sweep.metric=finetune_seconds"], [
        "sweep.metric=finetune_seconds is not a metric this run logs"]),
    # a model and data that cannot meet, said before anything is built (it failed in the first step's traceback)
    "text into a numeric model": (["data=text_table", "data.path=/nonexistent/tickets.csv", "data.num_classes=3"], [
        "ConfigError: data=text_table gives raw text, but model=mlp takes numbers.",
        "Fix: model=text_baseline (or model=hub_text), or experiment=text_classification"]),
    "numbers into a text model": (["model=text_baseline"], [
        "ConfigError: model=text_baseline takes raw text, but data=digits gives numbers.",
        "Fix: data=text_folder or data=text_table (raw text)"]),
    "k-fold on a streamed source": (["cv=kfold", "data=tfrecord", "data.train_files=/nonexistent/*.tfrecord",
                                     "data.input_shape=[8]", "data.num_classes=2"], [
        "ConfigError: cv=kfold cuts folds from data held in memory, and data=tfrecord streams its examples",
        "Fix: a source read into memory (digits, synthetic, keras (mnist, ..., a .npz), csv, text_folder, "
        "text_table), or cv=none"]),
    # tf.data service (data.service): an address without its scheme; a debugging limit the workers cannot keep
    "a data service address without grpc://": (["data.service=localhost:5050"], [
        "ConfigError: data.service='localhost:5050': expected off, local, or a dispatcher's address grpc://host:port.",
        "Fix: data.service=local"]),
    "a data service with data.limit": (["data.service=local", "data.limit=100"], [
        "ConfigError: data.limit with data.service=local: each tf.data service worker would take its own first "
        "examples", "Fix: data.limit=null, or data.service=off"]),
}
BEFORE_ANY_RUN = {"text into a numeric model", "numbers into a text model", "k-fold on a streamed source",
                  "a group set as one value", "a data service address without grpc://",
                  "a data service with data.limit"}


# The test process splits its CPU into two logical devices (tests/conftest.py), so in it mirrored has two to
# mirror over: this case runs in a fresh process, as a user's command does. Every other case runs in process.
IN_A_FRESH_PROCESS = {"mirrored over one device under strict hardware"}
ERROR_LINE = re.compile(r"^(\w+Error|HardwareMismatch|DiskFull): \S")


def assert_only_the_message(stderr: str) -> None:
    """What a user error prints: its message (first line: the error's kind) and its Fix, nothing around it."""
    lines = stderr.strip().splitlines()
    assert ERROR_LINE.match(lines[0]), stderr[-2000:]
    assert sum(bool(ERROR_LINE.match(line)) for line in lines) == 1, stderr[-2000:]
    for noise in ("Traceback", "Error executing job", "HYDRA_FULL_ERROR", "Config search path", "absl", "I0000",
                  "E0000", "W0000", "full_key:", "object_type="):
        assert noise not in stderr, stderr[-2000:]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gives_one_clear_message(name, tmp_path):
    overrides, expected = CASES[name]
    command = run_cli if name in IN_A_FRESH_PROCESS else run_cli_in_process
    done = command(["trainer.epochs=1", "export=none", *overrides], cwd=tmp_path)  # the case's own values win
    assert done.returncode != 0
    for text in expected:
        assert text in done.stderr, done.stderr[-2000:]
    assert_only_the_message(done.stderr)
    assert [r.info.status for r in mlflow_runs(tmp_path) if r.info.status in ("FINISHED", "RUNNING")] == []
    if name in BEFORE_ANY_RUN:
        assert mlflow_runs(tmp_path) == []  # said in preflight: no run was started


def test_labels_that_are_numbers_to_predict_are_said_before_any_run_with_regression_as_the_fix(tmp_path):
    """scikit-learn's diabetes table with its target as the label, left at task=classification: 214 distinct
    values (the old message said data.num_classes=214)."""
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    table = tmp_path / "diabetes.csv"
    table.write_text(",".join([*bunch.feature_names, "target"]) + "\n" + "".join(
        ",".join(f"{v:g}" for v in [*x, t]) + "\n" for x, t in zip(bunch.data, bunch.target)))
    done = run_cli_in_process(["data=csv", f"data.path={table}", "data.label_column=target", "data.input_shape=[10]",
                               "data.num_classes=3"], cwd=tmp_path)
    assert done.returncode == 1
    assert (f"ConfigError: task=classification, but data.label_column=target of {table} holds numbers to predict, "
            "not classes: 214 distinct values over [25, 346] in its first 442 rows.") in done.stderr, done.stderr
    assert "Fix: task=regression (numeric targets)" in done.stderr
    assert_only_the_message(done.stderr)
    assert mlflow_runs(tmp_path) == []


def test_a_k_fold_sweep_of_a_streamed_source_is_refused_before_its_parent_or_folder_exists(tmp_path):
    done = run_cli_in_process(["cv=kfold", "cv.folds=3", "data=tfrecord", "data.train_files=/nonexistent/*.tfrecord",
                               "trainer.epochs=1"], cwd=tmp_path, multirun=True)
    assert done.returncode != 0
    assert "cv=kfold cuts folds from data held in memory, and data=tfrecord streams its examples" in done.stderr
    assert "text_folder" in done.stderr and "Traceback" not in done.stderr
    assert mlflow_runs(tmp_path) == [] and not (tmp_path / "multirun").exists()


def test_a_corrupt_npz_fails_the_started_run(tmp_path):
    bad = tmp_path / "mnist.npz"
    bad.write_bytes(b"PK\x03\x04 truncated zip")
    done = run_cli_in_process(["data=mnist", f"data.path={bad}"], cwd=tmp_path)
    assert done.returncode == 1
    assert f"DataError: data.path={bad} is not a valid .npz file" in done.stderr
    assert "Traceback" not in done.stderr
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith("DataError: data.path=")


def test_a_csv_with_nan_cells_fails_before_training_with_the_cell_named(tmp_path):
    table = tmp_path / "n.csv"
    table.write_text("a,b,c,label\n" + "".join(f"{i % 7},{'nan' if i == 5 else i % 3},{i % 5},{i % 2}\n"
                                                for i in range(64)))
    done = run_cli_in_process(["data=csv", f"data.path={table}", "data.input_shape=[3]", "data.num_classes=2",
                    "data.normalization=none", "trainer.epochs=2", "export=none"], cwd=tmp_path)
    assert done.returncode == 1
    assert f"DataError: {table}, row 7, column b: nan is not a finite number; the inputs must be finite " \
           "numbers." in done.stderr
    assert "Fix: clean the data (drop or fill those values), or data.check_finite=false" in done.stderr
    assert "Traceback" not in done.stderr and "epoch 1/" not in done.stdout  # no epoch trained
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith(f"DataError: {table}, row 7")


@pytest.mark.fresh_store  # the store in the launch directory is the file under test
@pytest.mark.parametrize("file, contents, args, message", [
    ("mlflow.db", b"these are notes, not a database\n", [],
     "TrackingError: tracking.uri: {path} is not an SQLite database (file is not a database), so it cannot be the "
     "MLflow store; nothing was written into it."),
    ("mlflow.db", "someone else's tables", [],
     "TrackingError: tracking.uri: {path} is an SQLite database, but not an MLflow store (it has no 'experiments' "
     "table); nothing was written into it."),
    ("optuna.db", b"\x00\x01 a damaged study\n", ["-m", "hparams_search=optuna", "hparams_search.n_trials=1"],
     "ConfigError: hparams_search.storage: {path} is not an SQLite database (file is not a database), so it cannot "
     "be the Optuna study; nothing was written into it."),
])
def test_a_store_or_study_file_that_is_not_one_is_named_and_left_untouched(tmp_path, file, contents, args, message):
    import sqlite3

    path = tmp_path / file
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE notes (text)")
    before = path.read_bytes()
    multirun = args[:1] == ["-m"]
    done = run_cli_in_process(["trainer.epochs=1", *args[1 if multirun else 0:]], cwd=tmp_path, multirun=multirun)
    assert done.returncode == 1
    assert message.format(path=path) in done.stderr, done.stderr[-2000:]
    assert f"Fix: move it aside (mv {path} {path}.broken)" in done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == before  # nothing written into it
    if file == "optuna.db" and (tmp_path / "mlflow.db").exists():  # the search's store: no parent left open
        assert [r.info.status for r in mlflow_runs(tmp_path) if r.info.status in ("FINISHED", "RUNNING")] == []


NOT_AN_IMAGE = b"\x89PNG\r\n\x1a\n but then nothing an image is made of"


def pets_folder(tmp_path) -> tuple[Path, list[str]]:
    """An image folder of 2 classes, 12 8x8 PNGs each, and the overrides that train on it."""
    from PIL import Image

    pets = tmp_path / "pets"
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (pets / name).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3)).astype("uint8")).save(pets / name / f"{i}.png")
    return pets, ["data=image_folder", f"data.directory={pets}", "data.input_shape=[8,8,3]", "data.num_classes=2",
                  "data.validation_split=0.2", "data.test_split=0.2", "trainer.batch_size=4", "trainer.epochs=1"]


def test_an_unreadable_image_among_good_ones_is_named_when_met_and_the_run_ends_failed(tmp_path):
    pets, overrides = pets_folder(tmp_path)
    broken = pets / "dogs" / "5.png"
    broken.write_bytes(NOT_AN_IMAGE)
    done = run_cli_in_process([*overrides, "export=none"], cwd=tmp_path)
    assert done.returncode == 1
    assert f"DataError: {broken} cannot be read as an image (" in done.stderr, done.stderr[-3000:]
    assert "Fix: replace or remove that file" in done.stderr
    assert_only_the_message(done.stderr)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith(f"DataError: {broken}")


def test_mode_evaluate_names_an_unreadable_image_of_the_test_split_and_its_run_ends_failed(tmp_path):
    """The export is evaluated on a folder whose images were since overwritten: the test split's read (not
    training's) meets a file that is no image, and says which, as training does."""
    pets, overrides = pets_folder(tmp_path)
    trained = run_cli_in_process([*overrides, "export=savedmodel"], cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    for image in pets.glob("*/*.png"):  # every file: whichever the test split holds, it is broken now
        image.write_bytes(NOT_AN_IMAGE)
    done = run_cli_in_process([*overrides, "mode=evaluate", f"export.source=runs:/{run.info.run_id}"], cwd=tmp_path)
    assert done.returncode == 1
    named = re.search(rf"DataError: ({re.escape(str(pets))}/(cats|dogs)/\d+\.png) cannot be read as an image \(",
                      done.stderr)
    assert named, done.stderr[-3000:]
    assert "Fix: replace or remove that file" in done.stderr
    assert_only_the_message(done.stderr)
    (evaluation,) = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("mode") == "evaluate"]
    assert evaluation.info.status == "FAILED"
    assert evaluation.data.tags["error"].startswith(f"DataError: {named.group(1)}")


@pytest.mark.fresh_store  # no store may appear: the mistake is said before anything is written
def test_a_sweep_of_ray_train_jobs_under_another_launcher_is_one_error_before_any_job(tmp_path):
    """strategy.cluster=ray needs Ray's launcher to start its workers: a sweep under the basic launcher says so, and
    which launcher to use, before its parent run or any job exists."""
    done = run_cli_in_process(["strategy=multi_worker", "strategy.cluster=ray", "optimizer.learning_rate=1e-3,3e-4",
                               "trainer.epochs=1"], cwd=tmp_path, multirun=True)
    assert done.returncode == 1
    assert ("ConfigError: strategy.cluster=ray trains each job on Ray Train workers, which only hydra/launcher=ray "
            "starts; this sweep's launcher is BasicLauncher.") in done.stderr, done.stderr
    assert "Fix: add hydra/launcher=ray" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no sweep folder


@pytest.mark.fresh_store  # no store may appear: the mistake is said before anything is written
def test_paths_that_cannot_be_created_are_one_error_naming_them_before_any_work(tmp_path):
    """A study's storage file and an init target under /proc (the kernel lets nothing be created there, even for
    root): one message naming the path and the fix, not a traceback from the first write."""
    search = run_cli_in_process(["hparams_search=optuna", "hparams_search.n_trials=1", "trainer.epochs=1",
                                 "hparams_search.storage=/proc/tfx_hydra_test/study.log"], cwd=tmp_path, multirun=True)
    assert search.returncode == 1
    assert ("ConfigError: hparams_search.storage=/proc/tfx_hydra_test/study.log cannot be written: "
            "/proc/tfx_hydra_test cannot be created (No such file or directory).") in search.stderr, search.stderr
    assert "Fix: hparams_search.storage=<a file in a folder you can write>" in search.stderr
    assert "Traceback" not in search.stderr and list(tmp_path.iterdir()) == []  # no store, no sweep folder
    init = run_cli_in_process(["init", "/proc/tfx_hydra_test/project"], cwd=tmp_path)
    assert init.returncode == 1
    assert ("ConfigError: tfx-hydra init /proc/tfx_hydra_test/project: the folder /proc/tfx_hydra_test cannot be "
            "created (No such file or directory).") in init.stderr, init.stderr
    assert "Traceback" not in init.stderr


def test_a_csv_excel_wrote_runs_with_nothing_but_its_path(tmp_path):
    """A byte-order mark and CRLF ends (Excel's "CSV UTF-8"): it reads, and what the file says (its feature columns,
    its classes) is not asked again."""
    rng = np.random.default_rng(0)
    rows = [f"{rng.uniform(30, 200):.1f},{i % 5 + 1},{['cheap', 'dear'][i % 2]}" for i in range(200)]
    (tmp_path / "bom.csv").write_bytes(("\ufeffsize_m2,rooms,label\r\n" + "\r\n".join(rows) + "\r\n").encode())
    done = run_cli_in_process(["data=csv", "data.path=bom.csv", "trainer.epochs=1", "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "inputs (2,) (read from the file), 2 classes (read from the file)" in done.stdout
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["data.class_names"] == '["cheap", "dear"]' and run.data.tags["data.input_shape"] == "(2,)"


def test_a_data_sources_unexpected_failure_is_one_data_error_not_hydras_wrapper(tmp_path):
    """A table saved as UTF-16 ("Unicode text") is not what data=csv reads: the source fails where nothing
    checked for it, and the user gets one DataError naming the file."""
    (tmp_path / "wide.csv").write_bytes("a,b,label\n1,2,0\n3,4,1\n".encode("utf-16"))
    done = run_cli_in_process(["data=csv", "data.path=wide.csv", "trainer.epochs=1", "export=none"], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("DataError: data=csv reading data.path=wide.csv failed: UnicodeDecodeError: ")
    assert "Error in call to target" not in done.stderr
    assert_only_the_message(done.stderr)
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"


def test_a_model_function_declaring_threads_that_are_not_a_count_fails_its_run_naming_the_fix(tmp_path, monkeypatch):
    """What a model function declares for hardware.intra_op_threads=auto is read in the hardware step (reading it
    imports the user's module, which may import TensorFlow: not preflight's to do), so the run has started and ends
    FAILED, with one message naming the target, the value and the fix."""
    (tmp_path / "threaded_models.py").write_text("from tfx_hydra.models import mlp\n\n\n"
                                                 "def many(**keys):\n    return mlp(**keys)\n\n\n"
                                                 "many.intra_op_threads = 'many'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    done = run_cli_in_process(["model._target_=threaded_models.many", "trainer.epochs=1", "export=none"],
                              cwd=tmp_path)
    assert done.returncode == 1
    assert ("ConfigError: model._target_=threaded_models.many declares intra_op_threads='many': expected a whole "
            "number of threads for each op, 0 for every core.") in done.stderr, done.stderr[-2000:]
    assert "Fix: many.intra_op_threads = 0 beside the function, or remove it" in done.stderr
    assert_only_the_message(done.stderr)
    assert "epoch 1/" not in done.stdout
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith("ConfigError: model._target_=threaded_models.many declares")
