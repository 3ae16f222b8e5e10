"""export: conf/export/: the exporters, and the export step that runs the selected ones.

    formats.py  one exporter per option (SavedModel in TF Serving's layout, Keras, TFLite, ONNX, TF.js):
                built from its config, called with the trained model and the datasets, it writes its
                artifact, verifies it against the Keras model and returns an `ExportResult`
    step.py     the run's export step: check the selected exporters before training, run them after
    source.py   mode=evaluate: an exported SavedModel found again and evaluated on the test split

TensorFlow, LiteRT and ONNX Runtime are imported inside the methods (validation must not pay for them).
"""

from tfx_hydra.export.formats import (ExportResult, KerasExport, OnnxExport, SavedModelExport, TFLiteExport, TfjsExport,
                                      next_version, write_models_config)
from tfx_hydra.export.source import evaluate_saved_model, resolve_export_source
from tfx_hydra.export.step import check_exporters, export_model, selected_exporters

__all__ = ["ExportResult", "KerasExport", "OnnxExport", "SavedModelExport", "TFLiteExport", "TfjsExport",
           "check_exporters", "evaluate_saved_model", "export_model", "next_version", "resolve_export_source",
           "selected_exporters", "write_models_config"]
