"""export=tflite: a LiteRT (TFLite) flatbuffer, optionally quantized, run back through LiteRT's
interpreter on the validation split."""

from __future__ import annotations

import os
import tempfile

from tfx_hydra.console import native_lines_to_log
from tfx_hydra.errors import ConfigError, ExportError
from tfx_hydra.export.result import (
    PARITY,
    ExportResult,
    compare_on_validation,
    features_beside,
    labels_beside,
    make_parent,
    quality_keys,
    require_parity,
)
from tfx_hydra.export.served import raw_examples, served_model
from tfx_hydra.settings.checks import require_bool, require_choice, require_non_negative


class TFLiteExport:
    """A TensorFlow Lite flatbuffer converted from the served model (raw inputs in), run back through LiteRT;
    the classes' names beside it (<model_name>.labels.txt, as Android's image classifiers read them).

    quantization: none (float32; outputs must equal Keras' within 1e-5), float16 (half the
    size), dynamic_range (int8 weights), int8 (full integer, calibrated on examples drawn from
    the training pipeline). Accuracy on the validation split is reported next to Keras'.
    """

    kind = "tflite"
    QUANTIZATIONS = ("none", "float16", "dynamic_range", "int8")

    def __init__(self, export_dir: str, model_name: str, quantization: str = "none", select_tf_ops: bool = False,
                 representative_examples: int = 200) -> None:
        require_choice("export.tflite.quantization", quantization, self.QUANTIZATIONS, fix="none")
        require_bool("export.tflite.select_tf_ops", select_tf_ops)
        require_non_negative("export.tflite.representative_examples", representative_examples,
                             zero_means="none: no int8", example=200)
        if quantization == "int8" and representative_examples < 1:
            raise ConfigError(f"export.tflite.quantization=int8 needs a representative dataset, but "
                              f"export.tflite.representative_examples={representative_examples}.",
                              fix="export.tflite.representative_examples=200")
        self.path = os.path.join(export_dir, f"{model_name}.tflite")
        self.model_name = model_name
        self.quantization = quantization
        self.select_tf_ops = select_tf_ops
        self.representative_examples = representative_examples

    def __call__(self, model, datasets) -> ExportResult:
        import tensorflow as tf

        make_parent(self.path, "export.tflite.export_dir")
        # the converter's and LiteRT's C++ lines (Ignored output_format, XNNPACK delegate): the job log's
        with native_lines_to_log():
            return self._convert_and_verify(model, datasets, tf)

    def _convert_and_verify(self, model, datasets, tf) -> ExportResult:
        served = served_model(model, datasets.spec)  # raw inputs in: the data's scaling is its first layer
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-tflite-") as saved_model:
            served.export(saved_model, format="tf_saved_model", verbose=False)
            converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
            self._configure(converter, tf, datasets)
            try:
                flatbuffer = converter.convert()
            except Exception as err:  # the converter raises ConverterError and plain exceptions alike
                raise conversion_error(err, self.select_tf_ops) from None
        with open(self.path, "wb") as out:
            out.write(flatbuffer)
        accuracy, keras_accuracy, diff = compare_on_validation(served, datasets, self._predictor())
        if self.quantization == "none":
            require_parity("tflite", diff, PARITY)
        return ExportResult(self.kind, self.path, {
            **dict(zip(quality_keys(self.kind, datasets.spec.task), (accuracy, keras_accuracy))),
            "export.tflite.max_abs_diff": diff, "export.tflite.size_bytes": float(len(flatbuffer))},
            beside=labels_beside(os.path.dirname(self.path), self.model_name, datasets.spec)
            + features_beside(os.path.dirname(self.path), self.model_name, datasets.spec))

    def _configure(self, converter, tf, datasets) -> None:
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if self.quantization == "int8" else tf.lite.OpsSet.TFLITE_BUILTINS]
        if self.select_tf_ops:
            ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
        converter.target_spec.supported_ops = ops
        if self.quantization != "none":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if self.quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if self.quantization == "int8":  # calibrated on what the model is sent: raw values
            examples = raw_examples(datasets, self.representative_examples, split="train")
            converter.representative_dataset = lambda: ([example[None]] for example in examples)

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


def conversion_error(err: Exception, select_tf_ops: bool) -> ExportError:
    """Name the op TFLite lacks when the converter says which."""
    import re

    text = str(err)
    ops = sorted(set(re.findall(r"\b(tf\.[A-Z][A-Za-z0-9_]*)", text)))  # TensorFlow op names are CamelCase
    if ops and not select_tf_ops:
        return ExportError(f"TFLite has no built-in kernel for {', '.join(ops)}.",
                           fix="export.tflite.select_tf_ops=true (links TensorFlow's kernels into the .tflite)")
    said = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return ExportError(f"TFLite conversion failed: {said}")
