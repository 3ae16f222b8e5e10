"""tracker: every Tracker (the MLflow one, tracking=none's, the tests' fake) has the whole interface."""

from __future__ import annotations

import inspect

import pytest

from tests.helpers.fakes import RecordingTracker
from tfx_hydra.tracking import MlflowTracker, NullTracker, Tracker

PROTOCOL_METHODS = sorted(name for name, member in vars(Tracker).items()
                          if callable(member) and not name.startswith("_"))
PROTOCOL_ATTRIBUTES = sorted(Tracker.__annotations__)


def mlflow_tracker() -> MlflowTracker:
    """An MlflowTracker as a run holds it (its constructor sends nothing: no store needed)."""
    return MlflowTracker(client=None, run_id="r", uri="sqlite:////tmp/mlflow.db", launch_dir="/tmp")


@pytest.mark.parametrize("make", [mlflow_tracker, NullTracker, RecordingTracker])
def test_each_tracker_implements_the_protocol_with_its_signatures(make):
    implementation = make()
    assert PROTOCOL_METHODS == sorted(["end", "log_artifact", "log_artifacts", "log_config", "log_datasets",
                                       "flush", "log_epoch", "log_metrics", "log_missing_epochs", "log_model",
                                       "log_params", "set_tags"])
    for name in PROTOCOL_METHODS:
        wanted = list(inspect.signature(getattr(Tracker, name)).parameters)
        assert ["self", *inspect.signature(getattr(implementation, name)).parameters] == wanted, name
    for name in PROTOCOL_ATTRIBUTES:
        assert hasattr(implementation, name), name


def test_a_misspelt_call_on_the_null_tracker_fails_instead_of_doing_nothing():
    with pytest.raises(AttributeError):
        NullTracker().log_metric("loss", 1.0)  # log_metrics is the method
