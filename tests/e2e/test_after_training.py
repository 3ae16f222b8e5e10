"""A run's trained weights outlive every stop until the run is FINISHED: a signal or a kill -9 during the test
evaluation or an export leaves them on disk, and the same command continues the same MLflow run, trains nothing,
evaluates and writes the exports not yet done, and ends FINISHED with the weights of a run never interrupted. A
run stopped before its first epoch ended starts again in the same MLflow run, as its message says."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import cli_env, mlflow_runs
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow

COMMAND = ["trainer.epochs=2", "trainer.deterministic=true", "export=[savedmodel,tflite,onnx]"]

# A user's data source, outside the package (fault injection: the signal is real, sent to the run's own process,
# but at a chosen moment, which a signal from outside cannot hit): 16 numbers per example, and the test split's
# first example, read once training has ended (the phase's end is on disk), sends KILL_SIGNAL to its own process.
SIGNALS_IN_THE_TEST_EVALUATION = '''
import glob, os, signal
import tensorflow as tf
from tfx_hydra.data import from_pipelines


def signal_once_trained(index):
    if int(index) == 0 and os.environ.get("KILL_SIGNAL") and glob.glob("outputs/*/*/backup/trained/phase.json"):
        os.kill(os.getpid(), getattr(signal, os.environ.pop("KILL_SIGNAL")))
    return index


def examples(count, offset, watched=False):
    indices = tf.data.Dataset.range(count)
    if watched:
        indices = indices.map(lambda i: tf.ensure_shape(tf.py_function(signal_once_trained, [i], tf.int64), []))
    return indices.map(lambda i: (tf.random.stateless_normal([16], seed=tf.stack([i + offset, 0])), i % 3))


def source(batch_size, seed, **pipeline):
    return from_pipelines(examples(640, 0), examples(128, 10_000), examples(256, 20_000, watched=True),
                          input_shape=[16], num_classes=3, batch_size=batch_size, seed=seed, name="watched",
                          **{k: v for k, v in pipeline.items() if k in ("cache", "shuffle_buffer", "prefetch")})
'''


def started(launch: Path, args: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tfx_hydra", *args], cwd=launch, env=(env or cli_env()),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stopped_once_printed(launch: Path, args: list[str], line: str, signum: int) -> tuple[int, str, str]:
    """The command, sent `signum` as soon as it prints `line` (the SavedModel written: the TFLite and ONNX
    conversions, seconds long, are under way)."""
    process = started(launch, args)
    out = []
    for text in process.stdout:
        out.append(text)
        if line in text:
            process.send_signal(signum)
            break
    rest, err = process.communicate(timeout=300)
    return process.returncode, "".join(out) + rest, err


def uninterrupted_sha(tmp_path: Path, args: list[str]) -> str:
    launch = tmp_path / "never_interrupted"
    launch.mkdir()
    done = run_cli_in_process(args, cwd=launch)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(launch)
    return run.data.tags["model.weights_sha256"]


def resumed_to_the_end(launch: Path, args: list[str], run_id: str):
    """The same command, run to its end: one FINISHED run, the interrupted one, nothing trained again."""
    resumed = run_cli_in_process(args, cwd=launch)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "nothing is trained again" in resumed.stdout and "epoch 1/2" not in resumed.stdout
    (run,) = mlflow_runs(launch)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert not Path(run.data.tags["resume.backup_dir"]).exists()  # gone once FINISHED, and only then
    return resumed, run


def test_sigterm_during_an_export_keeps_the_weights_and_the_same_command_writes_the_rest(tmp_path):
    status, out, err = stopped_once_printed(tmp_path, COMMAND, "savedmodel written to", signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, err[-3000:]
    (run,) = mlflow_runs(tmp_path)
    backup = Path(run.data.tags["resume.backup_dir"])
    assert run.info.status == "KILLED" and (backup / "trained" / "phase.json").exists()
    assert err.rstrip().splitlines()[-1] == (
        f"tfx_hydra: interrupted (SIGTERM): MLflow run {run.info.run_id} is KILLED; trained: 2 of 2 epochs kept in "
        f"{backup}; the next command evaluates and exports what is not done, resume it with: python -m tfx_hydra "
        "trainer.epochs=2 trainer.deterministic=true 'export=[savedmodel,tflite,onnx]'")
    savedmodel = run.data.tags["export.savedmodel.path"]

    resumed, finished = resumed_to_the_end(tmp_path, COMMAND, run.info.run_id)
    assert f"export: savedmodel written to {savedmodel} (before the interruption)" in resumed.stdout
    assert "table_initializer" not in resumed.stdout + resumed.stderr  # TensorFlow's note while ONNX converts: logged
    assert savedmodel.endswith("/export/mlp/1") and not Path(savedmodel).with_name("2").exists()  # not written twice
    for name in ("tflite", "onnx"):  # each once, before the stop or now: beside it, in the first folder
        assert Path(finished.data.tags[f"export.{name}.path"]).parent == Path(savedmodel).parents[1]
    assert finished.data.tags["resume.interrupted_by"] == "interrupted (SIGTERM)"
    assert finished.data.tags["model.weights_sha256"] == uninterrupted_sha(tmp_path, COMMAND)


# A user's own exporter (an export option is any class `(model, datasets) -> ExportResult`), outside the package;
# fault injection as above: halfway through writing its file it sends its own process KILL_SIGNAL, then writes the rest.
SIGNALS_HALFWAY_THROUGH_AN_EXPORT = '''
import os, signal
from tfx_hydra.export import ExportResult


class HalfwaySignalled:
    def __init__(self, path):
        self.path = path

    def __call__(self, model, datasets):
        with open(self.path + ".calls", "a") as calls:
            calls.write("called\\n")
        with open(self.path, "w") as out:
            out.write("first half\\n")
            if os.environ.get("KILL_SIGNAL"):
                os.kill(os.getpid(), getattr(signal, os.environ.pop("KILL_SIGNAL")))
            out.write("second half\\n")  # an interrupt raised at once would raise before this line
        return ExportResult("halfway", self.path, {"export.halfway.size_bytes": float(os.path.getsize(self.path))})
'''


def test_ctrl_c_during_an_export_waits_for_it_and_keeps_the_weights_too(tmp_path):
    """Ctrl-C while a format is written lets that format finish and be noted (an interrupt raised inside a
    converter's code once left the process hanging, with no output, instead of closing its run), then stops the
    run KILLED before the next; the same command writes only what is left."""
    (tmp_path / "halfway.py").write_text(SIGNALS_HALFWAY_THROUGH_AN_EXPORT)
    written = tmp_path / "halfway.txt"
    args = [*COMMAND[:2], "export=savedmodel", "+export.halfway._target_=halfway.HalfwaySignalled",
            f"+export.halfway.path={written}"]
    env = cli_env() | {"KILL_SIGNAL": "SIGINT", "PYTHONPATH": f"{tmp_path}:{cli_env()['PYTHONPATH']}"}
    process = started(tmp_path, args, env)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGINT, err[-3000:]
    assert written.read_text() == "first half\nsecond half\n"  # the export in flight was not cut
    assert f"export: halfway written to {written}" in out
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED" and "trained: 2 of 2 epochs kept in" in err

    sys.path.insert(0, str(tmp_path))  # the in-process runs import the user's exporter as the command would
    try:
        resumed, finished = resumed_to_the_end(tmp_path, args, run.info.run_id)
        assert f"export: halfway written to {written} (before the interruption)" in resumed.stdout
        assert (tmp_path / "halfway.txt.calls").read_text() == "called\n"  # not written twice
        assert finished.data.tags["export.halfway.path"] == str(written)
        assert finished.data.tags["model.weights_sha256"] == uninterrupted_sha(tmp_path, args)
    finally:
        sys.path.remove(str(tmp_path))


def test_a_kill_9_during_an_export_loses_no_training(tmp_path):
    status, _, _ = stopped_once_printed(tmp_path, COMMAND, "savedmodel written to", signal.SIGKILL)
    assert status == -signal.SIGKILL
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "RUNNING"  # nothing could close it: the next command does, and goes on with it
    resumed, finished = resumed_to_the_end(tmp_path, COMMAND, run.info.run_id)
    assert "(before the interruption)" in resumed.stdout
    assert finished.data.tags["model.weights_sha256"] == uninterrupted_sha(tmp_path, COMMAND)


def test_sigterm_during_the_test_evaluation_keeps_the_weights(tmp_path):
    (tmp_path / "watched.py").write_text(SIGNALS_IN_THE_TEST_EVALUATION)
    args = ["data=synthetic", "data._target_=watched.source", "data.input_shape=[16]", "data.num_classes=3",
            *COMMAND[:2], "export=savedmodel"]
    env = cli_env() | {"KILL_SIGNAL": "SIGTERM", "PYTHONPATH": f"{tmp_path}:{cli_env()['PYTHONPATH']}"}
    process = started(tmp_path, args, env)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "export:" not in out  # stopped before any export: in the test split's evaluation
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED" and "test_loss" not in run.data.metrics
    assert "trained: 2 of 2 epochs kept in" in err
    sys.path.insert(0, str(tmp_path))  # the in-process runs import the user's source as the command would
    try:
        _, finished = resumed_to_the_end(tmp_path, args, run.info.run_id)
        assert "test_loss" in finished.data.metrics
        assert finished.data.tags["model.weights_sha256"] == uninterrupted_sha(tmp_path, args)
    finally:
        sys.path.remove(str(tmp_path))


# A user's callback (fault injection, as above): KILL_SIGNAL to its own process at the first epoch's 5th step
EARLY_STOP = '''
import os, signal
import keras

class SignalAtStep5(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == 5 and os.environ.get("KILL_SIGNAL"):
            signum = getattr(signal, os.environ.pop("KILL_SIGNAL"))
            os.kill(os.getpid(), signum)  # the first waits for the step, to back it up there
            os.kill(os.getpid(), signum)  # pressed again: at once, from the last backup (none yet)
'''


def test_a_run_stopped_before_its_first_epoch_ended_starts_again_in_the_same_mlflow_run(tmp_path):
    """Ctrl-C pressed twice interrupts at once (once, it would wait for the step and back it up), here before any
    backup."""
    signum = signal.SIGINT
    (tmp_path / "early.py").write_text(EARLY_STOP)
    args = ["trainer.epochs=2", "trainer.steps_per_execution=1", "export=none", "export.mlflow_model=false",
            "trainer.callbacks=[{_target_: early.SignalAtStep5}]"]
    env = cli_env() | {"KILL_SIGNAL": signal.Signals(signum).name,
                       "PYTHONPATH": f"{tmp_path}:{cli_env()['PYTHONPATH']}"}
    process = started(tmp_path, args, env)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum, err[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"
    assert err.rstrip().splitlines()[-1].startswith(
        f"tfx_hydra: interrupted ({signal.Signals(signum).name}): MLflow run {run.info.run_id} is KILLED before its "
        "first epoch ended: nothing trained to keep; it starts again, in the same MLflow run, with: python -m "
        "tfx_hydra ")
    sys.path.insert(0, str(tmp_path))
    try:
        again = run_cli_in_process(args, cwd=tmp_path)  # the command the message gives
    finally:
        sys.path.remove(str(tmp_path))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"starting MLflow run {run.info.run_id} again: it was stopped before its first epoch ended" in again.stdout
    (finished,) = mlflow_runs(tmp_path)  # the same run, not a second one
    assert finished.info.run_id == run.info.run_id and finished.info.status == "FINISHED"
    assert json.loads(json.dumps(finished.data.params))["trainer.epochs"] == "2"  # its params, logged once


def test_a_backup_left_by_a_finished_run_is_gone(tmp_path):
    """The backup goes with the FINISHED run (run.py), and the phase's end replaced its epoch backup before."""
    done = run_cli_in_process(["trainer.epochs=2", "export=none", "export.mlflow_model=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert not Path(run.data.tags["resume.backup_dir"]).exists()
    assert time.time() - run.info.end_time / 1000 < 600
