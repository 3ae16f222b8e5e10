"""The callbacks at work in a real fit: divergence stops (planted, so the product decides the
outcome on every CPU: tests/helpers/planted.py), and the per-epoch backup resumes or refuses."""

from __future__ import annotations

import json
import os
import re
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.fakes import PlantedKill, RecordingTracker, StopAfterEpoch
from tests.helpers.planted import loss_nan_when, mlp_with_nan_after
from tests.helpers.training import ADAM, batches_per_epoch, compiled, settings_with, setup_with
from tfx_hydra.errors import TrainingError
from tfx_hydra.models import mlp
from tfx_hydra.precision import FLOAT32, MIXED_FLOAT16, apply_loss_scaling, set_precision
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.strategy import BatchPlan
from tfx_hydra.trainer import compile_model, train
from tfx_hydra.trainer.callbacks import NonFiniteGuard, non_finite_weights


def compiled_with_loss(loss, trainer: TrainerConfig):
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss, metrics=["accuracy"])
    return model


def test_a_nan_loss_stops_training_and_fails_with_a_hint(data):
    trainer = TrainerConfig(epochs=5, verbose=False)
    model = compiled_with_loss(loss_nan_when(tf.Variable(True)), trainer)
    with pytest.raises(TrainingError, match=r"the training loss became nan in epoch 1, batch 1; training stopped. "
                                            r"No epoch completed.*\n  Fix: lower optimizer.learning_rate"):
        train(model, data, trainer, RecordingTracker())


def test_a_nan_loss_in_a_later_epoch_names_epoch_and_batch_and_keeps_the_last_good_backup(data, tmp_path):
    bad = tf.Variable(False)  # raised when two epochs have completed: the loss turns NaN in the third

    class CountingTracker(RecordingTracker):
        def log_epoch(self, epoch, logs):
            super().log_epoch(epoch, logs)
            bad.assign(epoch + 1 >= 2)

    trainer = TrainerConfig(epochs=5, verbose=False)
    backup = tmp_path / "backup"
    tracker = CountingTracker()
    with pytest.raises(TrainingError) as failure:
        train(compiled_with_loss(loss_nan_when(bad), trainer), data, trainer, tracker, BatchPlan(32, 1, 1),
              backup_dir=str(backup))
    message = str(failure.value)
    assert message.startswith("TrainingError: the training loss became nan in epoch 3, batch 1; training stopped. "
                              f"The weights of the last completed epoch (epoch 2) are kept in {backup}.")
    assert "Fix: lower optimizer.learning_rate (it is 0.01), check the data for NaN/inf values" in message
    assert any(backup.rglob("*.weights.h5"))  # Keras' TerminateOnNaN would have let BackupAndRestore delete it
    assert [epoch for epoch, _ in tracker.epochs] == [0, 1]


def test_weights_that_turn_nan_under_a_finite_loss_fail_the_run_at_the_epochs_end(data, tmp_path):
    """What an AVX-512 CPU showed: the reported loss stays finite while the weights are NaN."""
    trainer = TrainerConfig(epochs=5, verbose=False)
    model = mlp_with_nan_after(2 * batches_per_epoch(data) + 1, name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, ADAM, settings_with(trainer), setup_with(), RecordingTracker())
    backup, tracker = tmp_path / "backup", RecordingTracker()
    with pytest.raises(TrainingError) as failure:
        train(model, data, trainer, tracker, BatchPlan(32, 1, 1), backup_dir=str(backup))
    message = str(failure.value)
    assert re.match(r"TrainingError: the model's weights became NaN/inf in epoch 3 \(nan_after/planted\), while "
                    r"the reported training loss was \d\.\d+; training stopped. The weights of the last completed "
                    rf"epoch \(epoch 2\) are kept in {re.escape(str(backup))}.", message), message
    assert "Fix: lower optimizer.learning_rate (it is 0.01), check the data for NaN/inf values" in message
    assert "or use precision=fp32 (the policy is float32)" in message
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2  # epochs done: 2
    assert [epoch for epoch, _ in tracker.epochs] == [0, 1]  # the diverged epoch is not logged


@pytest.mark.parametrize("variant", ["steps_per_execution", "grad_accum_steps", "mixed_float16",
                                     pytest.param("two_replicas", marks=pytest.mark.slow)])  # heavy: the full suite's
