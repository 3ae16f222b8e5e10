"""SavedModel export: TF Serving's versioned layout, a serving_default signature, output parity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from omegaconf import OmegaConf

from tests.helpers import REPO
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
    assert second.figures["export.savedmodel.version"] == 2.0
    graph = tmp_path / "digits_mlp" / "2" / "saved_model.pb"
    assert second.figures["export.savedmodel.size_bytes"] > os.path.getsize(graph)


def test_serving_default_takes_raw_inputs_and_names_its_outputs(trained, tmp_path):
    model, data = trained
    result = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.figures["export.savedmodel.max_abs_diff"] < 1e-5
    serve = tf.saved_model.load(result.path).signatures["serving_default"]
    scaled, _ = next(iter(data.test))
    raw = scaled.numpy() * 16.0  # the digits' own 0..16 pixel values: scaling is inside the graph
    served = serve(inputs=tf.constant(raw))
    expected = model.predict(scaled, verbose=0)
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-5)
    np.testing.assert_array_equal(served["class_index"].numpy(), np.argmax(expected, axis=1))
    np.testing.assert_array_equal(served["class"].numpy().astype(str), np.argmax(expected, axis=1).astype(str))
    labels = open(os.path.join(result.path, "assets.extra", "labels.txt"), encoding="utf-8").read().split("\n")
    assert labels == [str(i) for i in range(10)] + [""]  # one name per line, in index order


def test_the_classes_names_are_what_every_export_answers_with_and_carries(tmp_path):
    """A source that names its classes (here from_pipelines' class_names): the SavedModel answers `class` by name
    beside `class_index` and holds assets.extra/labels.txt; the .keras, TFLite and ONNX files get
    <model>.labels.txt beside them, and the ONNX file its metadata `class_names`."""
    import onnxruntime

    from tfx_hydra.data import from_pipelines

    x = np.random.default_rng(0).normal(size=(120, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    pipelines = [tf.data.Dataset.from_tensor_slices((x[i::3], y[i::3])) for i in range(3)]
    data = from_pipelines(*pipelines, input_shape=[4], num_classes=3, batch_size=8, class_names=["low", "mid", "high"])
    model = mlp(name="named", input_shape=[4], num_classes=3)
    results = {exporter.kind: exporter(model, data) for exporter in (
        SavedModelExport(export_dir=str(tmp_path), model_name="named", warmup_requests=0),
        KerasExport(export_dir=str(tmp_path), model_name="named"),
        TFLiteExport(export_dir=str(tmp_path), model_name="named"),
        OnnxExport(export_dir=str(tmp_path), model_name="named"))}
    served = tf.saved_model.load(results["savedmodel"].path).signatures["serving_default"](inputs=tf.constant(x[:6]))
    names = np.asarray(["low", "mid", "high"])
    assert served["class"].numpy().astype(str).tolist() == names[served["class_index"].numpy()].tolist()
    assert (tmp_path / "named" / "1" / "assets.extra" / "labels.txt").read_text() == "low\nmid\nhigh\n"
    for kind in ("keras", "tflite", "onnx"):
        assert results[kind].beside == [str(tmp_path / "named.labels.txt")]
    assert (tmp_path / "named.labels.txt").read_text() == "low\nmid\nhigh\n"
    meta = onnxruntime.InferenceSession(results["onnx"].path).get_modelmeta().custom_metadata_map
    assert json.loads(meta["class_names"]) == ["low", "mid", "high"]


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_saved_model_cli_shows_the_named_signature(trained, tmp_path):
    model, data = trained
    path = SavedModelExport(export_dir=str(tmp_path), model_name="m")(model, data).path
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True, check=True).stdout
    assert "signature_def['serving_default']" in shown
    assert "inputs['inputs'] tensor_info" in shown and "shape: (-1, 8, 8)" in shown
    assert "outputs['probabilities'] tensor_info" in shown and "outputs['class'] tensor_info" in shown


def parsed_models_config(export_dir) -> dict:
    """models.config parsed by TF Serving's own proto: name -> (base_path, platform, served versions, labels)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse((export_dir / "models.config").read_text(), model_server_config_pb2.ModelServerConfig())
    return {entry.name: (entry.base_path, entry.model_platform, list(entry.model_version_policy.specific.versions),
                         dict(entry.version_labels)) for entry in config.model_config_list.config}


def test_models_config_is_tf_serving_s_own_proto_with_every_model_and_its_labels(trained, tmp_path):
    """Every models.config written parses with TF Serving's ModelServerConfig: each model, its folder, the
    versions it serves (the labelled ones and the newest) and its labels: a model's first version is
    `stable`, a run's version_label points at its own version, and a later run keeps them."""
    model, data = trained
    SavedModelExport(export_dir=str(tmp_path), model_name="mlp", warmup_requests=0)(model, data)
    assert parsed_models_config(tmp_path) == {"mlp": (str(tmp_path / "mlp"), "tensorflow", [1], {"stable": 1})}
    SavedModelExport(export_dir=str(tmp_path), model_name="mlp", version_label="canary", warmup_requests=0)(model, data)
    SavedModelExport(export_dir=str(tmp_path), model_name="cnn", warmup_requests=0)(model, data)
    assert parsed_models_config(tmp_path) == {
        "cnn": (str(tmp_path / "cnn"), "tensorflow", [1], {"stable": 1}),
        "mlp": (str(tmp_path / "mlp"), "tensorflow", [1, 2], {"stable": 1, "canary": 2})}
    SavedModelExport(export_dir=str(tmp_path), model_name="mlp", warmup_requests=0)(model, data)
    assert parsed_models_config(tmp_path)["mlp"][2:] == ([1, 2, 3], {"stable": 1, "canary": 2})  # newest served too
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the config was renamed into place


def test_a_label_whose_version_is_gone_is_dropped_and_stable_falls_back_to_the_oldest(trained, tmp_path):
    """TF Serving refuses a label on a version it does not load: a deleted version takes its labels along."""
    model, data = trained
    for label in (None, "canary"):
        SavedModelExport(export_dir=str(tmp_path), model_name="m", version_label=label, warmup_requests=0)(model, data)
    shutil.rmtree(tmp_path / "m" / "1")
    SavedModelExport(export_dir=str(tmp_path), model_name="m", warmup_requests=0)(model, data)
    assert parsed_models_config(tmp_path)["m"][2:] == ([2, 3], {"canary": 2})
    shutil.rmtree(tmp_path / "m" / "2")
    SavedModelExport(export_dir=str(tmp_path), model_name="m", warmup_requests=0)(model, data)
    assert parsed_models_config(tmp_path)["m"][2:] == ([3, 4], {"stable": 3})


def test_a_models_config_tf_serving_cannot_read_is_one_error_with_the_fix(trained, tmp_path):
    model, data = trained
    (tmp_path / "models.config").write_text("model_config_list { config { nme: 'x' } }\n")
    with pytest.raises(ExportError, match=r"(?s)models.config is not a models.config TensorFlow Serving can read: .*"
                                          r"Fix: correct it, or remove it"):
        SavedModelExport(export_dir=str(tmp_path), model_name="m", warmup_requests=0)(model, data)


@pytest.mark.parametrize(("settings", "message"), [
    ({"version_label": "can ary"}, r"export.savedmodel.version_label='can ary' is not a version label TF Serving"),
    ({"version_label": "1st"}, r"version_label='1st' is not a version label"),
    ({"warmup_requests": 1001}, r"warmup_requests=1001: give a whole number from 0 .* to 1000"),
    ({"warmup_requests": -1}, r"warmup_requests=-1"),
    ({"warmup_requests": 2.5}, r"warmup_requests=2.5"),
])
def test_bad_serving_settings_are_refused_when_the_exporter_is_built(settings, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        SavedModelExport(export_dir=str(tmp_path), model_name="m", **settings)


def test_warm_up_records_are_tf_serving_s_prediction_logs_of_real_examples_and_replay_through_the_signature(
        trained, tmp_path):
    """assets.extra/tf_serving_warmup_requests, read back with TF Serving's protos: one PredictRequest per
    validation example for serving_default, its raw values; replayed through the exported signature as the
    server replays them, each answers what the Keras model answers for that example."""
    from tfx_hydra.export.warmup import read_warmup_requests

    model, data = trained
    path = SavedModelExport(export_dir=str(tmp_path), model_name="digits_mlp", warmup_requests=5)(model, data).path
    requests = read_warmup_requests(path)
    assert len(requests) == 5
    assert {(r.model_spec.name, r.model_spec.signature_name) for r in requests} == {("digits_mlp", "serving_default")}
    serve = tf.saved_model.load(path).signatures["serving_default"]
    scaled, _ = next(iter(data.validation))
    for request, example in zip(requests, scaled.numpy()):
        raw = tf.make_ndarray(request.inputs["inputs"])
        assert raw.shape == (1, 8, 8) and raw.dtype == np.float32
        np.testing.assert_allclose(raw[0], example * 16.0, atol=1e-5)  # the data's own 0..16 values
        served = serve(inputs=tf.constant(raw))
        np.testing.assert_allclose(served["probabilities"].numpy(), model(example[None], training=False), atol=1e-5)
    no_warmup = SavedModelExport(export_dir=str(tmp_path), model_name="bare", warmup_requests=0)(model, data).path
    assert os.listdir(os.path.join(no_warmup, "assets.extra")) == ["labels.txt"]  # the classes' names only



def test_requests_tf_serving_refuses_are_one_clear_error_in_the_client_helper_and_in_the_answer(trained, tmp_path):
    """The classification export (inputs [None, 8, 8]): a good row request is answered with each example's
    probabilities and class; a request of the wrong shape, input name, values or signature is one RequestError
    naming what the signature takes (and TF Serving's `{"error": ...}` body from the answering side)."""
    from tfx_hydra.errors import RequestError
    from tfx_hydra.export.requests import answer_rest, predict_request, rest_body, signature_of

    model, data = trained
    path = SavedModelExport(export_dir=str(tmp_path), model_name="m", warmup_requests=0)(model, data).path
    signature = signature_of(path)
    assert signature.inputs["inputs"].shown() == "float32 of shape [None, 8, 8]"
    assert set(signature.outputs) == {"probabilities", "class", "class_index"}
    assert signature.outputs["class"].dtype == "string"
    examples = np.full((2, 8, 8), 8.0, "float32")
    (first, second) = answer_rest(path, rest_body(signature, examples))["predictions"]
    assert len(first["probabilities"]) == 10 and first["class_index"] == int(np.argmax(first["probabilities"]))
    assert first["class"] == str(first["class_index"])  # the digits' names are their numbers
    with pytest.raises(RequestError, match=r"(?s)input 'inputs' takes float32 of shape \[None, 8, 8\]; the request "
                                           r"gives shape \[8, 8\]\..*Fix: send a batch"):
        rest_body(signature, examples[0])  # one example, not a batch of one
    with pytest.raises(RequestError, match=r"the request gives shape \[2, 64\]"):
        predict_request(signature, examples.reshape(2, 64), "m")
    with pytest.raises(RequestError, match=r"the request's values are not float32"):
        rest_body(signature, [[["a"] * 8] * 8])
    with pytest.raises(RequestError, match=r"has no input 'pixels'; its inputs are inputs"):
        rest_body(signature, {"pixels": examples})
    with pytest.raises(RequestError, match=r"has no signature 'predict'; it has serving_default"):
        signature_of(path, "predict")
    refused = answer_rest(path, {"signature_name": "serving_default", "instances": examples[:, :4].tolist()})
    assert refused == {"error": "input 'inputs' takes float32 of shape [None, 8, 8]; the request gives shape "
                                "[2, 4, 8]."}
    assert "error" in answer_rest(path, {"instances": [], "inputs": []})


def test_text_requests_carry_any_unicode_as_utf8_and_refuse_what_is_not_text():
    """A text model's string input: the JSON body keeps the text as written, the gRPC tensor its UTF-8 bytes."""
    from tfx_hydra.errors import RequestError
    from tfx_hydra.export.requests import Signature, TensorSpec, predict_request, rest_body

    signature = Signature("serving_default", {"inputs": TensorSpec("string", (None,))}, {})
    texts = ["un café très chaud", "naïve 東京"]
    assert rest_body(signature, texts)["instances"] == texts
    assert json.loads(json.dumps(rest_body(signature, texts, columnar=True)))["inputs"] == texts
    tensor = predict_request(signature, texts, "text").inputs["inputs"]
    assert [v.decode() for v in tf.make_ndarray(tensor).tolist()] == texts
    with pytest.raises(RequestError, match=r"input 'inputs' takes string of shape \[None\]; the request gives "
                                           r"values that are not text"):
        rest_body(signature, [1, 2])

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
    assert result.figures["export.tflite.max_abs_diff"] < 1e-5
    assert result.figures["export.tflite.accuracy"] == result.figures["export.tflite.keras_accuracy"]
    interpreter = Interpreter(model_path=result.path)
    assert list(interpreter.get_input_details()[0]["shape_signature"]) == [-1, 8, 8]


@pytest.mark.parametrize("quantization", ["float16", "dynamic_range", "int8"])
def test_quantized_tflite_is_smaller_and_about_as_accurate(trained, tmp_path, quantization):
    model, data = trained
    plain = TFLiteExport(export_dir=str(tmp_path / "plain"), model_name="m")(model, data)
    quantized = TFLiteExport(export_dir=str(tmp_path), model_name="m", quantization=quantization)(model, data)
    assert quantized.figures["export.tflite.size_bytes"] < 0.7 * plain.figures["export.tflite.size_bytes"]
    assert abs(quantized.figures["export.tflite.accuracy"] - quantized.figures["export.tflite.keras_accuracy"]) < 0.05


def test_onnx_equals_keras_in_onnx_runtime(trained, tmp_path):
    model, data = trained
    result = OnnxExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.path == str(tmp_path / "m.onnx")
    assert result.figures["export.onnx.max_abs_diff"] < 1e-5
    assert result.figures["export.onnx.accuracy"] == result.figures["export.onnx.keras_accuracy"]


def test_keras_file_reloads_to_the_same_model(trained, tmp_path):
    model, data = trained
    result = KerasExport(export_dir=str(tmp_path), model_name="m")(model, data)
    assert result.path == str(tmp_path / "m.keras") and result.figures["export.keras.max_abs_diff"] == 0.0


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
    assert "pip install -r requirements/tfjs.txt" in message


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
json.dump({{"args": sys.argv[1:-2], "format": "graph-model", "weightsManifest": [],
           "signature": {{"inputs": {{"inputs": {{}}}}, "outputs": {{"probabilities": {{}}, "class_index": {{}}}}}}}},
          open(os.path.join(out, "model.json"), "w"))
""")
    fake.chmod(0o755)
    result = TfjsExport(export_dir=str(tmp_path / "export"), model_name="m", converter=str(fake))(model, data)
    assert result.path == str(tmp_path / "export" / "m_tfjs")
    args = json.loads((tmp_path / "export" / "m_tfjs" / "model.json").read_text())["args"]
    assert args[:3] == ["--input_format=tf_saved_model", "--signature_name=serving_default", "--saved_model_tags=serve"]
    assert len(args) == 4 and args[3].startswith("--metadata=class_names:")  # model.json's userDefinedMetadata



def tfjs_environment() -> tuple[str, str | None]:
    """The converter of requirements/tfjs.txt's environment (.ci/run builds it) and, when there is one, a
    node_modules folder holding @tensorflow/tfjs to predict with in Node."""
    converter = os.environ.get("TFX_HYDRA_TFJS_CONVERTER", "")
    modules = os.environ.get("TFX_HYDRA_TFJS_NODE_MODULES")
    required = os.environ.get("TFX_HYDRA_REQUIRE_TFJS") == "1"
    if not os.access(converter, os.X_OK):
        why = "no TensorFlow.js converter environment here (TFX_HYDRA_TFJS_CONVERTER; .ci/run builds one from " \
              "requirements/tfjs.txt)"
        pytest.fail(why + " but TFX_HYDRA_REQUIRE_TFJS=1") if required else pytest.skip(why)
    node = shutil.which("node")
    if not (node and modules and os.path.isdir(os.path.join(modules, "@tensorflow", "tfjs"))):
        if required:
            pytest.fail("TFX_HYDRA_REQUIRE_TFJS=1 but no node with @tensorflow/tfjs (TFX_HYDRA_TFJS_NODE_MODULES)")
        modules = None
    return converter, modules


@pytest.mark.slow
def test_tfjs_converts_in_the_pinned_environment_and_answers_in_node_as_the_savedmodel_does(trained, tmp_path):
    """The README's TF.js path for real: requirements/tfjs.txt's converter on our SavedModel, its model.json and
    weight shards checked by the exporter, then (where Node and @tensorflow/tfjs are) the graph model loaded in
    Node answers a batch of raw inputs as the SavedModel's signature does."""
    converter, modules = tfjs_environment()
    model, data = trained
    result = TfjsExport(export_dir=str(tmp_path), model_name="m", converter=converter)(model, data)
    assert result.figures["export.tfjs.weights"] >= 4 and result.figures["export.tfjs.size_bytes"] > 0
    if modules is None:
        print("TF.js: converted, model.json and its weights manifest checked; no Node with @tensorflow/tfjs here "
              "for a prediction")
        return
    raw = np.random.default_rng(0).uniform(0, 16, (5, 8, 8)).astype("float32")
    script, inputs, outputs = REPO / "tests" / "tfjs" / "predict.js", tmp_path / "in.json", tmp_path / "out.json"
    inputs.write_text(json.dumps(raw.tolist()))
    done = subprocess.run(["node", str(script), result.path, str(inputs), str(outputs)],
                          env={**os.environ, "NODE_PATH": modules}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answered = json.loads(outputs.read_text())
    saved = SavedModelExport(export_dir=str(tmp_path / "sm"), model_name="m", warmup_requests=0)(model, data).path
    expected = tf.saved_model.load(saved).signatures["serving_default"](inputs=tf.constant(raw))
    np.testing.assert_allclose(answered["probabilities"], expected["probabilities"].numpy(), atol=1e-5)
    assert answered["class_index"] == expected["class_index"].numpy().tolist()
    metadata = json.loads((Path(result.path) / "model.json").read_text())["userDefinedMetadata"]
    assert metadata["class_names"] == [str(i) for i in range(10)]  # TF.js answers numbers: the names are here


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


TEXT_OPS_GONE = """
import sys
sys.modules["tensorflow_text"] = None  # TensorFlow Text not installed: its import fails, as it does there
from tfx_hydra.export.served import load_saved_model
try:
    load_saved_model(sys.argv[1])
except Exception as err:
    print(type(err).__name__, str(err))
"""


@pytest.mark.slow
def test_a_savedmodel_of_tensorflow_text_ops_loads_with_them_and_without_them_says_what_to_install(tmp_path):
    import tensorflow_text as text

    class Words(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = text.WhitespaceTokenizer()

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def count(self, lines):
            return self.tokenizer.tokenize(lines).row_lengths()

    words = Words()
    tf.saved_model.save(words, str(tmp_path / "words"), signatures={"serving_default": words.count})
    from tfx_hydra.export.served import load_saved_model

    assert load_saved_model(str(tmp_path / "words")).signatures["serving_default"](
        lines=tf.constant(["a b c", "d"]))["output_0"].numpy().tolist() == [3, 1]
    done = subprocess.run([sys.executable, "-c", TEXT_OPS_GONE, str(tmp_path / "words")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("ExportError")]
    assert said.startswith(f"ExportError ExportError: the SavedModel at {tmp_path / 'words'} holds ops TensorFlow "
                           "alone does not have (TFText>WhitespaceTokenizeWithOffsets")
    assert 'pip install "tfx_hydra[keras-hub]"' in done.stdout


def test_an_op_the_onnx_converter_left_is_named_and_an_invalid_graph_otherwise_points_at_the_opset():
    from tfx_hydra.export.onnx import unloadable

    runtime = ('[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from m.onnx failed:This is an invalid model. '
               'In Node, ("model/backbone/mlp/Gelu/Erfc", {op}, "", -1) : ("x": tensor(float),) -> ("y",)')
    kept = str(unloadable(runtime.format(op="Erfc")))
    assert "the converter (tf2onnx) left TensorFlow's Erfc op in it, which no ONNX operator computes" in kept
    assert "Fix: leave onnx out for this model" in kept
    assert "Fix: export.onnx.opset=null" in str(unloadable(runtime.format(op="Reshape")))  # an ONNX op: the opset
