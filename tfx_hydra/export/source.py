"""source: an exported SavedModel found again (a folder or a tracked run's export) and evaluated:
mode=evaluate, the check before shipping a model; and what it says and records of which model and data."""

from __future__ import annotations

import logging
import os

from tfx_hydra.console import native_lines_streamed
from tfx_hydra.errors import DataError, ExportError
from tfx_hydra.export.savedmodel import next_version
from tfx_hydra.export.served import LABELS_FILE, load_saved_model, read_labels
from tfx_hydra.settings.compose import choice
from tfx_hydra.tracking import Tracker

log = logging.getLogger("tfx_hydra.records")


def resolve_export_source(source: str, tracking_config, launch_dir: str, download_dir: str) -> str:
    """A local SavedModel folder for `source`: a folder (a TF Serving model folder means its newest
    version), or runs:/<run id>, whose SavedModel export is fetched from the MLflow store into
    `download_dir` (the evaluating run's own output dir: kept with the run it explains, never
    left in the system's temp folder)."""
    if source.startswith("runs:/"):
        source = _download_savedmodel(source, tracking_config, launch_dir, download_dir)
    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, "saved_model.pb")) \
            and next_version(source) > 1:
        source = os.path.join(source, str(next_version(source) - 1))
    if not os.path.isfile(os.path.join(source, "saved_model.pb")):
        raise ExportError(f"export.source={source} holds no SavedModel (no saved_model.pb there).",
                          fix="point export.source at an export folder such as outputs/<date>/<time>/export/mlp/1, "
                          "or at runs:/<run id> of a run with export=savedmodel")
    return source


def _download_savedmodel(uri: str, tracking_config, launch_dir: str, download_dir: str) -> str:
    from mlflow.exceptions import MlflowException

    from tfx_hydra.tracking import client_for, resolve_tracking_uri

    run_id = uri[len("runs:/"):].strip("/").split("/")[0]
    client = client_for(resolve_tracking_uri(tracking_config, launch_dir))
    try:
        client.get_run(run_id)
        os.makedirs(download_dir, exist_ok=True)
        return client.download_artifacts(run_id, _savedmodel_artifact(client, run_id, uri), download_dir)
    except MlflowException as err:
        raise ExportError(f"export.source={uri}: {err.message}",
                          fix="check the run id in the MLflow UI (and tracking.uri), or pass the export folder") \
            from None


def _savedmodel_artifact(client, run_id: str, uri: str) -> str:
    """The folder under the run's `export/` that holds a saved_model.pb, searched level by level
    (export/mlp/1; runs made before exports mirrored the disk layout have export/savedmodel)."""
    folders = ["export"]
    for _ in range(3):  # export/<model>/<version> is as deep as an export goes
        entries = [entry for folder in folders for entry in client.list_artifacts(run_id, folder)]
        for entry in entries:
            if entry.path.endswith("/saved_model.pb"):
                return entry.path.rsplit("/", 1)[0]
        folders = [entry.path for entry in entries if entry.is_dir]
    raise ExportError(f"export.source={uri}: the run has no SavedModel among its artifacts (export/...).",
                      fix="pass a run trained with export=savedmodel, or the export folder itself")


def evaluate_saved_model(path: str, datasets, data: str = "the data") -> dict[str, float]:
    """The task's test metrics (test_loss and its quality: accuracy, or mae and rmse) of the SavedModel's
    serving_default on the test split (raw inputs). A model that cannot take `data`'s examples (another
    shape, another number of outputs) is a DataError naming both, before any batch runs."""
    import numpy as np

    serve = load_saved_model(path).signatures["serving_default"]
    task = datasets.spec.task
    input_name = require_model_fits_data(serve, datasets.spec, path, data)
    values, labels = [], []
    # read as training's evaluation reads it (trainer/fit.py): TensorFlow's C++ lines go to the job log (a cache on
    # disk, read first, warns it was not read whole, though it was), and a file that cannot be read is named
    with native_lines_streamed(), datasets.named_errors():
        for scaled, batch_labels in datasets.test:
            values.append(_main_output(serve(**{input_name: datasets.spec.denormalize(scaled)}), task).numpy())
            labels.append(batch_labels.numpy())
    return task.evaluated(np.concatenate(values), np.concatenate(labels))


def require_model_fits_data(serve, spec, path: str, data: str) -> str:
    """The serving signature's input (one, of the data's shape) and output width against the data's spec;
    returns the input's name. TensorFlow's own error for a mismatch is a page about a ConcreteFunction's
    arguments, deep in the first batch."""
    fix = ("evaluate it on the data it was trained on (data=... as in that run's command), or set export.source "
           "to a model trained on this data")
    signature = serve.structured_input_signature[1]
    if len(signature) != 1:
        raise DataError(f"the model at {path} takes {len(signature)} inputs ({', '.join(sorted(signature))}); "
                        "mode=evaluate feeds it one, the data's examples.",
                        fix="export a model with one input (tfx_hydra's exports have one: `inputs`)")
    (name, inputs), = signature.items()
    takes = [None if d is None else int(d) for d in inputs.shape[1:]]
    gives = [int(d) for d in spec.input_shape]
    if len(takes) != len(gives) or any(t is not None and t != g for t, g in zip(takes, gives)):
        raise DataError(f"the model at {path} takes inputs of shape {takes}, but {data} gives examples of "
                        f"shape {gives}.", fix=fix)
    width = _main_output(serve.structured_outputs, spec.task).shape[-1]
    if width is not None and int(width) != spec.num_classes:
        raise DataError(f"the model at {path} predicts {spec.task.describe(int(width))}, but {data} has "
                        f"{spec.task.describe(spec.num_classes)}.", fix=fix)
    served = read_labels(os.path.join(path, LABELS_FILE))
    if served and spec.class_names and served != spec.class_names:  # the same count, other classes or order
        raise DataError(f"the model at {path} names its classes {list(served)[:10]}, but {data} names them "
                        f"{list(spec.class_names)[:10]}: its accuracy would count one class as another.", fix=fix)
    return name


def _main_output(outputs: dict, task):
    """The serving signature's head values: the task's output (`probabilities`, `predictions`: tfx_hydra's
    exports), else its only one (a SavedModel exported elsewhere)."""
    return outputs[task.output] if task.output in outputs else next(iter(outputs.values()))


def record_evaluated_model(tracker: Tracker, source: str, path: str) -> None:
    """mode=evaluate's first line: which model, and the run it came from."""
    origin = f" (the export of MLflow run {source[len('runs:/'):].strip('/').split('/')[0]})" \
        if source.startswith("runs:/") else ""
    log.info(f"evaluate: the SavedModel at {path}{origin}")
    tracker.set_tags({"export.source.path": path})


def record_evaluated_split(datasets) -> str:
    """mode=evaluate's second line: which data and split; returns the data's name for messages."""
    named = f"data={choice('data')}" if choice("data") else "the configured data"
    log.info(f"evaluate: on the test split of {named}: {datasets.num_test:,} examples, inputs "
             f"{tuple(datasets.spec.input_shape)}, {datasets.spec.task.describe(datasets.spec.num_classes)}")
    return named
