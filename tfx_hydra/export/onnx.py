"""export=onnx: an ONNX graph through Keras' own exporter, run back through ONNX Runtime on the
validation split."""

from __future__ import annotations

import os

from tfx_hydra.errors import ConfigError, ExportError
from tfx_hydra.export.result import (
    PARITY,
    ExportResult,
    compare_on_validation,
    make_parent,
    quality_keys,
    require_parity,
)


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

        make_parent(self.path, "export.onnx.export_dir")
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
        accuracy, keras_accuracy, diff = compare_on_validation(
            model, datasets, lambda inputs: session.run(None, {name: inputs})[0])
        require_parity("onnx", diff, PARITY)
        return ExportResult(self.kind, self.path, {
            **dict(zip(quality_keys(self.kind, datasets.spec.task), (accuracy, keras_accuracy))),
            "export.onnx.max_abs_diff": diff, "export.onnx.size_bytes": float(os.path.getsize(self.path))})
