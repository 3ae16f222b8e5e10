"""export=savedmodel: a SavedModel in TensorFlow Serving's layout (<export_dir>/<model_name>/<version>/),
its serving signature checked, warm-up requests inside it (warmup.py), a new version per run and
`models.config` for the model server, with version labels (serving_config.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from tfx_hydra.errors import ConfigError, ExportError
from tfx_hydra.export.generate import check_generation, prompts_of, write_generating_archive
from tfx_hydra.export.result import PARITY, ExportResult, folder_size, output_difference, require_parity
from tfx_hydra.export.served import (
    BY_NAME,
    LABELS_FILE,
    answering_model,
    input_names,
    load_saved_model,
    raw_batches,
    raw_examples,
    served_model,
    write_labels,
)
from tfx_hydra.export.serving_config import FIRST_LABEL, labels_of, read_config, versions_of, write_models_config
from tfx_hydra.export.warmup import MAX_WARMUP_REQUESTS, write_warmup_requests

log = logging.getLogger(__name__)


def labels_said(labels: dict[str, int], before: dict[str, int], version: int) -> str:
    """What an export did to the labels clients ask for: 'is `stable` (a model's first version is: ...)',
    'is `canary`', '' when it labelled nothing."""
    mine = sorted(label for label, at in labels.items() if at == version and before.get(label) != version)
    if not mine:
        return ""
    why = " (a model's first version: tfx-hydra promote moves it)" if FIRST_LABEL in mine and not before else ""
    return "is " + " and ".join(f"`{label}`" for label in mine) + why


class SavedModelExport:
    """A SavedModel in TensorFlow Serving's layout: <export_dir>/<model_name>/<version>/.

    Its `serving_default` signature takes raw inputs named `inputs` (the data's own values, e.g.
    0-255 pixels: the pipeline's scaling is inside the graph, served.py) and returns the task's outputs:
    `probabilities`, the predicted `class` by name and its `class_index` (classification; binary: 1 from
    task.threshold on), `probabilities`, 0/1 `labels` and their `tags` (multilabel), `predictions` in the
    target's units (regression). The classes' names are also `assets.extra/labels.txt`, one per line.
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
            if datasets.spec.task.generates:  # a language model: a prompt in, text out
                figures = {"export.savedmodel.same_text": check_generation(
                    write_generating_archive(model, path), path, prompts_of(datasets))}
            else:
                served = served_model(model, datasets.spec)
                write_serving_archive(served, datasets.spec, path)
                figures = {"export.savedmodel.max_abs_diff": check_serving_signature(served, path, datasets)}
                if self.warmup_requests:  # inside the version before it appears: the server finds them with it
                    write_warmup_requests(path, self.model_name, list(raw_examples(datasets, self.warmup_requests)))
            version_dir = move_to_next_version(path, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        version = int(os.path.basename(version_dir))
        before = labels_of(read_config(self.export_dir)).get(self.model_name, {})
        write_models_config(self.export_dir, (self.model_name, self.version_label, version) if self.version_label
                            else None)
        said = labels_said(labels_of(read_config(self.export_dir)).get(self.model_name, {}), before, version)
        if said:
            log.info(f"export: {self.model_name} version {version} {said}")
        return ExportResult(self.kind, version_dir, {**figures, "export.savedmodel.version": float(version),
                                                     "export.savedmodel.size_bytes": float(folder_size(version_dir))})


def serving_outputs(spec, named: bool = True) -> set[str]:
    """The names serving_default answers with for the data's task (probabilities and class, predictions, ...)."""
    return spec.task.answered(named)


def require_label(label: str | None, key: str = "export.savedmodel.version_label") -> str | None:
    """A version label as TF Serving takes it in a URL (/v1/models/<name>/labels/<label>): a letter, then
    letters, digits, `_` or `-`."""
    import re

    if label is None or (isinstance(label, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", label)):
        return label
    raise ConfigError(f"{key}={label!r} is not a version label TF Serving takes: a letter, then letters, digits, "
                      "'_' or '-'.", fix=f"{key}=canary")


def write_serving_archive(served, spec, path: str, named: bool = True) -> None:
    """serving_default: raw `inputs` -> the task's answers, through the served model (served.py: the data's
    scaling is its first layer; the classes' names beside the indices, unless `named=False`), and the names in
    assets.extra."""
    import keras
    import tensorflow as tf

    answering = answering_model(served, spec, named)
    archive = keras.export.ExportArchive()
    archive.track(answering)

    def serve(inputs):
        return answering(inputs if spec.text else tf.cast(inputs, tf.float32), training=False)

    dtype = tf.string if spec.text else tf.float32  # text: raw strings, tokenized by the model's own layers
    archive.add_endpoint("serving_default", serve,
                         input_signature=[tf.TensorSpec((None, *spec.input_shape), dtype, name="inputs")])
    if input_names(spec):  # a table: each column by its name, as a client holds a row ({"size_m2": 190.4, ...})
        def serve_by_name(*columns):
            return answering(tf.stack([tf.cast(column, tf.float32) for column in columns], axis=-1), training=False)

        archive.add_endpoint(BY_NAME, serve_by_name,
                             input_signature=[tf.TensorSpec((None,), tf.float32, name=n) for n in input_names(spec)])
    archive.write_out(path, verbose=False)
    if spec.names:
        write_labels(os.path.join(path, LABELS_FILE), spec.names)


def check_serving_signature(served, path: str, datasets) -> float:
    """Read the signature as saved_model_cli does, then serve a validation batch of raw inputs
    through the loaded SavedModel and compare with the served Keras model on the same batch."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    task = datasets.spec.task
    wanted = serving_outputs(datasets.spec)
    signature = saved_model_utils.get_meta_graph_def(path, "serve").signature_def["serving_default"]
    if set(signature.inputs) != {"inputs"} or set(signature.outputs) != wanted:
        raise ExportError(f"serving_default has inputs {sorted(signature.inputs)} and outputs "
                          f"{sorted(signature.outputs)}, not inputs -> {', '.join(sorted(wanted))}.")
    raw, _ = next(raw_batches(datasets))
    loaded = load_saved_model(path)
    answered = loaded.signatures["serving_default"](inputs=tf.constant(raw))
    expected = np.asarray(served(raw, training=False))
    diff = output_difference(answered[task.output].numpy(), expected)
    require_parity("SavedModel", diff, PARITY)
    if input_names(datasets.spec):  # the by-name signature answers as the tensor one
        by_name = loaded.signatures[BY_NAME](**{name: tf.constant(raw[:, i])
                                                for i, name in enumerate(input_names(datasets.spec))})
        require_parity(f"SavedModel's {BY_NAME} signature", output_difference(by_name[task.output].numpy(), expected),
                       PARITY)
    decided = task.decided(expected)
    if decided is not None and not np.array_equal(answered[task.decision].numpy(), decided):
        raise ExportError(f"the SavedModel's `{task.decision}` differ from the Keras model's decisions.")
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