def test_the_weight_check_holds_under_every_way_of_training(variant, data):


    steps = 4 if variant == "steps_per_execution" else 1
    accumulate = 2 if variant == "grad_accum_steps" else 1
    policy = MIXED_FLOAT16 if variant == "mixed_float16" else FLOAT32
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if variant == "two_replicas"
                else tf.distribute.get_strategy())
    set_precision(policy)
    try:
        with strategy.scope():
            model = mlp_with_nan_after(batches_per_epoch(data) + 1, name="mlp", input_shape=[8, 8], num_classes=10)
            optimizer, auto_scale = apply_loss_scaling(
                keras.optimizers.Adam(0.01, gradient_accumulation_steps=accumulate if accumulate > 1 else None),
                policy, "auto")
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", steps_per_execution=steps,
                          auto_scale_loss=auto_scale)
        trainer = TrainerConfig(epochs=3, verbose=False, steps_per_execution=steps, grad_accum_steps=accumulate)
        with pytest.raises(TrainingError, match=r"the model's weights became NaN/inf in epoch 2 \(nan_after/planted\)"):
            train(model, data, trainer, RecordingTracker(), BatchPlan(32, strategy.num_replicas_in_sync, steps))
    finally:
        set_precision(FLOAT32)


def test_a_step_skipped_by_dynamic_loss_scaling_is_not_divergence(data):
    """mixed_float16 with a loss scale far too large: every step overflows float16 and is skipped
    while the scale halves, until it fits. The weights never leave finite values: no failure."""


    set_precision(MIXED_FLOAT16)
    try:
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=2.0 ** 60)
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        trainer = TrainerConfig(epochs=3, verbose=False)
        history = train(model, data, trainer, RecordingTracker())
    finally:
        set_precision(FLOAT32)
    assert float(keras.ops.convert_to_numpy(optimizer.dynamic_scale)) < 2.0 ** 40  # dozens of steps were skipped
    assert history.history["val_accuracy"][-1] > 0.5  # and training went on


def test_the_weight_check_finds_a_nan_planted_in_a_trainable_weight():


    model = compiled(TrainerConfig())
    guard = NonFiniteGuard()
    guard.set_model(model)
    guard.on_train_begin()
    guard.on_epoch_end(0)  # all finite: nothing happens
    kernel = model.get_layer("dense_0").kernel
    planted = kernel.numpy()
    planted[3, 5] = np.inf
    kernel.assign(planted)
    assert non_finite_weights(model) == ["dense_0/kernel"]
    guard.on_epoch_begin(0)
    with pytest.raises(TrainingError, match=r"weights became NaN/inf in epoch 1 \(dense_0/kernel\); training "
                                            r"stopped. No epoch completed"):
        guard.on_epoch_end(0)
    with pytest.raises(TrainingError, match=r"weights became NaN/inf at the end of training"):
        guard.on_train_end()


def test_a_backup_at_or_past_the_last_epoch_is_refused_before_training(data, tmp_path):
    backup = tmp_path / "backup"
    trainer = TrainerConfig(epochs=5, verbose=False)
    with pytest.raises(PlantedKill, match="stopped here"):
        train(compiled(trainer), data, trainer, StopAfterEpoch(2), backup_dir=str(backup))  # epochs 1-3 backed up
    fewer = TrainerConfig(epochs=2, verbose=False)
    tracker = RecordingTracker()
    with pytest.raises(TrainingError, match=rf"the backup in {re.escape(str(backup))} holds 3 completed epochs, and "
                                            r"this run trains up to epoch 2: there is nothing left to resume.\n  Fix: "
                                            r"trainer.epochs=4 or more to train on from the backup"):
        train(compiled(fewer), data, fewer, tracker, backup_dir=str(backup))
    assert tracker.epochs == []  # nothing trained, nothing logged


