"""task: each kind of problem's labels (read from a CSV, arrays and a user's pipelines, each bad label one
DataError naming its row), its head, what its SavedModel serves, its score and its reports; the loss that
does not fit a task said before anything is built."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tfx_hydra.data import csv, from_pipelines, synthetic
from tfx_hydra.data.pipeline import require_datasets
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.export.savedmodel import SavedModelExport
from tfx_hydra.export.source import evaluate_saved_model
from tfx_hydra.metrics import require_loss_fits_task
from tfx_hydra.models import mlp
from tfx_hydra.models.heads import in_target_units
from tfx_hydra.settings.schemas import TaskConfig, TrainerConfig
from tfx_hydra.task import get

pytestmark = pytest.mark.xdist_group("test_task")
LOSS = {"classification": "sparse_categorical_crossentropy", "binary": "binary_crossentropy",
        "multilabel": "binary_crossentropy", "regression": "mse"}


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return str(path)


def table(n=60, seed=0):
    """Two numeric features and labels of every task derived from them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).round(3)
    return x, {"binary": (x[:, 0] > 0).astype(int), "price": (100 + 20 * x[:, 0] - 5 * x[:, 1]).round(2),
               "tags": ["red;big" if a > 0 and b > 0 else "red" if a > 0 else "big" if b > 0 else "" for a, b in x]}


def labels_of(dataset):
    return np.concatenate([y.numpy() for _, y in dataset])


# --- labels from a CSV ----------------------------------------------------------------------------

def test_a_csv_gives_each_tasks_labels(tmp_path):
    x, y = table()
    rows = [(a, b, y["binary"][i], y["price"][i], 2 * y["price"][i], y["tags"][i]) for i, (a, b) in enumerate(x)]
    path = write_csv(tmp_path / "t.csv", ["a", "b", "yes", "price", "double", "tags"], rows)
    features = ["a", "b"]
    common = dict(input_shape=[2], batch_size=8, seed=0, feature_columns=features)
    binary = csv(path, "yes", num_classes=1, task="binary", **common)
    assert binary.spec.task.name == "binary" and set(np.unique(labels_of(binary.train))) == {0.0, 1.0}
    assert labels_of(binary.train).shape[1:] == (1,)
    regression = csv(path, None, num_classes=2, task="regression", label_columns=["price", "double"], **common)
    prices = labels_of(regression.train)
    assert prices.shape[1:] == (2,) and np.allclose(prices[:, 1], 2 * prices[:, 0])
    assert regression.spec.target_mean[1] == pytest.approx(2 * regression.spec.target_mean[0], rel=1e-6)
    tags = csv(path, "tags", num_classes=2, task="multilabel", label_delimiter=";", **common)
    hot = labels_of(tags.train)  # tags numbered in sorted order: big, red
    assert hot.shape[1:] == (2,) and set(np.unique(hot)) <= {0.0, 1.0} and hot.sum() > 0


@pytest.mark.parametrize("task, value, message", [
    ("binary", 2, r"task=binary: .*t.csv, row 4, has label 2, not 0 or 1\."),
    ("regression", "cheap", r"task=regression: .*t.csv, row 4, has label 'cheap', not a number\."),
])
def test_a_bad_label_in_a_csv_is_one_error_naming_its_row(tmp_path, task, value, message):
    rows = [(0.1, 0.2, 1), (0.3, 0.1, 0), (0.5, 0.5, value), (0.2, 0.9, 1)]
    path = write_csv(tmp_path / "t.csv", ["a", "b", "label"], rows)
    with pytest.raises(DataError, match=message):
        csv(path, "label", [2], 1, batch_size=2, seed=0, task=task)


def test_an_array_label_that_is_not_a_class_index_is_named():
    with pytest.raises(DataError, match=r"task=classification: example 1 of the test split has label 1.5, not a "
                                        r"class index\."):
        get("classification").labels(np.array([0, 1.5, 2]), "test", 3)


@pytest.mark.parametrize("task, fix", [("classification", "task=multilabel for several labels per example"),
                                       ("binary", "task=multilabel for several 0/1 labels per example")])
