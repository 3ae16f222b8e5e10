"""Pre-emption without losing an epoch: SIGTERM backs up at the step in flight, a kill -9 loses only what came after
the last mid-epoch backup (trainer.backup_every), and the same command goes on from that step, to the weights of
the run that was never interrupted (trainer.deterministic=true)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_env, mlflow_client, mlflow_runs
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

# 2,160 training examples: 68 batches of 32 per epoch
COMMAND = ["data=synthetic", "data.num_examples=3000", "data.input_shape=[16]", "trainer.epochs=3",
           "trainer.batch_size=32", "trainer.steps_per_execution=1", "trainer.deterministic=true", "export=none",
           "trainer.log_every=16"]  # a line every 16 batches: a resumed epoch's count on from its backup
BATCHES = 68

# A user's callback, outside the package: it writes down every step this process trains, and (fault injection:
# the signal is real, sent to the run's own process, but at a chosen step, which a signal from outside cannot be)
# sends KILL_SIGNAL to its own process once the optimizer reaches step KILL_AT.
STEPPER = '''
import os, signal
import keras

class Stepper(keras.callbacks.Callback):
    def __init__(self, log):
        super().__init__()
        self.log = log
        self.kill_at = int(os.environ.get("KILL_AT", 0))
        self.signal = getattr(signal, os.environ.get("KILL_SIGNAL", "SIGTERM"))

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations)
        with open(self.log, "a") as file:
            file.write(f"{step}\\n")
        if step == self.kill_at:
            os.kill(os.getpid(), self.signal)
'''


# A user's source that does not know its length (a filter: as TFRecordDataset, a user's own files): 2,160 training
# examples, as COMMAND's synthetic split has, in 68 batches that nothing counts before training.
UNSIZED = '''
import tensorflow as tf
from tfx_hydra.data import from_pipelines


def examples(count, offset):
    return (tf.data.Dataset.range(count)
            .map(lambda i: (tf.random.stateless_normal([16], seed=tf.stack([i + offset, 0])), i % 3))
            .filter(lambda x, y: True))


def source(batch_size, seed, num_examples, input_shape, num_classes, test_split, validation_split, normalization,
           **pipeline):  # the keys data=synthetic's node brings
    return from_pipelines(examples(2160, 0), examples(240, 10_000), examples(600, 20_000), input_shape=input_shape,
                          num_classes=3, batch_size=batch_size, seed=seed, name="unsized", **pipeline)
'''


def command(tmp_path: Path, steps_log: str, *extra: str) -> list[str]:
    return [*COMMAND, *extra, f"trainer.callbacks=[{{_target_: stepper.Stepper, log: {tmp_path / steps_log}}}]"]


def killed_at(tmp_path: Path, args: list[str], step: int, signal_name: str) -> subprocess.CompletedProcess:
    env = cli_env() | {"KILL_AT": str(step), "KILL_SIGNAL": signal_name, "PYTHONPATH": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "tfx_hydra", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def steps_trained(tmp_path: Path, steps_log: str) -> list[int]:
    return [int(line) for line in (tmp_path / steps_log).read_text().split()]


def epoch_metrics(tmp_path: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    """The run's curve of `key`, each epoch's value (Keras' figures under epoch/<key>, the clock's as they are)."""
    from tfx_hydra.metrics import epoch_metric

    return sorted((m.step, m.value) for m in mlflow_client(tmp_path).get_metric_history(run_id, epoch_metric(key)))


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "stepper.py").write_text(STEPPER)
    (tmp_path / "unsized.py").write_text(UNSIZED)
    monkeypatch.syspath_prepend(str(tmp_path))  # in-process runs import it as `python -m` from here would
    return tmp_path


def test_sigterm_mid_epoch_backs_up_at_the_step_and_the_same_command_ends_with_the_uninterrupted_weights(project):
    args = command(project, "steps.log")
    stopped = killed_at(project, args, BATCHES + 32, "SIGTERM")  # 32 batches into epoch 2
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    (run,) = mlflow_runs(project)
    assert run.info.status == "KILLED" and run.data.tags["error"] == "interrupted (SIGTERM)"
    backup = Path(run.data.tags["resume.backup_dir"])
    metadata = json.loads((backup / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["batch"]) == (1, 32)  # the step in flight, not epoch 1's end
    assert set(metadata["state"]) == {"metrics", "random"}  # the epoch's running totals, dropout's seeds
    assert stopped.stderr.rstrip().splitlines()[-1].startswith(
        f"tfx_hydra: interrupted (SIGTERM): MLflow run {run.info.run_id} is KILLED, epoch 2 at batch 32 backed up "
        f"in {backup}; resume it with: python -m tfx_hydra ")
    assert steps_trained(project, "steps.log") == list(range(1, BATCHES + 33))

    resumed = run_cli_in_process(args, cwd=project)  # the same command
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming MLflow run {run.info.run_id} from its backup (epoch 2 at batch 32)" in resumed.stdout
    assert "ran out of data" not in resumed.stdout + resumed.stderr  # the resumed epoch ends short by design
    midway = [line.split("  ")[1] for line in resumed.stdout.splitlines() if line.startswith("epoch 2/3  batch")]
    assert midway == ["batch 48/68", "batch 64/68"], midway  # counted on from batch 32, where it was backed up
    after = steps_trained(project, "steps.log")[BATCHES + 32:]
    assert after == list(range(BATCHES + 33, 3 * BATCHES + 1))  # the rest, once: 104 steps, not a fresh run's 204
    assert not backup.exists()

    fresh = run_cli_in_process(command(project, "fresh.log"), cwd=project)  # never interrupted
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert steps_trained(project, "fresh.log") == list(range(1, 3 * BATCHES + 1))
    finished, uninterrupted = sorted(mlflow_runs(project), key=lambda r: r.info.run_id != run.info.run_id)
    assert finished.info.run_id == run.info.run_id and finished.info.status == "FINISHED"
    assert finished.data.tags["model.weights_sha256"] == uninterrupted.data.tags["model.weights_sha256"]
    for key in ("loss", "accuracy", "val_loss"):  # each epoch once, the resumed epoch's figures as if never cut
        assert epoch_metrics(project, finished.info.run_id, key) == epoch_metrics(project, uninterrupted.info.run_id,
                                                                                   key)


# A user's callback (fault injection, as STEPPER's): SIGTERM to its own process as the last epoch's validation
# begins, every batch of the run trained
IN_LAST_VALIDATION = '''
import os, signal
import keras

class TermInLastValidation(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_test_begin(self, logs=None):
        if self.epoch == self.params["epochs"] - 1 and os.environ.get("KILL_SIGNAL"):
            os.kill(os.getpid(), signal.SIGTERM)
'''


def test_sigterm_in_the_last_epochs_validation_keeps_the_run_and_the_same_command_ends_it(project):
    """Keras would end such a fit as if whole and delete its backup, and the run was lost: KILLED 'before any
    epoch was backed up', its resume a new run from scratch. Now it backs up at the last epoch's last step and
    stops; the same command trains nothing, validates that epoch again and ends the same run, each epoch once."""
    (project / "lastval.py").write_text(IN_LAST_VALIDATION)
    args = [*COMMAND, f"trainer.callbacks=[{{_target_: lastval.TermInLastValidation}}, "
                      f"{{_target_: stepper.Stepper, log: {project / 'steps.log'}}}]"]
    stopped = killed_at(project, args, 0, "SIGTERM")  # the Stepper only writes its steps down (no step 0)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    (run,) = mlflow_runs(project)
    assert f"MLflow run {run.info.run_id} is KILLED, epoch 3 at batch {BATCHES} backed up in " in stopped.stderr
    assert steps_trained(project, "steps.log") == list(range(1, 3 * BATCHES + 1))
    again = killed_at(project, args, 0, "SIGTERM")  # resumed, and stopped in that validation once more
    assert again.returncode == 128 + signal.SIGTERM, again.stderr[-3000:]
    assert f"is KILLED, epoch 3 at batch {BATCHES} backed up in " in again.stderr, again.stderr[-3000:]

    resumed = run_cli_in_process(args, cwd=project)  # the same command (no KILL_SIGNAL here: it runs through)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming MLflow run {run.info.run_id} from its backup (epoch 3 at batch {BATCHES})" in resumed.stdout
    assert steps_trained(project, "steps.log") == list(range(1, 3 * BATCHES + 1))  # no step trained again
    (finished,) = mlflow_runs(project)
    assert finished.info.run_id == run.info.run_id and finished.info.status == "FINISHED"
    for key in ("loss", "accuracy", "val_loss"):  # each epoch once, epoch 3's training figures the backup's
        assert [step for step, _ in epoch_metrics(project, run.info.run_id, key)] == [0, 1, 2], key


def test_a_kill_9_loses_only_the_steps_after_the_last_mid_epoch_backup(project):
    args = command(project, "steps.log", "trainer.backup_every=10")
    killed = killed_at(project, args, BATCHES + 35, "SIGKILL")  # backups at 10, 20, 30 batches into epoch 2
    assert killed.returncode == -signal.SIGKILL
    (run,) = mlflow_runs(project)
    assert run.info.status == "RUNNING"  # nothing could close it
    metadata = json.loads((Path(run.data.tags["resume.backup_dir"]) / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["batch"]) == (1, 30)

    resumed = run_cli_in_process(args, cwd=project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = steps_trained(project, "steps.log")[BATCHES + 35:]
    assert after == list(range(BATCHES + 31, 3 * BATCHES + 1))  # from step 99: 5 steps trained again, not 35
    (finished,) = mlflow_runs(project)
    assert finished.info.status == "FINISHED"
    assert [step for step, _ in epoch_metrics(project, finished.info.run_id, "val_loss")] == [0, 1, 2]


def test_a_pipeline_of_unknown_length_trains_whole_epochs_and_resumes_from_the_last_epochs_end(project):
    """Nothing counts a user's pipeline of unknown length before training: each epoch reads it to its end. Keras
    learns an epoch's batches from the first epoch a process runs, so a resumed part-epoch would teach it too few:
    such a run backs up at epoch ends only (said, with the line that gives the pipeline its length), and a kill
    mid-epoch loses that epoch's batches, never the epochs before it."""
    unsized = ["data._target_=unsized.source", "data.num_classes=3"]
    args = command(project, "steps.log", *unsized, "trainer.backup_every=10")
    killed = killed_at(project, args, BATCHES + 35, "SIGKILL")  # 35 batches into epoch 2
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run,) = mlflow_runs(project)
    assert run.data.tags["data.num_train"] == "?"
    metadata = json.loads((Path(run.data.tags["resume.backup_dir"]) / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata.get("batch") or 0) == (1, 0)  # epoch 1's end: no backup within epoch 2
    before = len(steps_trained(project, "steps.log"))  # epoch 1's 68 batches and 34 of epoch 2's

    resumed = run_cli_in_process(args, cwd=project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "backups: at epoch ends only, the training pipeline does not know its length" in resumed.stdout
    assert "assert_cardinality(N)" in resumed.stdout
    assert before == BATCHES + 34  # (Keras' last call of an epoch of unknown length advances the step count once)
    after = steps_trained(project, "steps.log")[before:]
    assert len(after) == 2 * BATCHES  # epochs 2 and 3, each read to its end though nothing counted it
    fresh = run_cli_in_process(command(project, "fresh.log", *unsized), cwd=project)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert len(steps_trained(project, "fresh.log")) == 3 * BATCHES
    finished = next(r for r in mlflow_runs(project) if r.info.run_id == run.info.run_id)
    assert finished.info.status == "FINISHED"
    assert [step for step, _ in epoch_metrics(project, finished.info.run_id, "val_loss")] == [0, 1, 2]
    throughput = epoch_metrics(project, finished.info.run_id, "examples_per_sec")
    seconds = epoch_metrics(project, finished.info.run_id, "epoch_seconds")
    assert 2160 <= throughput[-1][1] * seconds[-1][1] <= BATCHES * 32 + 1  # its batches counted: no length known
