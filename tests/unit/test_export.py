"""SavedModel export: TF Serving's versioned layout, a serving_default signature, output parity."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from omegaconf import OmegaConf

from tests.helpers.fakes import RecordingTracker
from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError, DataError, ExportError
from tfx_hydra.export import (
    KerasExport,
    OnnxExport,
    SavedModelExport,
    TfjsExport,
    TFLiteExport,
    export_model,
    next_version,
)
from tfx_hydra.models import mlp

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = pytest.mark.xdist_group("test_export")


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
    graph = tmp_path / "digits_mlp" / "2" / "saved_model.pb"
    assert second.metrics["export.savedmodel.size_bytes"] > os.path.getsize(graph)


def test_serving_default_takes_raw_inputs_and_names_its_outputs(trained, tmp_path):
    model, data = trained
    result = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.metrics["export.savedmodel.max_abs_diff"] < 1e-5
    serve = tf.saved_model.load(result.path).signatures["serving_default"]
    scaled, _ = next(iter(data.test))
    raw = scaled.numpy() * 16.0  # the digits' own 0..16 pixel values: scaling is inside the graph
    served = serve(inputs=tf.constant(raw))
    expected = model.predict(scaled, verbose=0)
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-5)
    np.testing.assert_array_equal(served["class"].numpy(), np.argmax(expected, axis=1))


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_saved_model_cli_shows_the_named_signature(trained, tmp_path):
    model, data = trained
    path = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data).path
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True, check=True).stdout
    assert "signature_def['serving_default']" in shown
    assert "inputs['inputs'] tensor_info" in shown and "shape: (-1, 8, 8)" in shown
    assert "outputs['probabilities'] tensor_info" in shown and "outputs['class'] tensor_info" in shown


def test_models_config_lists_every_model_for_tf_serving(trained, tmp_path):
    model, data = trained
    SavedModelExport(export_dir=str(tmp_path), model_name="mlp")(model, data)
    SavedModelExport(export_dir=str(tmp_path), model_name="cnn")(model, data)
    config = (tmp_path / "models.config").read_text()
    assert config.startswith("model_config_list {")
    for name in ("mlp", "cnn"):
        assert f'name: "{name}"\n    base_path: "{tmp_path / name}"\n    model_platform: "tensorflow"' in config


def test_next_version_ignores_non_integer_folders(tmp_path):
    for name in ["1", "7", "latest", ".staging-x"]:
        (tmp_path / name).mkdir()
    assert next_version(str(tmp_path)) == 8
    assert next_version(str(tmp_path / "missing")) == 1


# --- TFLite, ONNX and Keras exports, verified against the Keras model ---------------------------


def test_tflite_float32_equals_keras_and_runs_in_litert(trained, tmp_path):
    model, data = trained
    result = TFLiteExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.path == str(tmp_path / "m.tflite")
    assert result.metrics["export.tflite.max_abs_diff"] < 1e-5
    assert result.metrics["export.tflite.accuracy"] == result.metrics["export.tflite.keras_accuracy"]
    interpreter = Interpreter(model_path=result.path)
    assert list(interpreter.get_input_details()[0]["shape_signature"]) == [-1, 8, 8]


@pytest.mark.parametrize("quantization", ["float16", "dynamic_range", "int8"])
def test_quantized_tflite_is_smaller_and_about_as_accurate(trained, tmp_path, quantization):
    model, data = trained
    plain = TFLiteExport(export_dir=str(tmp_path / "plain"), model_name="m")(model, data)
    quantized = TFLiteExport(export_dir=str(tmp_path), model_name="m", quantization=quantization)(model, data)
    assert quantized.metrics["export.tflite.size_bytes"] < 0.7 * plain.metrics["export.tflite.size_bytes"]
    assert abs(quantized.metrics["export.tflite.accuracy"] - quantized.metrics["export.tflite.keras_accuracy"]) < 0.05


def test_onnx_equals_keras_in_onnx_runtime(trained, tmp_path):
    model, data = trained
    result = OnnxExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.path == str(tmp_path / "m.onnx")
    assert result.metrics["export.onnx.max_abs_diff"] < 1e-5
    assert result.metrics["export.onnx.accuracy"] == result.metrics["export.onnx.keras_accuracy"]


def test_keras_file_reloads_to_the_same_model(trained, tmp_path):
    model, data = trained
    result = KerasExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.path == str(tmp_path / "m.keras") and result.metrics["export.keras.max_abs_diff"] == 0.0


def test_bad_tflite_settings_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"export.tflite.quantization=int4 is not one of: none, float16, "
                                          r"dynamic_range, int8"):
        TFLiteExport(export_dir=str(tmp_path), model_name="m", quantization="int4")
    with pytest.raises(ConfigError, match=r"quantization=int8 needs a representative dataset, but "
                                          r"export.tflite.representative_examples=0"):
        TFLiteExport(export_dir=str(tmp_path), model_name="m", quantization="int8", representative_examples=0)


def test_an_onnx_runtime_load_failure_names_the_opset(trained, tmp_path):
    model, data = trained
    with pytest.raises(ExportError, match=r"ONNX Runtime cannot load the exported model .*\n  Fix: export.onnx.opset"):
        OnnxExport(export_dir=str(tmp_path), model_name="m", opset=1)(model, data)


def test_a_failed_export_is_recorded_and_the_others_kept_unless_strict(trained, tmp_path):
    model, data = trained
    config = OmegaConf.create({
        "strict": False,
        "onnx": {"_target_": "tfx_hydra.export.OnnxExport", "export_dir": str(tmp_path), "model_name": "m",
                 "opset": 1},
        "keras": {"_target_": "tfx_hydra.export.KerasExport", "export_dir": str(tmp_path), "model_name": "m"},
    })
    tracker = RecordingTracker()
    results = export_model(model, data, config, tracker)
    assert [r.kind for r in results] == ["keras"]
    assert tracker.tags["export.onnx.error"].startswith("ExportError: ONNX Runtime cannot load")
    assert tracker.tags["export.failed"] == 1
    config.strict = True
    with pytest.raises(ExportError, match=r"1 export\(s\) failed: onnx: ExportError: ONNX Runtime cannot load"):
        export_model(model, data, config, RecordingTracker())


# --- TensorFlow.js: the converter lives in another environment -----------------------------------


def test_tfjs_without_its_converter_says_how_to_install_it(trained, tmp_path):
    model, data = trained
    with pytest.raises(ExportError) as caught:
        TfjsExport(export_dir=str(tmp_path), model_name="m", converter="/nonexistent/tensorflowjs_converter")(model,
                                                                                                             data)
    message = str(caught.value)
    assert "export.tfjs.converter=/nonexistent/tensorflowjs_converter is not installed here" in message
    assert "pip install tensorflowjs==4.22.0" in message


def test_tfjs_runs_the_converter_on_our_savedmodel(trained, tmp_path):
    # A stand-in for tensorflowjs_converter (which cannot be installed beside TensorFlow 2.21): it records
    # its arguments, checks it was handed a real SavedModel, and writes model.json as the real one does.
    model, data = trained
    fake = tmp_path / "tensorflowjs_converter"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys
saved_model, out = sys.argv[-2], sys.argv[-1]
assert os.path.isfile(os.path.join(saved_model, "saved_model.pb"))
os.makedirs(out, exist_ok=True)
json.dump({{"args": sys.argv[1:-2]}}, open(os.path.join(out, "model.json"), "w"))
""")
    fake.chmod(0o755)
    result = TfjsExport(export_dir=str(tmp_path / "export"), model_name="m", converter=str(fake))(model, data)
    assert result.path == str(tmp_path / "export" / "m_tfjs")
    args = json.loads((tmp_path / "export" / "m_tfjs" / "model.json").read_text())["args"]
    assert args == ["--input_format=tf_saved_model", "--signature_name=serving_default", "--saved_model_tags=serve"]


