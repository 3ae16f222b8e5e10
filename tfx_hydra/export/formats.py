"""formats: the exporters, one per option in conf/export/ (several at once: export=[savedmodel,tflite,onnx]).

An exporter is built from its config, then called with the trained model and the
datasets; it writes its artifact, verifies it against the Keras model on the validation
split and returns an `ExportResult` that tracking logs. TensorFlow, LiteRT and ONNX Runtime
are imported inside the methods (validation must not pay for them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from tfx_hydra.errors import ConfigError, ExportError


@dataclass
class ExportResult:
    kind: str  # the export option's name, e.g. "savedmodel"
    path: str  # where the artifact was written
    metrics: dict[str, float] = field(default_factory=dict)  # verification figures


class SavedModelExport:
    """A SavedModel in TensorFlow Serving's layout: <export_dir>/<model_name>/<version>/.

    Its `serving_default` signature takes raw inputs named `inputs` (the data's own values, e.g.
    0-255 pixels: the pipeline's scaling is inside the graph) and returns `probabilities` and the
    predicted `class`. The version is one more than the highest integer version already in the
    folder, so several runs exporting to one export_dir give TF Serving versions 1, 2, 3... and it
    hot-swaps to the newest; `<export_dir>/models.config` lists every model there for
    `tensorflow_model_server --model_config_file`. The SavedModel is written to a hidden
    temporary folder first and renamed into place, so a serving process never sees half a model
    and two runs exporting at once cannot take the same version.
    """

    kind = "savedmodel"

    def __init__(self, export_dir: str, model_name: str) -> None:
        self.export_dir = export_dir
        self.model_name = model_name

    def __call__(self, model, datasets) -> ExportResult:
        model_dir = os.path.join(self.export_dir, self.model_name)
        try:
            os.makedirs(model_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".staging-", dir=model_dir)
        except OSError as err:
            raise ExportError(f"cannot write to export.savedmodel.export_dir={self.export_dir} ({err.strerror}).",
                              fix="export.savedmodel.export_dir=<a writable folder>") from None
        try:
            path = os.path.join(staging, "model")
            _write_serving_archive(model, datasets.spec, path)
            max_abs_diff = _check_serving_signature(model, path, datasets)
            version_dir = _move_to_next_version(path, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_models_config(self.export_dir)
        return ExportResult(self.kind, version_dir, {"export.savedmodel.max_abs_diff": max_abs_diff,
                                                     "export.savedmodel.version": float(os.path.basename(version_dir)),
                                                     "export.savedmodel.size_bytes": float(_folder_size(version_dir))})


def _folder_size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


def _write_serving_archive(model, spec, path: str) -> None:
    """serving_default: raw `inputs` -> {probabilities, class}, with the data's scaling in the graph."""
    import keras
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(model)

    def serve(inputs):
        probabilities = model(spec.normalize(tf.cast(inputs, tf.float32)), training=False)
        return {"probabilities": probabilities, "class": tf.argmax(probabilities, axis=-1)}

    archive.add_endpoint("serving_default", serve,
                         input_signature=[tf.TensorSpec((None, *spec.input_shape), tf.float32, name="inputs")])
    archive.write_out(path, verbose=False)


def _check_serving_signature(model, path: str, datasets) -> float:
    """Read the signature as saved_model_cli does, then serve a validation batch of raw inputs
    through the loaded SavedModel and compare with Keras on the same (scaled) batch."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    signature = saved_model_utils.get_meta_graph_def(path, "serve").signature_def["serving_default"]
    if set(signature.inputs) != {"inputs"} or set(signature.outputs) != {"probabilities", "class"}:
        raise ExportError(f"serving_default has inputs {sorted(signature.inputs)} and outputs "
                          f"{sorted(signature.outputs)}, not inputs -> probabilities, class.")
    scaled, _ = next(iter(datasets.validation))
    served = tf.saved_model.load(path).signatures["serving_default"](inputs=datasets.spec.denormalize(scaled))
    expected = np.asarray(model(scaled, training=False))
    diff = float(np.max(np.abs(served["probabilities"].numpy() - expected)))
    _require_parity("SavedModel", diff, PARITY)
    if not np.array_equal(served["class"].numpy(), np.argmax(expected, axis=-1)):
        raise ExportError("the SavedModel's predicted classes differ from the Keras model's.")
    return diff


def write_models_config(export_dir: str) -> str:
    """<export_dir>/models.config naming every versioned model there, for TF Serving's --model_config_file."""
    names = sorted(name for name in os.listdir(export_dir)
                   if os.path.isdir(os.path.join(export_dir, name)) and next_version(os.path.join(export_dir, name)) > 1)
    entries = "".join(f'  config {{\n    name: "{name}"\n    base_path: "{os.path.abspath(os.path.join(export_dir, name))}"\n'
                      f'    model_platform: "tensorflow"\n  }}\n' for name in names)
    path = os.path.join(export_dir, "models.config")
    with open(path, "w", encoding="utf-8") as config:
        config.write(f"model_config_list {{\n{entries}}}\n")
    return path


class KerasExport:
    """The native Keras file, <export_dir>/<model_name>.keras, verified by loading it back."""

    kind = "keras"

    def __init__(self, export_dir: str, model_name: str) -> None:
        self.path = os.path.join(export_dir, f"{model_name}.keras")

    def __call__(self, model, datasets) -> ExportResult:
        import keras
        import numpy as np

        _make_parent(self.path, "export.keras.export_dir")
        model.save(self.path)
        inputs, _ = next(iter(datasets.validation))
        import tfx_hydra.models.layers  # noqa: F401  (registers HubLayer, Preprocess for loading)

        reloaded = keras.models.load_model(self.path)
        diff = float(np.max(np.abs(np.asarray(reloaded(inputs)) - np.asarray(model(inputs, training=False)))))
        _require_parity("keras", diff, PARITY)
        return ExportResult(self.kind, self.path, {"export.keras.max_abs_diff": diff,
                                                   "export.keras.size_bytes": float(os.path.getsize(self.path))})


class TFLiteExport:
    """A TensorFlow Lite flatbuffer converted from the SavedModel, run back through LiteRT.

    quantization: none (float32; outputs must equal Keras' within 1e-5), float16 (half the
    size), dynamic_range (int8 weights), int8 (full integer, calibrated on examples drawn from
    the training pipeline). Accuracy on the validation split is reported next to Keras'.
    """

    kind = "tflite"
    QUANTIZATIONS = ("none", "float16", "dynamic_range", "int8")

    def __init__(self, export_dir: str, model_name: str, quantization: str = "none", select_tf_ops: bool = False,
                 representative_examples: int = 200) -> None:
        if quantization not in self.QUANTIZATIONS:
            raise ConfigError(f"export.tflite.quantization={quantization} is not one of: "
                              f"{', '.join(self.QUANTIZATIONS)}.", fix="export.tflite.quantization=none")
        if not isinstance(select_tf_ops, bool):
            raise ConfigError(f"export.tflite.select_tf_ops={select_tf_ops}: expected true or false.",
                              fix="export.tflite.select_tf_ops=false")
        if not isinstance(representative_examples, int) or isinstance(representative_examples, bool):
            raise ConfigError(f"export.tflite.representative_examples={representative_examples}: expected a number "
                              "of examples.", fix="export.tflite.representative_examples=200")
        if quantization == "int8" and representative_examples < 1:
            raise ConfigError(f"export.tflite.quantization=int8 needs a representative dataset, but "
                              f"export.tflite.representative_examples={representative_examples}.",
                              fix="export.tflite.representative_examples=200")
        self.path = os.path.join(export_dir, f"{model_name}.tflite")
        self.quantization = quantization
        self.select_tf_ops = select_tf_ops
        self.representative_examples = representative_examples

    def __call__(self, model, datasets) -> ExportResult:
        import tensorflow as tf

        _make_parent(self.path, "export.tflite.export_dir")
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-tflite-") as saved_model:
            model.export(saved_model, format="tf_saved_model", verbose=False)
            converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
            self._configure(converter, tf, datasets)
            try:
                flatbuffer = converter.convert()
            except Exception as err:  # the converter raises ConverterError and plain exceptions alike
                raise _conversion_error(err, self.select_tf_ops) from None
        with open(self.path, "wb") as out:
            out.write(flatbuffer)
        accuracy, keras_accuracy, diff = _compare_on_validation(model, datasets, self._predictor())
        if self.quantization == "none":
            _require_parity("tflite", diff, PARITY)
        return ExportResult(self.kind, self.path, {
            "export.tflite.accuracy": accuracy, "export.tflite.keras_accuracy": keras_accuracy,
            "export.tflite.max_abs_diff": diff, "export.tflite.size_bytes": float(len(flatbuffer))})

    def _configure(self, converter, tf, datasets) -> None:
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if self.quantization == "int8" else tf.lite.OpsSet.TFLITE_BUILTINS]
        if self.select_tf_ops:
            ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
        converter.target_spec.supported_ops = ops
        if self.quantization != "none":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if self.quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if self.quantization == "int8":
            examples = datasets.train.unbatch().take(self.representative_examples).batch(1)
            converter.representative_dataset = lambda: ([inputs] for inputs, _ in examples)

    def _predictor(self):
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=self.path)
        (source,), (target,) = interpreter.get_input_details(), interpreter.get_output_details()

        def predict(inputs):
            interpreter.resize_tensor_input(source["index"], inputs.shape)
            interpreter.allocate_tensors()
            interpreter.set_tensor(source["index"], inputs)
            interpreter.invoke()
            return interpreter.get_tensor(target["index"])
        return predict


