"""export=tfjs: a TensorFlow.js graph model, converted from the serving SavedModel by the
`tensorflowjs_converter` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from tfx_hydra.errors import ExportError
from tfx_hydra.export.result import ExportResult, folder_size, make_parent
from tfx_hydra.export.savedmodel import write_serving_archive


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

        executable = shutil.which(os.path.expanduser(self.converter))
        if not executable:
            raise ExportError(f"the TensorFlow.js converter export.tfjs.converter={self.converter} is not installed "
                              "here (tensorflowjs pins TensorFlow 2.19, so it lives in its own environment).",
                              fix=self.INSTALL)
        make_parent(self.path, "export.tfjs.export_dir")
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-tfjs-") as saved_model:
            write_serving_archive(model, datasets.spec, saved_model)
            done = subprocess.run([executable, "--input_format=tf_saved_model", "--signature_name=serving_default",
                                   "--saved_model_tags=serve", saved_model, self.path],
                                  capture_output=True, text=True, check=False)
        if done.returncode != 0 or not os.path.isfile(os.path.join(self.path, "model.json")):
            raise ExportError(f"{self.converter} failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-500:]}")
        return ExportResult(self.kind, self.path, {"export.tfjs.size_bytes": float(folder_size(self.path))})