def test_an_op_tflite_lacks_is_named_with_the_fix(tmp_path):
    class SingularValues(keras.layers.Layer):
        def call(self, x):
            return tf.linalg.svd(x, compute_uv=False)  # tf.Svd: no TFLite built-in kernel

    inputs = keras.Input((8, 8))
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(SingularValues()(inputs)))
    data = digits([8, 8], 10, batch_size=32, seed=0, limit=100)
    with pytest.raises(ExportError) as caught:
        TFLiteExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert str(caught.value) == (
        "ExportError: TFLite has no built-in kernel for tf.Svd.\n"
        "  Fix: export.tflite.select_tf_ops=true (links TensorFlow's kernels into the .tflite)")


@pytest.mark.parametrize("exporter, name", [(SavedModelExport, "savedmodel"), (TFLiteExport, "tflite")])
def test_a_file_in_the_way_of_the_export_dir_is_a_clear_error(exporter, name, trained, tmp_path):
    model, data = trained
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a folder")
    with pytest.raises(ExportError, match=rf"cannot write to export.{name}.export_dir=.*taken \(.+\)\.\n  Fix: "):
        exporter(export_dir=str(blocker), model_name="m")(model, data)


def _saved_elsewhere(path, input_names):
    """A SavedModel as a user's own code exports it (not tfx_hydra's exporter): a linear softmax over
    8x8 inputs, its serving signature taking the inputs `input_names`."""
    weights = tf.Variable(tf.random.stateless_normal((64, 10), seed=(1, 2)))

    def probabilities(*images):
        flat = tf.add_n([tf.reshape(image, (-1, 64)) for image in images])
        return {"probabilities": tf.nn.softmax(flat @ weights)}

    module = tf.Module()
    module.weights = weights
    specs = [tf.TensorSpec((None, 8, 8), tf.float32, name=name) for name in input_names]
    module.serve = tf.function(probabilities, input_signature=specs)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return str(path)


def test_evaluate_takes_a_savedmodel_whose_one_input_has_its_own_name(tmp_path, data):
    from tfx_hydra.export.source import evaluate_saved_model

    metrics = evaluate_saved_model(_saved_elsewhere(tmp_path / "pixels", ["pixels"]), data, "data=digits")
    assert set(metrics) == {"test_accuracy", "test_loss"} and 0.0 <= metrics["test_accuracy"] <= 1.0


def test_evaluate_refuses_a_savedmodel_with_two_inputs_in_one_message(tmp_path, data):
    from tfx_hydra.export.source import evaluate_saved_model

    path = _saved_elsewhere(tmp_path / "two", ["left", "right"])
    with pytest.raises(DataError, match=rf"the model at {path} takes 2 inputs \(left, right\); mode=evaluate feeds "
                                        "it one, the data's examples."):
        evaluate_saved_model(path, data, "data=digits")
