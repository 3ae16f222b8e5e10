"""`tfx-hydra promote RUN_ID --label stable` (or `python -m tfx_hydra.promote`): put a run's exported model
live under a version label.

It points the label at the run's SavedModel version in its export folder's `models.config` (TF Serving's
`version_labels`; the server, polling the file, moves the label's traffic), and sets the alias of the same
name on the MLflow model version the run registered (`export.register_as`), so the registry and the server
say the same. A sweep's best trial goes live with `promote <its run id> --label stable`; rolling back is the
same command with the earlier run; `--label canary` starts a canary. Checked before anything is written: the
run is FINISHED and its SavedModel version is still on disk (`--model NAME`: and is that model's).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tfx_hydra import tracking
from tfx_hydra.console import quiet_libraries, shown_names, use_terminal
from tfx_hydra.errors import ExportError, TfxHydraError

log = logging.getLogger("tfx_hydra.promote")
EXPORT_TAG = "export.savedmodel.path"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_terminal()
    quiet_libraries()
    try:
        promote(args.run_id, args.label, tracking.store_to_read(args.tracking_uri, args.run_id), args.model, args.alias)
    except TfxHydraError as err:
        print(str(err), file=sys.stderr)
        return 1
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from tfx_hydra.export.savedmodel import require_label

    parser = argparse.ArgumentParser(
        prog="tfx-hydra promote",
        description="Point a TF Serving version label (models.config) and the MLflow alias of the same name at a "
                    "run's exported model.")
    parser.add_argument("run_id", help="the MLflow run whose SavedModel goes live (a sweep's table names its best)")
    parser.add_argument("--label", required=True, help="the version label to point at it: stable, canary, ...")
    parser.add_argument("--alias", default=None,
                        help="the MLflow alias to set on its registered model version (default: the label)")
    parser.add_argument("--model", default=None, help="refuse unless the run's export is of this model name")
    parser.add_argument("--tracking-uri", default=None,
                        help="the store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    args = parser.parse_args(argv)
    try:
        require_label(args.label, "--label")
        require_label(args.alias, "--alias")
    except TfxHydraError as err:
        parser.error(err.message)
    return args


def promote(run_id: str, label: str, uri: str, model: str | None = None, alias: str | None = None) -> None:
    from tfx_hydra.export.served import LABELS_FILE, read_labels
    from tfx_hydra.export.serving_config import labels_of, read_config, write_models_config

    client = tracking.client_for(uri)
    version_dir = exported_version(client, run_id)
    model_dir = os.path.dirname(version_dir)
    export_dir, name = os.path.dirname(model_dir), os.path.basename(model_dir)
    version = int(os.path.basename(version_dir))
    if model is not None and model != name:
        raise ExportError(f"run {run_id} exported model {name!r} ({version_dir}), not {model!r}.",
                          fix=f"promote a run of {model!r}, or --model {name}")
    before = labels_of(read_config(export_dir)).get(name, {}).get(label)
    path = write_models_config(export_dir, (name, label, version))
    was = "" if before is None else (" (it already was)" if before == version else f" (was version {before})")
    log.info(f"promote: {path} now serves {name} version {version} as `{label}`{was}")
    names = read_labels(os.path.join(version_dir, LABELS_FILE))
    if names:
        log.info(f"promote: it answers with the classes {shown_names(names)}")
    sharing = sorted(other for other, at in labels_of(read_config(export_dir)).get(name, {}).items()
                     if at == version and other != label)
    if sharing:
        log.warning(f"promote: {' and '.join(f'`{other}`' for other in sharing)} also point(s) at version {version}: "
                    f"those labels now serve the same model (promote another run --label {sharing[0]} to split "
                    "them again)")
    registered = client.search_model_versions(f"run_id = '{run_id}'")
    for found in registered:
        client.set_registered_model_alias(found.name, alias or label, found.version)
        log.info(f"promote: MLflow model {found.name} version {found.version} is `@{alias or label}`")
    if not registered:
        log.info(f"promote: run {run_id} registered no MLflow model (export.register_as): no alias set")


def exported_version(client, run_id: str) -> str:
    """The run's SavedModel version folder, or an ExportError saying why it cannot go live."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ExportError(f"there is no run {run_id!r} in this store.",
                          fix="copy the id from the run's page or the sweep's table, or pass --tracking-uri") from None
    if run.info.status != "FINISHED":
        raise ExportError(f"run {run_id} is {run.info.status}: only a finished run's model goes live.",
                          fix="promote a FINISHED run (a sweep's table names its best)")
    path = run.data.tags.get(EXPORT_TAG)
    if path is None and "sweep.jobs" in run.data.tags:  # a sweep's parent run: its jobs trained, not it
        best = run.data.tags.get("sweep.best_run_id")
        raise ExportError(f"run {run_id} is a sweep's parent run: it trained and exported nothing itself" +
                          (f"; its best job is run {best} ({run.data.tags.get('sweep.best_run_name', '')})." if best
                           else " (a k-fold sweep's folds are no model to ship: train the configuration on all the "
                           "data, then promote that run)."),
                          fix=f"tfx-hydra promote {best} --label <label>" if best else "promote a run that exported a "
                          "SavedModel")
    if path is None:
        raise ExportError(f"run {run_id} exported no SavedModel (no {EXPORT_TAG} tag).",
                          fix="train with export=savedmodel and export.savedmodel.export_dir=<the folder TF Serving "
                          "reads>, then promote that run")
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ExportError(f"run {run_id}'s SavedModel is no longer at {path}.",
                          fix="promote a run whose export is still in the export folder, or re-run it "
                          f"(python -m tfx_hydra.reproduce {run_id}) and promote the new run")
    return path


if __name__ == "__main__":
    sys.exit(main())