def test_a_backup_of_another_model_shape_is_refused_before_training(data, tmp_path):
    backup = tmp_path / "backup"
    trainer = TrainerConfig(epochs=5, verbose=False)
    with pytest.raises(PlantedKill, match="stopped here"):
        train(compiled(trainer), data, trainer, StopAfterEpoch(0), backup_dir=str(backup))
    wider = mlp(name="mlp", input_shape=[8, 8], num_classes=10, units=64)
    compile_model(wider, ADAM, settings_with(trainer), setup_with(), RecordingTracker())
    with pytest.raises(TrainingError, match=rf"the backup in {re.escape(str(backup))} was written by a model of "
                                            r"another shape and cannot be resumed"):
        train(wider, data, trainer, RecordingTracker(), backup_dir=str(backup))


def test_a_resume_logs_the_backed_up_epochs_mlflow_never_got_and_no_epoch_twice(data, tmp_path):
    backup = tmp_path / "backup"
    trainer = TrainerConfig(epochs=4, verbose=False)
    first = StopAfterEpoch(1)  # epoch 2 backed up, then the process "dies" before its metrics are written
    with pytest.raises(PlantedKill):
        train(compiled(trainer), data, trainer, first, backup_dir=str(backup))
    assert [epoch for epoch, _ in first.epochs] == [0]

    class Resumed(RecordingTracker):
        def log_missing_epochs(self, backed_up):  # what MLflow holds: epoch 0 only
            for epoch in sorted(set(backed_up) - {0}):
                self.log_epoch(epoch, backed_up[epoch])

    resumed = Resumed()
    train(compiled(trainer), data, trainer, resumed, backup_dir=str(backup))
    assert [epoch for epoch, _ in resumed.epochs] == [1, 2, 3]  # 1 from the backup's saved logs, then 2 and 3 trained
    assert set(resumed.epochs[0][1]) >= {"loss", "val_loss", "accuracy", "epoch_seconds"}


# --- EpochProgress -------------------------------------------------------------------------------