def test_several_labels_per_example_under_a_one_label_task_is_one_wording(task, fix):
    with pytest.raises(DataError) as caught:
        get(task).labels(np.zeros((4, 3)), "train", 2)
    assert str(caught.value).startswith(f"DataError: task={task}: the train split's labels have shape [4, 3]: "
                                        f"expected one label per example.\n  Fix: {fix}")
    assert get(task).labels(np.zeros((4, 1)), "train", 2).shape[0] == 4  # a column of one is one label each


def test_labels_that_read_as_a_quantity_point_to_regression_not_to_more_classes():
    """Integer labels with many distinct values and few examples each (a price, a dose) under task=classification:
    the fix is task=regression first; a few classes over the declared number still get data.num_classes."""
    doses = np.random.default_rng(0).integers(25, 347, 400)
    with pytest.raises(DataError, match=r"the train labels look like numbers to predict, not classes: \d+ distinct "
                                        r"values over \[25, 346\]") as caught:
        get("classification").labels(doses, "train", 3)
    assert "Fix: task=regression (numeric targets), or data.num_classes=347 if they are class indices" in str(
        caught.value)
    with pytest.raises(DataError, match=r"num_classes=3 does not match the data: train labels range over \[0, 4\]"):
        get("classification").labels(np.arange(100) % 5, "train", 3)


def test_a_csv_label_with_fractions_is_a_quantity_named_by_its_row(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["a", "label"], [(0.1, "151.0"), (0.2, "75.5"), (0.3, "141")])
    with pytest.raises(DataError, match=r"task=classification: .*t.csv, row 3, has label 75.5: a number with a "
                                        r"fraction, not a class\.\n  Fix: task=regression"):
        csv(path, "label", [1], 3, batch_size=1, seed=0)


def test_a_multilabel_row_that_is_not_multi_hot_is_named():
    y = np.array([[0, 1, 1], [1, 0, 0], [0, 2, 0]])
    with pytest.raises(DataError, match=r"task=multilabel: example 2 of the train split has 2 for label 1: "
                                        r"a multi-hot row holds only 0 and 1\."):
        get("multilabel").labels(y, "train", 3)
    with pytest.raises(DataError, match=r"data.num_classes=4 does not match the data: its rows have 3 labels"):
        get("multilabel").labels(y[:2], "train", 4)
    with pytest.raises(DataError, match="expected multi-hot rows"):
        get("multilabel").labels(np.array([0, 1, 2]), "train", 3)


def test_a_user_pipeline_gives_any_tasks_labels_and_its_bad_ones_are_named():
    def pairs(y):
        return tf.data.Dataset.from_tensor_slices((np.ones((len(y), 3), "float32"), np.asarray(y)))

    targets = np.linspace(0, 10, 40).astype("float32")
    data = from_pipelines(pairs(targets), pairs(targets[:8]), pairs(targets[:8]), input_shape=(3,), num_classes=1,
                          batch_size=8, task="regression")
    assert data.train.element_spec[1].shape.as_list() == [None, 1] and data.train.element_spec[1].dtype == tf.float32
    assert data.spec.task.name == "regression"
    bad = np.array([0, 1, 1, 3] * 10)
    with pytest.raises(DataError, match=r"task=binary: example 3 of the train split has label 3, not 0 or 1"):
        from_pipelines(pairs(bad), pairs(bad[:2]), pairs(bad[:2]), input_shape=(3,), num_classes=1, batch_size=8,
                       task="binary")


def test_data_of_one_task_in_a_run_of_another_is_refused():
    data = synthetic([4], 3, 90, 8, 0)
    with pytest.raises(DataError, match=r"gave classification labels, but the run is task=regression"):
        require_datasets(data, "tfx_hydra.data.synthetic", get("regression"))


# --- losses ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss, task, fix", [
    ("mse", "classification", "trainer.loss=sparse_categorical_crossentropy"),
    ("sparse_categorical_crossentropy", "regression", "trainer.loss=mse (or mae, huber, log_cosh)"),
    ("mse", "binary", "trainer.loss=binary_crossentropy"),
])
def test_a_loss_of_another_task_is_refused_before_anything_is_built(loss, task, fix):
    with pytest.raises(ConfigError, match=f"trainer.loss={loss} does not fit task={task}") as refused:
        require_loss_fits_task(loss, task)
    assert fix in refused.value.fix
    require_loss_fits_task(TrainerConfig().loss, "classification")  # the default fits the default