class OnnxExport:
    """An ONNX model (Keras' own exporter, which drives tf2onnx), run back through ONNX Runtime."""

    kind = "onnx"

    def __init__(self, export_dir: str, model_name: str, opset: int | None = None) -> None:
        if opset is not None and (not isinstance(opset, int) or isinstance(opset, bool) or opset < 1):
            raise ConfigError(f"export.onnx.opset={opset}: expected an ONNX opset number (e.g. 17) or null "
                              "(the converter's default).", fix="export.onnx.opset=null")
        self.path = os.path.join(export_dir, f"{model_name}.onnx")
        self.opset = opset

    def __call__(self, model, datasets) -> ExportResult:
        import onnxruntime

        _make_parent(self.path, "export.onnx.export_dir")
        try:
            model.export(self.path, format="onnx", verbose=False, **({"opset_version": self.opset} if self.opset
                                                                     else {}))
        except Exception as err:
            raise ExportError(f"ONNX conversion failed ({type(err).__name__}: {err}).",
                              fix="try another export.onnx.opset, or export=[savedmodel] and convert with "
                              "python -m tf2onnx.convert --saved-model") from None
        try:
            session = onnxruntime.InferenceSession(self.path, providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ExportError(f"ONNX Runtime cannot load the exported model ({str(err).splitlines()[0][:300]}).",
                              fix="export.onnx.opset=null (the converter's default) or a recent opset such as 17"
                              ) from None
        name = session.get_inputs()[0].name
        accuracy, keras_accuracy, diff = _compare_on_validation(
            model, datasets, lambda inputs: session.run(None, {name: inputs})[0])
        _require_parity("onnx", diff, PARITY)
        return ExportResult(self.kind, self.path, {
            "export.onnx.accuracy": accuracy, "export.onnx.keras_accuracy": keras_accuracy,
            "export.onnx.max_abs_diff": diff, "export.onnx.size_bytes": float(os.path.getsize(self.path))})


class TfjsExport:
    """TensorFlow.js, by running `tensorflowjs_converter` from a separate environment on our SavedModel.

    tensorflowjs 4.22 depends on tensorflow-decision-forests, which pins TensorFlow 2.19, so the
    converter cannot be installed next to tfx_hydra. Install it in its own venv and point
    export.tfjs.converter at it (README: Exports); the converter reads the SavedModel (raw inputs,
    serving_default) and writes <export_dir>/<model_name>_tfjs/model.json plus weight shards.
    """

    kind = "tfjs"
    INSTALL = ("python3 -m venv ~/tfjs-env && ~/tfjs-env/bin/pip install tensorflowjs==4.22.0, then "
               "export.tfjs.converter=$HOME/tfjs-env/bin/tensorflowjs_converter")

    def __init__(self, export_dir: str, model_name: str, converter: str = "tensorflowjs_converter") -> None:
        self.path = os.path.join(export_dir, f"{model_name}_tfjs")
        self.converter = converter

    def __call__(self, model, datasets) -> ExportResult:
        import subprocess

        executable = shutil.which(os.path.expanduser(self.converter))
        if not executable:
            raise ExportError(f"the TensorFlow.js converter export.tfjs.converter={self.converter} is not installed "
                              "here (tensorflowjs pins TensorFlow 2.19, so it lives in its own environment).",
                              fix=self.INSTALL)
        _make_parent(self.path, "export.tfjs.export_dir")
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-tfjs-") as saved_model:
            _write_serving_archive(model, datasets.spec, saved_model)
            done = subprocess.run([executable, "--input_format=tf_saved_model", "--signature_name=serving_default",
                                   "--saved_model_tags=serve", saved_model, self.path],
                                  capture_output=True, text=True, check=False)
        if done.returncode != 0 or not os.path.isfile(os.path.join(self.path, "model.json")):
            raise ExportError(f"{self.converter} failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-500:]}")
        return ExportResult(self.kind, self.path, {"export.tfjs.size_bytes": float(_folder_size(self.path))})


PARITY = 1e-5  # largest absolute difference from Keras' output an unquantized export may show


def _compare_on_validation(model, datasets, predict) -> tuple[float, float, float]:
    """Accuracy of `predict` and of Keras on the validation split, and their largest output difference."""
    import numpy as np

    hits = keras_hits = total = 0
    diff = 0.0
    for inputs, labels in datasets.validation:
        inputs = np.asarray(inputs, dtype="float32")
        exported = np.asarray(predict(inputs))
        expected = np.asarray(model(inputs, training=False), dtype="float32")
        diff = max(diff, float(np.max(np.abs(exported - expected))))
        hits += int(np.sum(np.argmax(exported, axis=-1) == np.asarray(labels)))
        keras_hits += int(np.sum(np.argmax(expected, axis=-1) == np.asarray(labels)))
        total += len(inputs)
    return hits / total, keras_hits / total, diff


def _require_parity(kind: str, diff: float, limit: float) -> None:
    if diff > limit:
        raise ExportError(f"the {kind} export's outputs differ from the Keras model's by {diff:.3g} "
                          f"(more than {limit:g}).")


def _make_parent(path: str, key: str) -> None:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        reason = err.strerror
    else:
        if os.access(folder, os.W_OK):
            return
        reason = "Permission denied"
    raise ExportError(f"cannot write to {key}={folder} ({reason}).", fix=f"{key}=<a writable folder>")


def _conversion_error(err: Exception, select_tf_ops: bool) -> ExportError:
    """Name the op TFLite lacks when the converter says which."""
    import re

    text = str(err)
    ops = sorted(set(re.findall(r"\b(tf\.[A-Z][A-Za-z0-9_]*)", text)))  # TensorFlow op names are CamelCase
    if ops and not select_tf_ops:
        return ExportError(f"TFLite has no built-in kernel for {', '.join(ops)}.",
                           fix="export.tflite.select_tf_ops=true (links TensorFlow's kernels into the .tflite)")
    return ExportError(f"TFLite conversion failed: {text.strip().splitlines()[0] if text.strip() else type(err).__name__}")


def next_version(model_dir: str) -> int:
    """One more than the highest integer-named folder in `model_dir` (1 for an empty one)."""
    versions = [int(n) for n in os.listdir(model_dir) if n.isdigit()] if os.path.isdir(model_dir) else []
    return max(versions, default=0) + 1


def _move_to_next_version(source: str, model_dir: str) -> str:
    for _ in range(100):  # another run may take the version between our listing and our rename
        target = os.path.join(model_dir, str(next_version(model_dir)))
        try:
            os.rename(source, target)  # atomic; fails if target exists (as a non-empty dir)
            return target
        except OSError:
            if not os.path.exists(target):
                raise
    raise ExportError(f"could not claim a new version folder in {model_dir} after 100 tries.")