@pytest.mark.signals
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, as planted
def test_a_ctrl_c_a_finalizer_swallowed_mid_epoch_stops_the_fit_at_that_batch(data):
    """Fault injection: Ctrl-C lands in a finalizer at batch 3 (Python drops the KeyboardInterrupt there);
    the fit must still stop at that batch, not train on."""
    from tests.helpers.fakes import CtrlCInAFinalizer
    from tfx_hydra.process import interrupt_on_signals, restore_handlers

    seen = []

    class DropsAnObjectAtBatch3(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(batch)
            if batch == 3:
                CtrlCInAFinalizer()

    model = compiled_with_loss("sparse_categorical_crossentropy", TrainerConfig())
    previous = interrupt_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            train(model, data, TrainerConfig(epochs=2, verbose=False, tensorboard=False), RecordingTracker(),
                  users=[DropsAnObjectAtBatch3()])
    finally:
        restore_handlers(previous)
    assert seen == [0, 1, 2, 3]  # stopped at the batch the interrupt was lost in


@pytest.mark.signals
def test_a_ctrl_c_mid_step_in_a_run_without_backup_lets_the_step_end_then_stops(data):
    """A real SIGINT sent as batch 3 begins: the step runs to its end (a KeyboardInterrupt raised inside Keras' and
    TensorFlow's own code mid-step could leave a device scope half entered, or abort), then the fit stops there."""
    from tfx_hydra.process import interrupt_on_signals, restore_handlers

    began = []

    class CtrlCAtBatch3(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            began.append(batch)
            if batch == 3:
                os.kill(os.getpid(), signal.SIGINT)

    model = compiled_with_loss("sparse_categorical_crossentropy", TrainerConfig())
    previous = interrupt_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT") as interrupted:
            train(model, data, TrainerConfig(epochs=2, verbose=False, tensorboard=False), RecordingTracker(),
                  users=[CtrlCAtBatch3()])
    finally:
        restore_handlers(previous)
    assert began == [0, 1, 2, 3]  # none after it
    assert int(model.optimizer.iterations.numpy()) == 4  # and the step in flight was taken whole
    assert raised_by_the_run(interrupted.value)


def raised_by_the_run(interrupt: BaseException) -> bool:
    """The interrupt was raised at a batch's end by the run's own check, not wherever the signal found the main
    thread (inside Keras' or TensorFlow's code)."""
    import traceback

    frames = traceback.extract_tb(interrupt.__traceback__)
    return any(frame.filename.endswith("missed_interrupt.py") for frame in frames)


@pytest.mark.signals
def test_a_ctrl_c_during_the_test_evaluation_waits_for_the_batch_in_flight(data):
    """A real SIGINT sent while the test split is evaluated (from the pipeline's own thread, as its third batch is
    read): the evaluation stops at the batch's end, by the run's check, not inside Keras' evaluation loop."""
    import dataclasses

    from tfx_hydra.process import interrupt_on_signals, restore_handlers
    from tfx_hydra.trainer import evaluate

    model = compiled_with_loss("sparse_categorical_crossentropy", TrainerConfig())
    history = train(model, data, TrainerConfig(epochs=1, verbose=False, tensorboard=False), RecordingTracker())

    signalling = ctrl_c_at_the_third_batch(data.test)
    previous = interrupt_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT") as interrupted:
            evaluate(model, dataclasses.replace(data, test=signalling), history, RecordingTracker())
    finally:
        restore_handlers(previous)
    assert raised_by_the_run(interrupted.value)


@pytest.mark.signals
def test_a_ctrl_c_while_the_reports_predict_waits_for_the_batch_in_flight(data):
    """A real SIGINT sent while the reports' predictions are made (from the pipeline's thread, as its third batch is
    read): raised by the loop's own check after that batch, not inside Keras' call of the model."""
    import traceback

    from tfx_hydra.process import interrupt_on_signals, restore_handlers
    from tfx_hydra.reports import predictions

    model = compiled_with_loss("sparse_categorical_crossentropy", TrainerConfig())
    previous = interrupt_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT") as interrupted:
            predictions(model, ctrl_c_at_the_third_batch(data.test))
    finally:
        restore_handlers(previous)
    assert traceback.extract_tb(interrupted.value.__traceback__)[-1].name == "stop_now"


def ctrl_c_at_the_third_batch(dataset):
    """`dataset`, sending this process a real SIGINT from its reading thread as its third batch is read."""
    def send(index):
        if int(index) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return index

    def read(index, batch):
        with tf.control_dependencies([tf.py_function(send, [index], tf.int64)]):
            return tf.nest.map_structure(tf.identity, batch)

    return dataset.enumerate().map(read)


def test_the_progress_bar_moves_once_per_steps_per_execution_bundle_and_is_gone_after_the_epoch():
    import io

    from rich.console import Console

    from tfx_hydra.trainer.callbacks import EpochProgress

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", steps_per_execution=4)
    bar = EpochProgress(console, num_examples=320, epochs=2)
    x, y = np.random.default_rng(0).normal(size=(320, 4)), np.arange(320) % 3
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=2, verbose=0, callbacks=[bar])
    assert bar.updates == 2 * 3  # 10 batches in bundles of 4: 3 updates an epoch, none per step
    drawn = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue()).replace("\r", "\n")
    assert "epoch 1/2" in drawn and "epoch 2/2" in drawn and "10/10" in drawn and "11/10" not in drawn
    assert re.search(r"\d ex/s", drawn)
    assert bar._progress is None  # stopped (transient: erased) before the epoch's own line

    screen.truncate(0)  # an epoch of one bundle (steps_per_execution 16 > 10 batches) still says its speed
    model.compile("adam", "sparse_categorical_crossentropy", steps_per_execution=16)
    bar = EpochProgress(console, num_examples=320, epochs=1)
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=1, verbose=0, callbacks=[bar])
    drawn = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue()).replace("\r", "\n")
    assert bar.updates == 1 and "10/10" in drawn and re.search(r"\d ex/s", drawn), drawn


def test_a_fit_that_ends_mid_epoch_erases_its_bar_before_anything_else_is_said(data, monkeypatch):
    """Ctrl-C or an error mid-epoch: Keras ends no epoch, so without the trainer's stop the bar stayed live
    and the next line (the interrupt's, a search's summary) was glued to it and the bar drawn again."""
    import dataclasses
    import io

    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    # the run's terminal, as a file
    monkeypatch.setattr("tfx_hydra.trainer.callbacks.terminal_console", lambda: console)
    failing = data.train.enumerate().map(  # the pipeline breaks at the third batch of the epoch
        lambda i, batch: (tf.debugging.assert_less(i, tf.constant(2, tf.int64), message="planted") and batch))
    trainer = TrainerConfig(epochs=2, backup=False, steps_per_execution=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="planted"):
        train(compiled(trainer), dataclasses.replace(data, train=failing), trainer, RecordingTracker())
    console.print("the next line")
    after = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue()).split("the next line", 1)[1]
    assert "epoch 1/2" in screen.getvalue() and "━" not in after and "epoch 1/2" not in after, after


