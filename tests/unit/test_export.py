"""SavedModel export: TF Serving's versioned layout, a serving_default signature, output parity."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfx_hydra.data import digits
from tfx_hydra.errors import ExportError
from tfx_hydra.export import SavedModelExport, next_version
from tfx_hydra.models import mlp


@pytest.fixture(scope="module")
def trained():
    data = digits([8, 8], 10, batch_size=32, seed=0, limit=200)
    model = mlp(name="digits_mlp", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(data.train, epochs=1, verbose=0)
    return model, data


def test_versions_count_up_in_tf_serving_layout(trained, tmp_path):
    model, data = trained
    exporter = SavedModelExport(export_dir=str(tmp_path), model_name="digits_mlp")
    first, second = exporter(model, data), exporter(model, data)
    assert first.path == str(tmp_path / "digits_mlp" / "1")
    assert second.path == str(tmp_path / "digits_mlp" / "2")
    assert sorted(os.listdir(tmp_path / "digits_mlp")) == ["1", "2"]  # no staging folder left behind
    assert os.path.isfile(tmp_path / "digits_mlp" / "2" / "saved_model.pb")
    assert second.metrics["export.savedmodel.version"] == 2.0


def test_serving_default_answers_like_the_keras_model(trained, tmp_path):
    model, data = trained
    result = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.metrics["export.savedmodel.max_abs_diff"] < 1e-5
    serve = tf.saved_model.load(result.path).signatures["serving_default"]
    inputs, _ = next(iter(data.test))
    served = serve(inputs=inputs)
    (probabilities,) = served.values()
    np.testing.assert_allclose(probabilities.numpy(), model.predict(inputs, verbose=0), atol=1e-5)
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, atol=1e-5)


def test_saved_model_cli_sees_the_signature(trained, tmp_path):
    model, data = trained
    path = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data).path
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default"],
                           capture_output=True, text=True, check=True).stdout
    assert "inputs['inputs'] tensor_info" in shown and "shape: (-1, 8, 8)" in shown


def test_next_version_ignores_non_integer_folders(tmp_path):
    for name in ["1", "7", "latest", ".staging-x"]:
        (tmp_path / name).mkdir()
    assert next_version(str(tmp_path)) == 8
    assert next_version(str(tmp_path / "missing")) == 1


def test_unwritable_export_dir_is_a_clear_error(trained, tmp_path):
    model, data = trained
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ExportError, match=r"cannot write to export.savedmodel.export_dir=.*file"):
        SavedModelExport(export_dir=str(blocker), model_name="m")(model, data)
