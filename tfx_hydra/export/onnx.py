"""export=onnx: an ONNX graph through Keras' own exporter, run back through ONNX Runtime on the
validation split."""

from __future__ import annotations

import os

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
from tfx_hydra.export.served import served_model


class OnnxExport:
    """An ONNX model of the served model (raw inputs in; Keras' own exporter, which drives tf2onnx), run back
    through ONNX Runtime; the classes' names in its metadata (`class_names`) and beside it (.labels.txt)."""

    kind = "onnx"

    def __init__(self, export_dir: str, model_name: str, opset: int | None = None) -> None:
        if opset is not None and (not isinstance(opset, int) or isinstance(opset, bool) or opset < 1):
            raise ConfigError(f"export.onnx.opset={opset}: expected an ONNX opset number (e.g. 17) or null "
                              "(the converter's default).", fix="export.onnx.opset=null")
        self.path = os.path.join(export_dir, f"{model_name}.onnx")
        self.model_name = model_name
        self.opset = opset

    def __call__(self, model, datasets) -> ExportResult:
        import onnxruntime

        make_parent(self.path, "export.onnx.export_dir")
        served = served_model(model, datasets.spec)  # raw inputs in: the data's scaling is its first layer
        try:
            served.export(self.path, format="onnx", verbose=False, **({"opset_version": self.opset} if self.opset
                                                                     else {}))
        except Exception as err:
            raise ExportError(f"ONNX conversion failed ({type(err).__name__}: {err}).",
                              fix="try another export.onnx.opset, or export=[savedmodel] and convert with "
                              "python -m tf2onnx.convert --saved-model") from None
        write_metadata(self.path, {CLASS_NAMES_KEY: list(datasets.spec.names),
                                   FEATURE_NAMES_KEY: list(datasets.spec.feature_names)})
        try:
            session = onnxruntime.InferenceSession(self.path, providers=["CPUExecutionProvider"])
        except Exception as err:
            raise unloadable(str(err)) from None
        name = session.get_inputs()[0].name
        accuracy, keras_accuracy, diff = compare_on_validation(
            served, datasets, lambda inputs: session.run(None, {name: inputs})[0])
        require_parity("onnx", diff, PARITY)
        return ExportResult(self.kind, self.path, {
            **dict(zip(quality_keys(self.kind, datasets.spec.task), (accuracy, keras_accuracy))),
            "export.onnx.max_abs_diff": diff, "export.onnx.size_bytes": float(os.path.getsize(self.path))},
            beside=labels_beside(os.path.dirname(self.path), self.model_name, datasets.spec)
            + features_beside(os.path.dirname(self.path), self.model_name, datasets.spec))


def unloadable(error: str) -> ExportError:
    """ONNX Runtime's refusal said: a TensorFlow op tf2onnx passed through unconverted (keras-hub's transformers
    compute their exact GELU with Erfc, which no opset has) is named as such, else the opset is the suspect."""
    import re

    import onnx.defs

    kept = re.search(r'In Node, \("[^"]*", (\w+), "",', error)
    if kept and not onnx.defs.has(kept.group(1)):
        return ExportError(f"ONNX Runtime cannot load the exported model: the converter (tf2onnx) left TensorFlow's "
                           f"{kept.group(1)} op in it, which no ONNX operator computes.",
                           fix="leave onnx out for this model (e.g. export=[savedmodel,keras,tflite]): no opset "
                           "adds the op")
    return ExportError(f"ONNX Runtime cannot load the exported model ({error.splitlines()[0][:300]}).",
                       fix="export.onnx.opset=null (the converter's default) or a recent opset such as 17")


CLASS_NAMES_KEY = "class_names"  # the ONNX model's metadata entries: JSON lists of the classes' names...
FEATURE_NAMES_KEY = "feature_names"  # ...and of a table's columns, in the order its one input takes them


def write_metadata(path: str, entries: dict[str, list]) -> None:
    """Names into the ONNX file's own metadata (`metadata_props`, which ONNX Runtime reads back as
    `session.get_modelmeta().custom_metadata_map`), each a JSON list in index order; empty ones left out."""
    import json

    import onnx

    entries = {key: names for key, names in entries.items() if names}
    if not entries:
        return
    model = onnx.load(path)
    for key, names in entries.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(names)
    onnx.save(model, path)
