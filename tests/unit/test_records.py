"""records: the confusion matrix, the weights' fingerprint and the resume key a run records."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from tfx_hydra.data import digits
from tfx_hydra.models import mlp
from tfx_hydra.records import resume_key
from tfx_hydra.reports import predictions
from tfx_hydra.settings.compose import compose as compose_config
from tfx_hydra.task import Classification
from tfx_hydra.trainer.kept_weights import weights_sha256

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = pytest.mark.xdist_group("test_records")


@pytest.fixture(scope="module")
def model_and_data():
    data = digits([8, 8], 10, batch_size=32, seed=0, limit=200)
    return mlp(name="mlp", input_shape=[8, 8], num_classes=10), data


def test_the_confusion_matrix_counts_each_true_and_predicted_pair(model_and_data, tmp_path):
    model, data = model_and_data
    Classification().report(*predictions(model, data.test), str(tmp_path), data.spec.names)
    header, *rows = (tmp_path / "confusion_matrix.csv").read_text().splitlines()
    assert header == "true \\ predicted," + ",".join(data.spec.names)  # each column and row headed by its class
    assert [row.split(",")[0] for row in rows] == list(data.spec.names)
    matrix = np.asarray([[int(v) for v in row.split(",")[1:]] for row in rows])
    truth = np.concatenate([labels.numpy() for _, labels in data.test])
    predicted = np.concatenate([np.argmax(model(inputs, training=False), -1) for inputs, _ in data.test])
    assert matrix.shape == (10, 10) and matrix.sum() == len(truth) == data.num_test
    assert (matrix.sum(axis=1) == np.bincount(truth, minlength=10)).all()  # rows: the true classes
    assert (matrix.sum(axis=0) == np.bincount(predicted, minlength=10)).all()  # columns: the predicted ones
    assert np.trace(matrix) == int(np.sum(truth == predicted))


def test_the_weights_fingerprint_follows_the_weights(model_and_data):
    model, _ = model_and_data
    before = weights_sha256(model)
    assert before == weights_sha256(model) and len(before) == 16
    kernel = model.get_layer("dense_0").kernel
    kernel.assign(kernel.numpy() + 1.0)
    assert weights_sha256(model) != before


def test_the_resume_key_is_the_config_as_written_not_where_it_runs():
    again = compose_config(["trainer.epochs=3"])
    written = OmegaConf.to_container(again, resolve=False)
    assert written["paths"]["output_dir"] == "${hydra:runtime.output_dir}"  # unresolved: each run's folder stays out
    assert resume_key(compose_config(["trainer.epochs=3"])) == resume_key(again)
    assert resume_key(compose_config(["trainer.epochs=4"])) != resume_key(again)


def test_the_split_sizes_are_tagged_as_numbers_and_an_unknown_length_as_a_question_mark():
    """A run's data.num_* tags hold the plain count (a query such as `tags.data.num_train = '1293'` finds it);
    only the terminal's line groups the digits. A user's pipeline of unknown length is `?` in both."""
    import dataclasses

    from tests.helpers.fakes import RecordingTracker
    from tfx_hydra.records import record_data

    data = digits([8, 8], 10, batch_size=32, seed=0)
    tracker = RecordingTracker()
    record_data(tracker, data)
    assert (tracker.tags["data.num_train"], tracker.tags["data.num_test"]) == (1293, 360)
    unknown = RecordingTracker()
    record_data(unknown, dataclasses.replace(data, num_train=None))
    assert unknown.tags["data.num_train"] == "?" and unknown.tags["data.num_validation"] == 144
