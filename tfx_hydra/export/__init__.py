"""export: conf/export/: the exporters, and the export step that runs the selected ones.

One exporter per option, each in the module of its name (savedmodel.py: TF Serving's layout, with
serving_config.py for its models.config and warmup.py for its warm-up records; keras.py, tflite.py,
onnx.py, tfjs.py): built from its config, called with the trained model and
the datasets, it writes its artifact, verifies it against the Keras model and returns an
`ExportResult` (result.py: what they share, the parity check among it).

    step.py     the run's export step: check the selected exporters before training, run them after
    source.py   mode=evaluate: an exported SavedModel found again and evaluated on the test split

TensorFlow, LiteRT and ONNX Runtime are imported inside the methods (validation must not pay for them).
"""

from tfx_hydra.export.keras import KerasExport
from tfx_hydra.export.onnx import OnnxExport
from tfx_hydra.export.result import ExportResult
from tfx_hydra.export.savedmodel import SavedModelExport, next_version
from tfx_hydra.export.serving_config import read_config, write_models_config
from tfx_hydra.export.source import evaluate_saved_model, resolve_export_source
from tfx_hydra.export.step import check_exporters, export_model, selected_exporters
from tfx_hydra.export.tfjs import TfjsExport
from tfx_hydra.export.tflite import TFLiteExport

__all__ = ["ExportResult", "KerasExport", "OnnxExport", "SavedModelExport", "TFLiteExport", "TfjsExport",
           "check_exporters", "evaluate_saved_model", "export_model", "next_version", "read_config",
           "resolve_export_source", "selected_exporters", "write_models_config"]