def test_a_sigmoid_task_needs_a_threshold_inside_zero_and_one():
    with pytest.raises(ConfigError, match="task=binary needs task.threshold"):
        TaskConfig(name="binary", head="sigmoid", threshold=None)
    with pytest.raises(ConfigError, match=r"task.threshold=1.5 is out of range"):
        TaskConfig(name="multilabel", head="sigmoid", threshold=1.5)


# --- heads, exports, scores, reports --------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model of each task trained on synthetic data, and its SavedModel."""
    made = {}
    for name, width in (("classification", 3), ("binary", 1), ("multilabel", 4), ("regression", 2)):
        task = get(name, standardize_targets=name == "regression")
        data = require_datasets(synthetic([6], width, 900, 32, 0, task=name), "synthetic", task)
        model = in_target_units(mlp("m", [6], width, units=32, dropout=0.0, head=task.head), data.spec)
        model.compile("adam", LOSS[name])
        model.fit(data.train, epochs=12, verbose=0)
        export = SavedModelExport(str(tmp_path_factory.mktemp(name)), "m")(model, data)
        made[name] = (task, data, model, export)
    return made


@pytest.mark.parametrize("name, outputs", [("classification", {"probabilities", "class", "class_index"}),
                                           ("binary", {"probabilities", "class", "class_index"}),
                                           ("multilabel", {"probabilities", "labels", "tags"}),
                                           ("regression", {"predictions"})])
def test_each_tasks_savedmodel_serves_its_outputs_from_raw_inputs(trained, name, outputs):
    task, data, model, export = trained[name]
    serve = tf.saved_model.load(export.path).signatures["serving_default"]
    scaled, _ = next(iter(data.test))
    served = {k: v.numpy() for k, v in serve(inputs=data.spec.denormalize(scaled)).items()}
    assert set(served) == outputs
    expected = np.asarray(model(scaled))
    assert np.allclose(served[task.output], expected, atol=1e-5)
    if name == "binary":  # the decision at the threshold, as integers, and its name beside it
        assert np.array_equal(served["class_index"], (expected >= 0.5).astype(int))
        assert np.array_equal(served["class"].astype(str), served["class_index"].astype(str))  # named "0" and "1"
    if name == "multilabel":
        assert served["labels"].shape == expected.shape and set(np.unique(served["labels"])) <= {0, 1}
        numbered = np.broadcast_to(np.arange(expected.shape[1]).astype(str), expected.shape)
        assert np.array_equal(served["tags"].astype(str), np.where(served["labels"] == 1, numbered, ""))


def test_each_task_learns_its_synthetic_data_and_evaluating_the_export_agrees(trained):
    scores = {name: evaluate_saved_model(export.path, data) for name, (_, data, _, export) in trained.items()}
    assert scores["classification"]["test_accuracy"] > 0.7
    assert scores["binary"]["test_accuracy"] > 0.8
    assert scores["multilabel"]["test_accuracy"] > 0.8
    # regression targets are about 50 +- 10: a model that learned nothing would be ~10 off on average
    assert scores["regression"]["test_mae"] < 5 and set(scores["regression"]) == {"test_loss", "test_mae", "test_rmse"}


def test_regression_predicts_in_the_targets_units_through_its_last_layer(trained):
    task, data, model, _ = trained["regression"]
    assert model.layers[-1].name == "target_units" and data.spec.target_mean is not None
    assert abs(data.spec.target_mean[0] - 50) < 3 and abs(data.spec.target_std[0] - 10) < 3
    predicted = np.concatenate([model(x) for x, _ in data.test])
    assert abs(predicted.mean() - np.mean(data.spec.target_mean)) < 5  # in the targets' units, not standardized


def test_each_task_writes_its_reports(trained, tmp_path):
    from tfx_hydra.reports import predictions

    written = {}
    for name, (task, data, model, _) in trained.items():
        folder = tmp_path / name
        folder.mkdir()
        written[name] = task.report(*predictions(model, data.test), str(folder))
        assert all((folder / file).stat().st_size > 0 for file in written[name])
    assert written["classification"] == ["confusion_matrix.csv", "confusion_matrix.png", "classification_report.txt"]
    assert "precision" in (tmp_path / "classification" / "classification_report.txt").read_text()
    binary = json.loads((tmp_path / "binary" / "binary_report.json").read_text())
    assert binary["threshold"] == 0.5 and 0.8 < binary["roc_auc"] <= 1
    assert "label_3" in (tmp_path / "multilabel" / "per_label_report.txt").read_text()
    regression = json.loads((tmp_path / "regression" / "regression_report.json").read_text())
    assert regression["rmse"] >= regression["mae"] > 0 and regression["r2"] > 0.5
    assert written["regression"][:2] == ["predicted_vs_true.png", "residuals.png"]


