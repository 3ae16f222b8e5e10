"""export=savedmodel: a SavedModel in TensorFlow Serving's layout (<export_dir>/<model_name>/<version>/),
its serving signature checked, warm-up requests inside it (warmup.py), a new version per run and
`models.config` for the model server, with version labels (serving_config.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from tfx_hydra.errors import ConfigError, ExportError
from tfx_hydra.export.result import PARITY, ExportResult, folder_size, output_difference, require_parity
from tfx_hydra.export.serving_config import versions_of, write_models_config
from tfx_hydra.export.warmup import MAX_WARMUP_REQUESTS, raw_validation_examples, write_warmup_requests


class SavedModelExport:
    """A SavedModel in TensorFlow Serving's layout: <export_dir>/<model_name>/<version>/.

    Its `serving_default` signature takes raw inputs named `inputs` (the data's own values, e.g.
    0-255 pixels: the pipeline's scaling is inside the graph) and returns the task's outputs:
    `probabilities` and the predicted `class` (classification; binary: 1 from task.threshold on),
    `probabilities` and 0/1 `labels` (multilabel), `predictions` in the target's units (regression).
    The version is one more than the highest integer version already in the folder, so several runs exporting
    to one export_dir give TF Serving versions 1, 2, 3... and it hot-swaps to the newest;
    `<export_dir>/models.config` lists every model there for
    `tensorflow_model_server --model_config_file`, with its version labels: a model's first version is
    `stable`, and `version_label` (e.g. canary) labels this run's. `warmup_requests` real validation
    examples go into the version as TF Serving's warm-up records. The SavedModel is written to a hidden
    temporary folder first and renamed into place, so a serving process never sees half a model
    and two runs exporting at once cannot take the same version.
    """

    kind = "savedmodel"

    def __init__(self, export_dir: str, model_name: str, version_label: str | None = None,
                 warmup_requests: int = 10) -> None:
        self.export_dir = export_dir
        self.model_name = model_name
        self.version_label = require_label(version_label)
        if isinstance(warmup_requests, bool) or not isinstance(warmup_requests, int) \
                or not 0 <= warmup_requests <= MAX_WARMUP_REQUESTS:
            raise ConfigError(f"export.savedmodel.warmup_requests={warmup_requests!r}: give a whole number from 0 "
                              f"(no warm-up records) to {MAX_WARMUP_REQUESTS} (TF Serving reads no more).",
                              fix="export.savedmodel.warmup_requests=10")
        self.warmup_requests = warmup_requests

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
            write_serving_archive(model, datasets.spec, path)
            max_abs_diff = check_serving_signature(model, path, datasets)
            if self.warmup_requests:  # inside the version before it appears: the server finds them with it
                write_warmup_requests(path, self.model_name, raw_validation_examples(datasets, self.warmup_requests))
            version_dir = move_to_next_version(path, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        version = int(os.path.basename(version_dir))
        write_models_config(self.export_dir, (self.model_name, self.version_label, version) if self.version_label
                            else None)
        return ExportResult(self.kind, version_dir, {"export.savedmodel.max_abs_diff": max_abs_diff,
                                                     "export.savedmodel.version": float(version),
                                                     "export.savedmodel.size_bytes": float(folder_size(version_dir))})


def serving_outputs(spec) -> set[str]:
    """The names serving_default answers with for the data's task (probabilities and class, predictions, ...)."""
    import numpy as np

    return set(spec.task.serving(np.zeros((1, spec.num_classes), "float32")))


def require_label(label: str | None, key: str = "export.savedmodel.version_label") -> str | None:
    """A version label as TF Serving takes it in a URL (/v1/models/<name>/labels/<label>): a letter, then
    letters, digits, `_` or `-`."""
    import re

    if label is None or (isinstance(label, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", label)):
        return label
    raise ConfigError(f"{key}={label!r} is not a version label TF Serving takes: a letter, then letters, digits, "
                      "'_' or '-'.", fix=f"{key}=canary")


def write_serving_archive(model, spec, path: str) -> None:
    """serving_default: raw `inputs` -> the task's outputs, with the data's scaling in the graph."""
    import keras
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(model)

    def serve(inputs):
        raw = inputs if spec.text else tf.cast(inputs, tf.float32)
        return spec.task.serving(model(spec.normalize(raw), training=False))

    dtype = tf.string if spec.text else tf.float32  # text: raw strings, tokenized by the model's own layers
    archive.add_endpoint("serving_default", serve,
                         input_signature=[tf.TensorSpec((None, *spec.input_shape), dtype, name="inputs")])
    archive.write_out(path, verbose=False)


def check_serving_signature(model, path: str, datasets) -> float:
    """Read the signature as saved_model_cli does, then serve a validation batch of raw inputs
    through the loaded SavedModel and compare with Keras on the same (scaled) batch."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    task = datasets.spec.task
    wanted = serving_outputs(datasets.spec)
    signature = saved_model_utils.get_meta_graph_def(path, "serve").signature_def["serving_default"]
    if set(signature.inputs) != {"inputs"} or set(signature.outputs) != wanted:
        raise ExportError(f"serving_default has inputs {sorted(signature.inputs)} and outputs "
                          f"{sorted(signature.outputs)}, not inputs -> {', '.join(sorted(wanted))}.")
    scaled, _ = next(iter(datasets.validation))
    served = tf.saved_model.load(path).signatures["serving_default"](inputs=datasets.spec.denormalize(scaled))
    expected = np.asarray(model(scaled, training=False))
    diff = output_difference(served[task.output].numpy(), expected)
    require_parity("SavedModel", diff, PARITY)
    decided = task.decided(expected)
    named = next((name for name in wanted if name != task.output), None)
    if decided is not None and not np.array_equal(served[named].numpy(), decided):
        raise ExportError(f"the SavedModel's `{named}` differ from the Keras model's decisions.")
    return diff


def next_version(model_dir: str) -> int:
    """One more than the highest integer-named folder in `model_dir` (1 for an empty one)."""
    return max(versions_of(model_dir), default=0) + 1


def move_to_next_version(source: str, model_dir: str) -> str:
    for _ in range(100):  # another run may take the version between our listing and our rename
        target = os.path.join(model_dir, str(next_version(model_dir)))
        try:
            os.rename(source, target)  # atomic; fails if target exists (as a non-empty dir)
            return target
        except OSError:
            if not os.path.exists(target):
                raise
    raise ExportError(f"could not claim a new version folder in {model_dir} after 100 tries.")
