"""The user mistakes (and the machine faults a user can act on) tfx_hydra reports without a traceback.

Every error here derives from Hydra's `CompactHydraException`: Hydra's own error
reporter prints such an exception's message alone (no stack trace) and exits with
status 1, in single runs and in sweeps alike. Programming errors are plain Python
exceptions and keep their tracebacks.

Messages follow Keras' style: name the key, echo the value received, say what was
expected and give the override that fixes it.
"""

from __future__ import annotations

from typing import Any

from hydra.errors import CompactHydraException

# What Hydra's launchers raise when a job's process died (joblib tears down its pool, submitit finds
# no result, a Ray Train worker of a multi-worker job died): by exception name, so that nothing here imports
# joblib, submitit or Ray.
LOST_WORKER_ERRORS = ("TerminatedWorkerError", "BrokenProcessPool", "UncompletedJobError", "FailedJobError",
                      "RayTrainWorkerLost")


class TfxHydraError(CompactHydraException):
    """Base class: a mistake in the user's input or environment, not in our code."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        text = f"{type(self).__name__}: {message}"
        if fix:
            text += f"\n  Fix: {fix}"
        super().__init__(text)

    def __reduce__(self):
        # Sweep jobs in other processes (joblib, submitit) send their error back pickled; the
        # default rebuilds it from the formatted text and would print "ConfigError: ConfigError: ...".
        return type(self), (self.message, self.fix)


class ConfigError(TfxHydraError):
    """A config value has the wrong type, is out of range, or contradicts another."""


class HardwareMismatch(TfxHydraError):
    """The machine cannot satisfy the selected hardware profile (with hardware.strict=true)."""


class DataError(TfxHydraError):
    """The data cannot be read or does not match its declared spec."""


class TrackingError(TfxHydraError):
    """The MLflow tracking store cannot be reached or written."""


class TrainingError(TfxHydraError):
    """Training ran but produced no usable model (e.g. the loss became NaN)."""


class ExportError(TfxHydraError):
    """An exporter could not write or verify its artifact."""


class RequestError(TfxHydraError):
    """A request to a served model does not fit its signature (an input's name, dtype or shape)."""


class ReproduceError(TfxHydraError):
    """The run to reproduce cannot be found or lacks what a re-run needs."""


class DiskFull(TfxHydraError):
    """A disk the run writes to is full (a machine fault, not a mistake, but said the same way)."""


def show(value: Any) -> str:
    """Spell a value the way it is typed in an override (null, true, false)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