def test_an_image_folder_of_two_classes_is_a_binary_task_and_of_three_is_refused(tmp_path):
    from PIL import Image

    from tfx_hydra.data import image_folder

    for name in ("cat", "dog", "owl"):
        (tmp_path / name).mkdir()
        for i in range(6):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(tmp_path / name / f"{i}.png")
    with pytest.raises(DataError, match=r"task=binary: .* has 3 class folders; a binary task has two"):
        image_folder(str(tmp_path), [8, 8, 3], 1, batch_size=4, seed=0, task="binary")
    shutil.rmtree(tmp_path / "owl")
    data = image_folder(str(tmp_path), [8, 8, 3], 1, batch_size=4, seed=0, task="binary", test_split=0.3)
    assert data.spec.task.name == "binary" and data.train.element_spec[1].shape.as_list() == [None, 1]
    assert set(np.unique(labels_of(data.train))) == {0.0, 1.0}


def test_the_tfrecord_converter_writes_each_tasks_labels_and_the_reader_takes_them(tmp_path):
    from tfx_hydra.data import tfrecord
    from tfx_hydra.data.to_tfrecord import main as to_tfrecord

    assert to_tfrecord([str(tmp_path), "task=regression", "data=synthetic", "data.input_shape=[3]",
                        "data.num_classes=2", "data.num_examples=400"]) == 0
    files = {split: str(tmp_path / f"{split}-*.tfrecord") for split in ("train", "validation", "test")}
    written = (tmp_path / "data" / f"{tmp_path.name}.yaml").read_text()
    assert f"data={tmp_path.name} task=regression" in written
    data = tfrecord(files["train"], files["test"], [3], 2, batch_size=8, seed=0, validation_files=files["validation"],
                    task="regression")
    expected = synthetic([3], 2, 400, 8, 42, task="regression")  # the seed the converter composed
    assert np.allclose(np.sort(labels_of(data.train), axis=0), np.sort(labels_of(expected.train), axis=0))
    with pytest.raises(DataError, match=r"does not parse as data.inputs_key=inputs, data.label_key=label"):
        tfrecord(files["train"], files["test"], [3], 2, batch_size=8, seed=0, task="classification")


@pytest.mark.parametrize("name", ["binary", "regression"])
def test_every_tasks_head_computes_in_float32_under_mixed_precision(name):
    import keras

    task = get(name, standardize_targets=True)
    data = require_datasets(synthetic([4], 1, 64, 8, 0, task=name), "synthetic", task)
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = in_target_units(mlp("m", [4], 1, units=8, head=task.head), data.spec)
        outputs = model(np.ones((2, 4), "float32"))
        assert model.get_layer("dense_0").compute_dtype == "float16" and outputs.dtype == "float32"
        if name == "regression":  # the targets' units are float32 too: float16 would round targets in the hundreds
            assert model.get_layer("target_units").compute_dtype == "float32"
    finally:
        keras.config.set_dtype_policy("float32")


def test_an_npz_holds_any_tasks_labels(tmp_path):
    from tfx_hydra.data import keras_dataset

    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(80, 4, 4)).astype("uint8")
    tags = (rng.random((80, 3)) < 0.5).astype("uint8")
    np.savez(tmp_path / "tags.npz", x_train=x[:60], y_train=tags[:60], x_test=x[60:], y_test=tags[60:])
    data = keras_dataset("mnist", str(tmp_path / "tags.npz"), [4, 4], 3, batch_size=8, seed=0, task="multilabel")
    assert data.spec.task.name == "multilabel" and labels_of(data.test).tolist() == tags[60:].tolist()
    np.savez(tmp_path / "bad.npz", x_train=x[:60], y_train=tags[:60] * 2, x_test=x[60:], y_test=tags[60:])
    with pytest.raises(DataError, match=r"task=multilabel: example \d+ of the train split has 2 for label"):
        keras_dataset("mnist", str(tmp_path / "bad.npz"), [4, 4], 3, batch_size=8, seed=0, task="multilabel")