def test_no_progress_bar_when_the_output_is_not_a_terminal(monkeypatch):
    import logging

    from tfx_hydra.console import TerminalHandler
    from tfx_hydra.trainer.callbacks import terminal_console

    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    handler = TerminalHandler()  # pytest captures stdout: not a terminal
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])  # the run's handlers: this one alone
    assert terminal_console() is None
    monkeypatch.setattr(type(handler.console), "is_terminal", property(lambda self: True))
    assert terminal_console() is handler.console


def test_the_time_left_counts_this_epoch_at_its_pace_and_later_ones_as_long_as_the_last():
    from tfx_hydra.trainer.callbacks.midway import short_duration, time_left

    # 100 of 400 batches in 30 s: 90 s left of this epoch (epoch 2 of 5); each later one as the last whole (100 s)
    assert time_left(100, 400, 30.0, epoch=1, epochs=5, epoch_seconds=100.0) == (90.0, 90.0 + 3 * 100.0)
    assert time_left(100, 400, 30.0, epoch=0, epochs=2, epoch_seconds=None) == (90.0, 90.0 + 120.0)  # as this one
    assert time_left(0, 400, 0.0, 0, 2, None) is None and time_left(5, None, 1.0, 0, 2, None) is None
    assert [short_duration(s) for s in (45, 1212, 10920)] == ["45s", "20m 12s", "3h 02m"]


def test_input_wait_measures_no_call_whose_batches_would_cost_too_much_memory():
    """A measured call holds its batches (and their joined copy): 64 MiB at most, else the run is not measured."""
    import keras
    import tensorflow as tf

    from tfx_hydra.trainer.callbacks import InputWait

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile("adam", "mse", steps_per_execution=16)
    model.make_train_function()
    keras_own = model.train_function
    label = tf.TensorSpec((None,), tf.int64)
    images = InputWait(spec=(tf.TensorSpec((None, 128, 128, 3), tf.float32), label), batch_size=32)
    rows = InputWait(spec=(tf.TensorSpec((None, 8), tf.float32), label), batch_size=32)
    for callback in (images, rows):
        callback.set_model(model)
        callback.on_train_begin()
        callback.on_train_end()  # Keras' own train function is put back
    assert model.train_function is keras_own
    assert images._call_bytes() == (128 * 128 * 3 * 4 + 8) * 32 * 16 and not images._measuring  # 96 MiB
    assert rows._call_bytes() == (8 * 4 + 8) * 32 * 16 and rows._measuring


def test_a_resumed_epochs_lines_count_its_batches_on_from_the_backup_and_time_only_those_trained_here(caplog):
    """An epoch resumed from a backup at batch 15 of 20: the midway line says batch 18/20, not 3/20, and the
    epoch's examples/s counts the 5 batches this process trained, not the epoch's 20."""
    import logging

    from tfx_hydra.trainer.callbacks import EpochClock, MidwayReport

    model = compiled(TrainerConfig())
    clock = EpochClock(640, 1, verbose=False, batch_size=32, resumed_batches=lambda: 15)
    midway = MidwayReport(None, 3, 640, 1, RecordingTracker(), say=True, resumed_batches=lambda: 15)
    for callback in (clock, midway):
        callback.set_model(model)
        callback.set_params({"steps": 20, "epochs": 1})
        callback.on_epoch_begin(0)
    with caplog.at_level(logging.INFO):
        for batch in range(5):  # Keras counts the resumed epoch's batches from 0
            for callback in (clock, midway):
                callback.on_train_batch_end(batch, {"loss": 0.5})
    assert [r.message.split("  ")[1] for r in caplog.records if r.message.startswith("epoch 1/1")] == ["batch 18/20"]
    logs = {}
    clock.on_epoch_end(0, logs)
    assert clock.examples_trained == 5 * 32 and logs["examples_per_sec"] == pytest.approx(160 / logs["epoch_seconds"])
