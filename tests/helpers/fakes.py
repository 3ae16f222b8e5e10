"""Test doubles for the Tracker interface (tfx_hydra.tracking.Tracker).

`RecordingTracker` implements every method of the protocol explicitly and keeps what would go to
MLflow, so a test asserts on it; a misspelt call fails with AttributeError, as it would on the
real tracker (tests/unit/test_tracker.py checks both against the protocol).
"""

from __future__ import annotations

import os
import signal
from typing import Any


class RecordingTracker:
    """Keeps what would go to MLflow, to assert on it."""

    run_id = None
    ui_command = None
    resumed_backup_dir = None
    resumed = False
    output_dir = None
    backup_dir = None
    epochs_logged = 0

    def __init__(self) -> None:
        self.epochs: list[tuple[int, dict]] = []
        self.metrics: dict[str, float] = {}
        self.tags: dict[str, Any] = {}
        self.params: dict[str, str] = {}
        self.artifacts: list[tuple[str, str | None]] = []
        self.models: list[Any] = []
        self.ended: tuple[str, str | None] | None = None
        self.flushes = 0

    def log_config(self, resolved) -> None:
        self.params["<config>"] = str(resolved)

    def log_params(self, params: dict[str, str]) -> None:
        self.params.update(params)

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.tags.update(tags)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.update(metrics)

    def log_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        self.epochs.append((epoch, dict(logs or {})))

    def log_missing_epochs(self, backed_up: dict[int, dict[str, float]]) -> None:
        pass  # as if MLflow held every backed-up epoch

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        self.artifacts.append((local_dir, artifact_path))

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self.artifacts.append((local_path, artifact_path))

    def log_datasets(self, reads) -> None:
        self.datasets = list(reads)

    def log_model(self, model, example_inputs, register_as: str | None = None, metadata: dict | None = None,
                  columns: list[tuple[str, str]] | None = None) -> None:
        self.models.append(model)

    def flush(self) -> None:
        self.flushes += 1

    def end(self, status: str, error: str | None = None) -> None:
        self.ended = (status, error)


class PlantedKill(BaseException):
    """The process dying where a test plants it: not an Exception (a kill is not an error of anybody's code), so
    it passes through the trainer's handling of errors raised in the user's code, as a real kill would."""


class StopAfterEpoch(RecordingTracker):
    """Raises once epoch `stop` (zero-based) has been backed up: the tracking callback runs last, so this is
    a process killed after an epoch's backup, before its metrics reached MLflow."""

    def __init__(self, stop):
        super().__init__()
        self.stop = stop

    def log_epoch(self, epoch, logs):
        if epoch == self.stop:
            raise PlantedKill("stopped here")
        super().log_epoch(epoch, logs)


class CtrlCInAFinalizer:
    """Fault injection: Ctrl-C arriving while Python runs a finalizer (TensorFlow frees iterators and
    tensors through __del__ by the thousand): Python prints the KeyboardInterrupt and drops it."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100))  # bytecode after the signal: its handler runs here, inside the finalizer
