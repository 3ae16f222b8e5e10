"""job.py: the hooks run() calls for whoever it works for, held by a job of the user's own (a class written
here, outside the package, as a sweeper of a user's would be): the callbacks it hands training, an early end
it turns into the result, the plots and exports it declines, what it records once the run is evaluated."""

from __future__ import annotations

from contextlib import contextmanager

import keras
import pytest

from tests.helpers import artifact_paths, compose, mlflow_client, mlflow_runs
from tfx_hydra.job import Job, RunResult
from tfx_hydra.run import run
from tfx_hydra.trainer.backups import EndsTraining

TINY = ["data=synthetic", "data.num_examples=256", "trainer.batch_size=64", "trainer.tensorboard=false",
        "export=[keras]"]


class EndsAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise EndsTraining(f"ended after epoch {epoch + 1}")


class OwnJob(Job):
    """A job of the user's own: it hands training one callback, says what an early end was, can decline
    the artifacts and notes each hook it was called at."""

    def __init__(self, callbacks=(), keeps=True) -> None:
        self.callbacks, self.keeps, self.calls = list(callbacks), keeps, []

    @contextmanager
    def attending(self, cfg, settings, tracker):
        self.calls.append("attending")
        yield
        self.calls.append("left")

    def training_callbacks(self):
        return self.callbacks

    def ended_training(self, tracker, ending):
        self.calls.append("ended")
        return RunResult(None, tracker.run_id, ended=str(ending))

    def keeps_artifacts(self, objective, tracker):
        self.calls.append(f"keeps? {objective:.3f}")
        return self.keeps

    def completed(self, tracker, history):
        self.calls.append(f"completed after {len(history.history['loss'])} epochs")


@pytest.mark.slow  # two real runs: the full suite runs them, the quick subset does not
def test_a_users_job_ends_training_with_its_callback_and_declines_the_artifacts(tmp_path):
    for folder in ("ends", "declines"):
        (tmp_path / folder).mkdir()
    ending = OwnJob(callbacks=[EndsAfterFirstEpoch()])
    result = run(compose([*TINY, "trainer.epochs=3"], launch_dir=tmp_path / "ends"), ending)
    (ended,) = mlflow_runs(tmp_path / "ends")
    assert result == RunResult(None, ended.info.run_id, ended="ended after epoch 1")
    assert ending.calls == ["attending", "ended", "left"]  # neither evaluated, kept nor completed
    assert ended.info.status == "FINISHED" and "test_loss" not in ended.data.metrics
    assert len(mlflow_client(tmp_path / "ends").get_metric_history(ended.info.run_id,
                                                                   "epoch/loss")) == 1  # its epoch stays

    declining = OwnJob(keeps=False)
    result = run(compose([*TINY, "trainer.epochs=2"], launch_dir=tmp_path / "declines"), declining)
    (declined,) = mlflow_runs(tmp_path / "declines")
    objective = declined.data.metrics["val_accuracy"]  # sweep.metric's default
    assert result == RunResult(objective, declined.info.run_id) and declining.returned(result) == objective
    assert declining.calls == ["attending", f"keeps? {objective:.3f}", "completed after 2 epochs", "left"]
    assert not list((tmp_path / "declines").rglob("*.keras")), "a declined run exports nothing"
    artifacts = artifact_paths(mlflow_client(tmp_path / "declines"), declined.info.run_id)
    assert artifacts and not any(path.endswith(".png") for path in artifacts)

