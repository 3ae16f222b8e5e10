"""export=tfjs: a TensorFlow.js graph model, converted from the serving SavedModel by the
`tensorflowjs_converter` command, and its model.json read back: the signature and every weight shard."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile

from tfx_hydra.errors import ExportError
from tfx_hydra.export.result import ExportResult, folder_size, make_parent
from tfx_hydra.export.savedmodel import serving_outputs, write_serving_archive
from tfx_hydra.export.served import served_model


class TfjsExport:
    """TensorFlow.js, by running `tensorflowjs_converter` from a separate environment on our SavedModel.

    tensorflowjs 4.22 depends on tensorflow-decision-forests, which pins its own TensorFlow, so the
    converter cannot be installed next to tfx_hydra. Install the pinned set of the repository's
    requirements/tfjs.txt in its own venv and point export.tfjs.converter at it (docs/how-to/exports.md); the
    converter reads the SavedModel (raw inputs, serving_default, its numbers only: the classes' names go into
    model.json's `userDefinedMetadata.class_names`) and writes
    <export_dir>/<model_name>_tfjs/model.json plus weight shards, which are then checked: a graph model
    with the SavedModel's inputs and outputs, and every weight its manifest lists in its shards.
    """

    kind = "tfjs"
    INSTALL = ("python3.11 -m venv ~/tfjs-env && ~/tfjs-env/bin/pip install -r requirements/tfjs.txt (the "
               "repository's pinned set; Python 3.10-3.12), then "
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
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-tfjs-") as scratch:
            saved_model = os.path.join(scratch, "saved_model")
            # numbers only: the converter takes no string lookup (the names go into model.json's metadata)
            write_serving_archive(served_model(model, datasets.spec), datasets.spec, saved_model, named=False)
            metadata = []  # model.json's userDefinedMetadata: the classes' names, a table's columns, in their order
            for key, names in (("class_names", datasets.spec.names), ("feature_names", datasets.spec.feature_names)):
                if names:
                    with open(os.path.join(scratch, f"{key}.json"), "w", encoding="utf-8") as out:
                        json.dump(list(names), out)
                    metadata.append(f"{key}:{os.path.join(scratch, f'{key}.json')}")
            metadata = [f"--metadata={','.join(metadata)}"] if metadata else []
            done = subprocess.run([executable, "--input_format=tf_saved_model", "--signature_name=serving_default",
                                   "--saved_model_tags=serve", *metadata, saved_model, self.path],
                                  capture_output=True, text=True, check=False)
        if done.returncode != 0 or not os.path.isfile(os.path.join(self.path, "model.json")):
            raise ExportError(f"{self.converter} failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-500:]}")
        weights = check_graph_model(self.path, serving_outputs(datasets.spec, named=False))
        return ExportResult(self.kind, self.path, {"export.tfjs.size_bytes": float(folder_size(self.path)),
                                                   "export.tfjs.weights": float(weights)})


BYTES_PER_VALUE = {"float32": 4, "int32": 4, "bool": 1, "uint8": 1, "float16": 2}  # the dtypes TF.js stores


def check_graph_model(folder: str, outputs: set[str]) -> int:
    """model.json as TF.js loads it: a graph model whose signature takes `inputs` and answers `outputs`, and
    whose weight shards hold every weight its manifest lists (bytes = values x dtype size, unless quantized).
    Returns how many weights it has."""
    with open(os.path.join(folder, "model.json"), encoding="utf-8") as text:
        model = json.load(text)
    signature = model.get("signature", {})
    if model.get("format") != "graph-model" or set(signature.get("inputs", {})) != {"inputs"} \
            or set(signature.get("outputs", {})) != outputs:
        raise ExportError(f"{folder}/model.json is not the graph model of serving_default: format "
                          f"{model.get('format')!r}, inputs {sorted(signature.get('inputs', {}))}, outputs "
                          f"{sorted(signature.get('outputs', {}))} (expected inputs -> {', '.join(sorted(outputs))}).")
    specs, stored = [], 0
    for group in model.get("weightsManifest", []):
        specs += group["weights"]
        for shard in group["paths"]:
            if not os.path.isfile(os.path.join(folder, shard)):
                raise ExportError(f"{folder}/model.json lists the weight shard {shard}, which the converter did not "
                                  "write.")
            stored += os.path.getsize(os.path.join(folder, shard))
    if not any("quantization" in spec for spec in specs):
        expected = sum(math.prod(spec["shape"]) * BYTES_PER_VALUE.get(spec["dtype"], 4) for spec in specs)
        if expected != stored:
            raise ExportError(f"{folder}: the weight shards hold {stored} bytes, the manifest's {len(specs)} weights "
                              f"{expected}.")
    return len(specs)
