"""trainer.label_smoothing and trainer.class_weight change the training loss exactly as their formulas say,
checked against numpy on the model's own predictions (a learning rate of 0 keeps the weights fixed)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers.fakes import RecordingTracker
from tests.helpers.training import settings_with, setup_with
from tfx_hydra.data.pipeline import PipelineOptions, from_arrays
from tfx_hydra.data.splits import Split
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.export.keras import KerasExport
from tfx_hydra.models import mlp
from tfx_hydra.settings.schemas import (
    HardwareConfig,
    PrecisionConfig,
    Settings,
    SweepConfig,
    TaskConfig,
    TrackingConfig,
    TrainerConfig,
)
from tfx_hydra.trainer import compile_model, train
from tfx_hydra.trainer.class_weight import class_weights
from tfx_hydra.trainer.losses import SmoothedSparseCrossentropy

STILL = OmegaConf.create({"_target_": "keras.optimizers.SGD", "learning_rate": 0.0})  # the weights never move


def still_mlp(data, trainer: TrainerConfig, fitted_epochs: int = 0):
    """The MLP compiled by the trainer with a learning rate of 0; first fitted `fitted_epochs` epochs
    with plain Keras, for predictions that lean to the true class."""
    model = mlp(name="mlp", input_shape=list(data.spec.input_shape), num_classes=data.spec.num_classes, dropout=0.0)
    if fitted_epochs:
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
        model.fit(data.train, epochs=fitted_epochs, verbose=0)
    compile_model(model, STILL, settings_with(trainer), setup_with(), RecordingTracker())
    return model


def inputs_and_labels(dataset):
    xs, ys = zip(*[(np.asarray(x), np.asarray(y)) for x, y in dataset])
    return np.concatenate(xs), np.concatenate(ys)


def test_label_smoothing_is_the_cross_entropy_against_softened_targets(data):
    # Fitted first, so the model puts most of its mass on the true class: then the smoothed loss (half of it on the
    # other classes' small probabilities) is far above the plain one for any initialisation. An untrained model's
    # confident but random guesses could land both losses within 1e-3 of each other (CI saw 5.6945 vs 5.6977).
    model = still_mlp(data, TrainerConfig(label_smoothing=0.5), fitted_epochs=5)
    assert isinstance(model.loss, SmoothedSparseCrossentropy)
    x, y = inputs_and_labels(data.validation)
    p = model.predict(x, verbose=0).astype(np.float64)
    targets = np.full_like(p, 0.5 / 10) + 0.5 * np.eye(10)[y]
    expected = np.mean(-np.sum(targets * np.log(p), axis=1))
    plain = np.mean(-np.log(p[np.arange(len(y)), y]))
    measured = model.evaluate(data.validation, verbose=0, return_dict=True)["loss"]
    assert measured == pytest.approx(expected, rel=1e-5)
    assert measured > plain + 0.5  # smoothing does change it: the other classes' mass is now part of the target


def test_a_model_compiled_with_the_smoothed_loss_exports_and_reloads_as_keras(data, tmp_path):
    model = still_mlp(data, TrainerConfig(label_smoothing=0.1))
    result = KerasExport(str(tmp_path), "mlp")(model, data)  # saves, loads back, compares outputs
    reloaded = keras.models.load_model(result.path)
    assert isinstance(reloaded.loss, SmoothedSparseCrossentropy) and reloaded.loss.label_smoothing == 0.1


def test_label_smoothing_of_a_binary_task_uses_keras_own(tmp_path):
    rng = np.random.default_rng(0)
    splits = {name: Split(rng.normal(size=(n, 6)).astype("float32"), rng.integers(0, 2, (n, 1)).astype("float32"))
              for name, n in (("train", 64), ("validation", 32), ("test", 32))}
    data = from_arrays(splits, [6], 1, PipelineOptions(batch_size=16), named="coins", source="rng", task="binary")
    trainer = TrainerConfig(label_smoothing=0.1, loss="binary_crossentropy")
    with pytest.raises(ConfigError, match="does not fit task=classification"):  # the settings' task says which
        settings_with(trainer)
    model = mlp(name="mlp", input_shape=[6], num_classes=1, dropout=0.0, head="sigmoid")
    settings = Settings(seed=0, trainer=trainer, hardware=HardwareConfig(), precision=PrecisionConfig(),
                        tracking=TrackingConfig(enabled=False), sweep=SweepConfig(), task=binary_task())
    compile_model(model, STILL, settings, setup_with(), RecordingTracker())
    assert isinstance(model.loss, keras.losses.BinaryCrossentropy) and model.loss.label_smoothing == 0.1
    x, y = inputs_and_labels(data.validation)
    p = np.clip(model.predict(x, verbose=0).astype(np.float64), 1e-7, 1 - 1e-7)
    t = y * 0.9 + 0.05
    expected = np.mean(-(t * np.log(p) + (1 - t) * np.log(1 - p)))
    assert model.evaluate(data.validation, verbose=0, return_dict=True)["loss"] == pytest.approx(expected, rel=1e-4)


def test_class_weights_weigh_each_examples_loss_in_training_only(data):
    trainer = TrainerConfig(epochs=1, verbose=False, tensorboard=False, backup=False)
    model = still_mlp(data, trainer)
    weights = class_weights({0: 5.0, 3: 0.5}, data, RecordingTracker())
    assert weights == {c: {0: 5.0, 3: 0.5}.get(c, 1.0) for c in range(10)}
    x, y = inputs_and_labels(data.train)
    losses = -np.log(model.predict(x, verbose=0).astype(np.float64)[np.arange(len(y)), y])
    history = train(model, data, trainer, RecordingTracker(), class_weight=weights)
    assert history.history["loss"][0] == pytest.approx(np.mean(np.array([weights[c] for c in y]) * losses), rel=1e-4)
    assert history.history["loss"][0] != pytest.approx(np.mean(losses), rel=1e-3)
    xv, yv = inputs_and_labels(data.validation)  # validation is not weighted
    pv = model.predict(xv, verbose=0).astype(np.float64)
    assert history.history["val_loss"][0] == pytest.approx(np.mean(-np.log(pv[np.arange(len(yv)), yv])), rel=1e-4)


def imbalanced(num_classes: int, labels: np.ndarray):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(len(labels), 4)).astype("float32")
    y = labels.astype("float32").reshape(-1, 1) if num_classes == 1 else labels
    task = "binary" if num_classes == 1 else "classification"
    return from_arrays({"train": Split(x, y), "validation": Split(x[:8], y[:8]), "test": Split(x[:8], y[:8])}, [4],
                       num_classes, PipelineOptions(batch_size=16), named="skewed", source="rng", task=task)


@pytest.mark.parametrize("num_classes", [1, 3])  # binary (0/1 floats, one output) and three classes
def test_balanced_class_weights_are_n_over_classes_times_count_on_the_training_split(num_classes):
    labels = np.array([0] * 90 + [1] * 10) if num_classes == 1 else np.array([0] * 60 + [1] * 30 + [2] * 10)
    tracker = RecordingTracker()
    weights = class_weights("balanced", imbalanced(num_classes, labels), tracker)
    counts = np.bincount(labels)
    assert weights == pytest.approx({c: len(labels) / (len(counts) * counts[c]) for c in range(len(counts))})
    assert tracker.tags["trainer.class_weight"].startswith("0: ")


def test_a_class_weight_for_a_class_the_data_lacks_is_refused_with_the_full_map():
    with pytest.raises(ConfigError, match=r"names class 7, but the data has 3 classes.*\n  Fix: "
                                          r"trainer.class_weight=\{0:1,1:1,2:1\}"):
        class_weights({7: 2.0}, imbalanced(3, np.array([0, 1, 2] * 10)), RecordingTracker())


def binary_task() -> TaskConfig:
    return TaskConfig(name="binary", head="sigmoid", loss="binary_crossentropy", threshold=0.5)


@pytest.mark.parametrize("trainer, task, message, fix", [
    (dict(label_smoothing=1.0), None, r"label_smoothing=1.0 is out of range: expected a number \[0, 1\)",
     "trainer.label_smoothing=0.1"),
    (dict(label_smoothing=0.1, loss="mse"), TaskConfig(name="regression", head="linear", loss="mse"),
     "regression's targets are numbers, not labels", "trainer.label_smoothing=0"),
    (dict(label_smoothing=0.1, loss={"_target_": "myproj.losses.focal"}), None, "your own \\(myproj.losses.focal\\)",
     "trainer.label_smoothing=0 and a label_smoothing argument"),
    (dict(class_weight="heavy"), None, "not one of: null, balanced", "trainer.class_weight=balanced"),
    (dict(class_weight={"cat": 2.0}), None, "has the key 'cat': keys are class indices", "trainer.class_weight={0:"),
    (dict(class_weight={0: 0}), None, r"class_weight.0=0 is not a positive number", "trainer.class_weight={0:"),
    (dict(class_weight="balanced", loss="binary_crossentropy"),
     TaskConfig(name="multilabel", head="sigmoid", loss="binary_crossentropy", threshold=0.5),
     "a task=multilabel example has no one class", "trainer.class_weight=null"),
])
def test_a_bad_smoothing_or_class_weight_is_one_error_with_a_fix(trainer, task, message, fix):
    with pytest.raises(ConfigError, match=message) as raised:
        Settings(seed=0, trainer=TrainerConfig(**trainer), hardware=HardwareConfig(), precision=PrecisionConfig(),
                 tracking=TrackingConfig(enabled=False), sweep=SweepConfig(), task=task or TaskConfig())
    assert f"Fix: {fix}" in str(raised.value)


def test_binary_takes_smoothing_and_class_weights():
    Settings(seed=0, trainer=TrainerConfig(label_smoothing=0.1, class_weight="balanced", loss="binary_crossentropy"),
             hardware=HardwareConfig(), precision=PrecisionConfig(), tracking=TrackingConfig(enabled=False),
             sweep=SweepConfig(), task=binary_task())


def write_weighted_csv(path, weights=None):
    rng = np.random.default_rng(0)
    n = 200
    x = rng.normal(size=(n, 3))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)  # three classes
    w = np.where(np.arange(n) % 2 == 0, 3.0, 0.0) if weights is None else weights
    rows = ["a,b,c,label,weight"] + [f"{a:.4f},{b:.4f},{c:.4f},{label},{weight:g}"
                                     for (a, b, c), label, weight in zip(x, y, w)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_csv_weight_column_weighs_each_training_rows_loss_and_nothing_else(tmp_path):
    from tfx_hydra.data import csv

    table = write_weighted_csv(tmp_path / "weighted.csv")
    data = csv(str(table), "label", [3], 3, 16, 0, weight_column="weight", normalization="none")
    assert data.spec.input_shape == (3,)  # the weight is not a feature
    assert len(data.train.element_spec) == 3 and len(data.validation.element_spec) == 2
    trainer = TrainerConfig(epochs=1, verbose=False, tensorboard=False, backup=False)
    model = still_mlp(data, trainer)
    x, y, w = (np.concatenate(part) for part in zip(*[(np.asarray(a), np.asarray(b), np.asarray(c))
                                                      for a, b, c in data.train]))
    assert set(np.unique(w)) == {0.0, 3.0}
    losses = -np.log(model.predict(x, verbose=0).astype(np.float64)[np.arange(len(y)), y])
    history = train(model, data, trainer, RecordingTracker())
    assert history.history["loss"][0] == pytest.approx(np.mean(w * losses), rel=1e-4)
    xv, yv = inputs_and_labels(data.validation)
    pv = model.predict(xv, verbose=0).astype(np.float64)
    assert history.history["val_loss"][0] == pytest.approx(np.mean(-np.log(pv[np.arange(len(yv)), yv])), rel=1e-4)


@pytest.mark.parametrize("weights, message", [
    (np.r_[np.ones(199), -1.0], r"row 201, column weight: weight -1 is not a finite number >= 0"),
    (np.zeros(200), r"every weight in column weight is 0"),
])
def test_bad_weights_are_a_data_error_naming_the_row(tmp_path, weights, message):
    from tfx_hydra.data import csv

    with pytest.raises(DataError, match=message):
        csv(str(write_weighted_csv(tmp_path / "bad.csv", weights)), "label", [3], 3, 16, 0, weight_column="weight")
    with pytest.raises(DataError, match=r"data.weight_column=w is not a column"):
        csv(str(write_weighted_csv(tmp_path / "ok.csv")), "label", [3], 3, 16, 0, weight_column="w")


def test_class_weights_and_a_weight_column_together_are_refused_before_anything_runs():
    from tests.helpers import compose
    from tfx_hydra.settings.checked import validate

    with pytest.raises(ConfigError, match=r"both weigh the training examples.*\n  Fix: one of them"):
        validate(compose(["data=csv", "data.path=/x.csv", "data.input_shape=[3]", "data.num_classes=3",
                          "data.weight_column=weight", "trainer.class_weight=balanced"]))


def test_a_tfrecord_weight_feature_weighs_the_training_loss_and_nothing_else(tmp_path):
    import tensorflow as tf

    from tfx_hydra.data import tfrecord

    rng = np.random.default_rng(1)
    with tf.io.TFRecordWriter(str(tmp_path / "train-0.tfrecord")) as writer:
        for i in range(240):
            features = {"inputs": tf.train.Feature(float_list=tf.train.FloatList(value=rng.normal(size=4))),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
                        "w": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i % 4)]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    data = tfrecord(str(tmp_path / "train-*.tfrecord"), None, [4], 3, 16, 0, weight_key="w")
    assert len(data.train.element_spec) == 3
    assert len(data.validation.element_spec) == 2 and len(data.test.element_spec) == 2
    trainer = TrainerConfig(epochs=1, verbose=False, tensorboard=False, backup=False)
    model = still_mlp(data, trainer)
    x, y, w = (np.concatenate(part) for part in zip(*[(np.asarray(a), np.asarray(b), np.asarray(c))
                                                      for a, b, c in data.train]))
    assert sorted(np.unique(w)) == [0.0, 1.0, 2.0, 3.0]
    losses = -np.log(model.predict(x, verbose=0).astype(np.float64)[np.arange(len(y)), y])
    history = train(model, data, trainer, RecordingTracker())
    assert history.history["loss"][0] == pytest.approx(np.mean(w * losses), rel=1e-4)
    with pytest.raises(DataError, match=r"data.label_key=label, data.weight_key=weight"):  # a feature the files lack
        tfrecord(str(tmp_path / "train-*.tfrecord"), None, [4], 3, 16, 0, weight_key="weight")
