"""step: the export step of a run: every exporter `export=[...]` selected, checked before training
and run after it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile

import numpy as np
from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError, ExportError
from tfx_hydra.export.generate import generating_module, prompts_of
from tfx_hydra.export.result import ExportResult, figure_text
from tfx_hydra.export.served import answering_model, computing_in_float32, raw_examples, served_model
from tfx_hydra.process import describe_error, full_disk_path, stop_now, stop_requested, stopped_at_a_step
from tfx_hydra.settings.checks import require_writable_folder
from tfx_hydra.settings.compose import build, instantiate_node
from tfx_hydra.tracking import Tracker
from tfx_hydra.trainer.kept_weights import weights_sha256

log = logging.getLogger(__name__)


def selected_exporters(export_cfg: DictConfig | None) -> dict[str, DictConfig]:
    """The exporters `export=[...]` selected: the entries of `export` with a `_target_`."""
    return {name: node for name, node in (export_cfg or {}).items()
            if isinstance(node, DictConfig) and "_target_" in node}


# exporters whose formats hold only numeric ops: a text model's string ops (tokenizing, vocabulary lookup)
# do not convert; the SavedModel, the .keras file and the MLflow model carry them
NUMERIC_ONLY_EXPORTERS = ("tflite", "onnx", "tfjs")


GENERATING_EXPORTERS = ("savedmodel",)  # a causal LM's served generate (export/generate.py)


def check_exporters(export_cfg: DictConfig | None, text_inputs: bool = False, generates: bool = False) -> None:
    """Each selected exporter built now, from its settings alone (no TensorFlow): a typo in an
    export value fails before training, not after the last epoch. Its folder must be creatable.
    A text model's exports: only the formats that carry string ops; a causal LM's: its generate."""
    for name, node in selected_exporters(export_cfg).items():
        if generates and name not in GENERATING_EXPORTERS:
            raise ConfigError(f"export={name}: a causal LM (task=causal_lm) is served as a SavedModel whose generate "
                              "takes a prompt and answers text; the other formats hold no sampling loop.",
                              fix="export=savedmodel")
        if text_inputs and name in NUMERIC_ONLY_EXPORTERS:
            raise ConfigError(f"export={name} cannot carry a text model: its string ops (tokenizing, the "
                              "vocabulary lookup) do not convert to that format.",
                              fix="export=savedmodel (TF Serving takes raw strings), export=keras, and the MLflow "
                              "model (export.mlflow_model=true)")
        instantiate_node(node, f"export.{name}")
        if node.get("export_dir"):
            require_writable_folder(f"export.{name}.export_dir", node.export_dir, node.export_dir, create=True)


def export_model(model, datasets, export_cfg: DictConfig, tracker: Tracker, chief: bool = True,
                 done_in: str | None = None) -> list:
    """Run every selected exporter; log each artifact and its verification figures.

    A failing exporter never loses the training run: its error is recorded (tag
    `export.<name>.error`), the other exporters still run, and the run fails only with
    export.strict=true. Non-chief workers export too (saving a distributed model may need
    every worker), into a throwaway folder that is deleted afterwards. `done_in`: the run's backup folder, where
    each export (and the MLflow model) is noted once written, logged and in the store, so a run interrupted
    while exporting writes only the rest when the same command resumes it.

    Ctrl-C or SIGTERM while a format is written waits for it to be written, logged and noted, then stops the run
    (a second one stops it at once): an interrupt raised inside a converter's own code (TFLite's, tf2onnx's, the
    MLflow model's save) leaves its locks and scopes half taken, and the process could hang on them instead of
    closing its run KILLED.
    """
    results, failures, done = [], {}, exports_done(done_in)
    model = computing_in_float32(model)  # trained under a mixed policy: served in float32 everywhere
    with stopped_at_a_step():
        for name, node in selected_exporters(export_cfg).items():
            if stop_requested():  # came while the previous format was written: that one is noted, stop here
                stop_now()
            if not chief:
                with tempfile.TemporaryDirectory(prefix="tfx_hydra-worker-export-") as scratch:  # gone on every exit
                    build(node, f"export.{name}", export_dir=scratch)(model, datasets)
            elif name in done:  # written, logged and recorded before the interruption
                log.info(f"export: {name} written to {done[name].path} (before the interruption)")
                results.append(done[name])
            elif (result := exported(name, node, model, datasets, tracker, failures)) is not None:
                note_done(done_in, name, result, tracker)
                log.info(f"export: {name} written to {result.path}")  # and noted: a stop from here on does not redo it
                results.append(result)
        if stop_requested():
            stop_now()
        if chief:
            tracker.set_tags({"model.weights_sha256": weights_sha256(model), "export.failed": len(failures)})
            if (export_cfg or {}).get("mlflow_model", True) and MLFLOW_MODEL not in done:
                log_mlflow_model(model, datasets, export_cfg, tracker)
                note_done(done_in, MLFLOW_MODEL, None, tracker)
    if failures and (export_cfg or {}).get("strict", False):
        raise ExportError(f"{len(failures)} export(s) failed: " + "; ".join(f"{k}: {v}" for k, v in failures.items()),
                          fix="fix the exporter's settings, or drop export.strict=true to keep the run on failure")
    return results


def exported(name: str, node: DictConfig, model, datasets, tracker: Tracker, failures: dict) -> ExportResult | None:
    """One format written and logged with its figures; None when its exporter failed (the error in `failures`
    and the run's tags: the trained model and the other exports stay), unless the disk is full."""
    try:
        result = build(node, f"export.{name}")(model, datasets)
    except Exception as err:  # recorded, not fatal: the trained model and the other exports stay
        if full_disk_path(err) is not None:  # ...unless the disk is full: the next would fail too
            raise
        failures[name] = describe_error(err)
        log.warning(f"export {name} failed: {failures[name]}")
        tracker.set_tags({f"export.{name}.error": failures[name]})
        return None
    where = artifact_path(result.path, str(node.get("export_dir") or os.path.dirname(result.path)))
    if os.path.isfile(result.path):
        tracker.log_artifact(result.path, where)
    else:
        tracker.log_artifacts(result.path, where)
    for path in result.beside:  # its labels file: in MLflow beside the artifact, as on disk
        tracker.log_artifact(path, artifact_path(path, str(node.get("export_dir") or os.path.dirname(path))))
    # what the artifact is (its size, its parity with Keras, its version): tags, not charts beside the epochs'
    tracker.set_tags({key: figure_text(value) for key, value in result.figures.items()})
    tracker.set_tags({f"export.{name}.path": result.path})
    return result


def log_mlflow_model(model, datasets, export_cfg: DictConfig | None, tracker: Tracker) -> None:
    """The MLflow model: a causal LM's takes a prompt and answers its text; every other takes raw inputs, as
    every export does."""
    register_as = (export_cfg or {}).get("register_as")
    if datasets.spec.task.generates:
        tracker.log_model(generating_module(model), np.asarray(prompts_of(datasets), dtype=object),
                          register_as=register_as)
        return
    spec = datasets.spec
    tracker.log_model(answering_model(served_model(model, spec), spec), raw_examples(datasets, 5),
                      register_as=register_as, metadata={"class_names": list(spec.names)} if spec.names else None,
                      columns=list(zip(spec.feature_names, spec.feature_dtypes)) or None)  # a table's


EXPORTS_DONE = "exports.json"  # in the run's backup folder
MLFLOW_MODEL = "mlflow_model"  # the MLflow model's entry there


def exports_done(folder: str | None) -> dict:
    """The exports an interrupted attempt of this run finished ({name: ExportResult}; the MLflow model's: None),
    those whose artifact is still where it was written."""
    try:
        with open(os.path.join(folder, EXPORTS_DONE), encoding="utf-8") as file:
            noted = json.load(file)
    except (TypeError, OSError, ValueError):  # no folder, or nothing exported yet
        return {}
    return {name: ExportResult(**entry) if entry else None for name, entry in noted.items()
            if entry is None or os.path.exists(entry["path"])}


def note_done(folder: str | None, name: str, result: ExportResult | None, tracker: Tracker) -> None:
    """An export written and logged: its records sent to the store, then noted in the backup folder (whole)."""
    if not folder:
        return
    tracker.flush()
    noted = {k: dataclasses.asdict(v) if v else None for k, v in exports_done(folder).items()}
    noted[name] = dataclasses.asdict(result) if result else None
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f"{EXPORTS_DONE}.partial")
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(noted, file)
    os.replace(partial, os.path.join(folder, EXPORTS_DONE))


def artifact_path(path: str, export_dir: str) -> str:
    """Where an export goes in MLflow: under `export/` as it sits under export_dir on disk
    (export/mlp/1/ for a SavedModel, export/mlp.tflite), so a path read in one place is found in
    the other. `model/` in MLflow is the MLflow model."""
    relative = os.path.relpath(path, export_dir)
    if relative.startswith(os.pardir):  # written outside its export_dir: keep its own name
        relative = os.path.basename(path)
    folder = os.path.dirname(relative) if os.path.isfile(path) else relative
    return "/".join(["export", *(part for part in folder.split(os.sep) if part not in ("", os.curdir))])
