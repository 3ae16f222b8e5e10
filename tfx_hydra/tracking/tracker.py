"""tracker: the interface every step writes through, `Tracker`, and `NullTracker` (tracking=none,
non-chief workers), which takes every call and writes nothing. `MlflowTracker` (mlflow_tracker.py)
writes one MLflow run.
"""

from __future__ import annotations

from typing import Any, Protocol

from tfx_hydra.metrics import EPOCH, LEARNING_RATE

BACKUP_TAG = "resume.backup_dir"  # where an unfinished run keeps its per-epoch backup
OUTPUTS_TAG = "outputs.dir"  # the run's folder: its first command's, which a resumed run's files go to as well
# inside the backup folder, per training phase: what the phase ended with (trainer/trained.py), kept until the
# run is FINISHED
TRAINED_DIR, TRAINED_RECORD = "trained", "phase.json"


class Tracker(Protocol):
    """What the steps of a run record, whether anything is recorded or not."""

    run_id: str | None
    ui_command: str | None
    resumed_backup_dir: str | None  # set when this run continues an interrupted one from its backup
    resumed: bool  # this run continues an interrupted one (from its backup, or from the start)
    output_dir: str | None  # the run's folder (OUTPUTS_TAG): a resumed run's is its first command's
    backup_dir: str | None
    epochs_logged: int  # epochs this process logged

    def log_config(self, resolved: dict[str, Any]) -> None: ...
    def log_params(self, params: dict[str, str]) -> None: ...
    def set_tags(self, tags: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...
    def log_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None: ...
    def log_missing_epochs(self, backed_up: dict[int, dict[str, float]]) -> None: ...
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None: ...
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None: ...
    def log_datasets(self, reads) -> None: ...
    def log_model(self, model, example_inputs, register_as: str | None = None, metadata: dict | None = None,
                  columns: list[tuple[str, str]] | None = None) -> str | None: ...
    def flush(self) -> None: ...  # what was recorded reaches the store now, not with the next epoch
    def end(self, status: str, error: str | None = None) -> None: ...


class NullTracker:
    """tracking=none (and non-chief workers): the Tracker interface, recording nothing."""

    run_id = None
    ui_command = None
    resumed_backup_dir = None
    resumed = False
    output_dir = None
    backup_dir = None
    epochs_logged = 0

    def log_config(self, resolved: dict[str, Any]) -> None:
        pass

    def log_params(self, params: dict[str, str]) -> None:
        pass

    def set_tags(self, tags: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        pass

    def log_missing_epochs(self, backed_up: dict[int, dict[str, float]]) -> None:
        pass

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        pass

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        pass

    def log_datasets(self, reads) -> None:
        pass

    def log_model(self, model, example_inputs, register_as: str | None = None, metadata: dict | None = None,
                  columns: list[tuple[str, str]] | None = None) -> None:
        pass

    def flush(self) -> None:
        pass

    def end(self, status: str, error: str | None = None) -> None:
        pass


# input_wait: the share of an epoch spent waiting for data; tflops and mfu: the rate the step's FLOPs ran at
TIMINGS = ("seconds", "per_sec", "input_wait", "tflops", "mfu")


def is_result(metric: str) -> bool:
    """A run's result (linked to its logged model), not an epoch's curve, a timing, an export's size or the
    machine's load."""
    return (not metric.startswith(("system/", "export.", EPOCH)) and metric != LEARNING_RATE
            and not any(t in metric for t in TIMINGS))
