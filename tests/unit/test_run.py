"""The run's steps called directly: build errors, compile, train callbacks, NaN stop, the objective."""

from __future__ import annotations

import math
import re

import pytest
from omegaconf import OmegaConf

from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError, DataError, TrainingError
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.metrics import end_of_run_names
from tfx_hydra.models import mlp
from tfx_hydra.run import BatchPlan, build, compile_model, evaluate, sweep_objective, train
from tfx_hydra.schemas import (EarlyStoppingConfig, HardwareConfig, PrecisionConfig, Settings, SweepConfig,
                               TrackingConfig, TrainerConfig)
from tfx_hydra.tracking import NullTracker
from tests.planted import loss_nan_when, mlp_with_nan_after

ADAM = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})


class RecordingTracker(NullTracker):
    """Keeps what would go to MLflow, to assert on it."""

    def __init__(self):
        self.epochs, self.metrics, self.tags = [], {}, {}

    def set_tags(self, tags):
        self.tags.update(tags)

    def log_epoch(self, epoch, logs):
        self.epochs.append((epoch, dict(logs)))

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)


@pytest.fixture
def data():
    return digits([8, 8], 10, batch_size=32, seed=0)


def settings_with(trainer: TrainerConfig, precision: PrecisionConfig | None = None) -> Settings:
    return Settings(seed=0, trainer=trainer, hardware=HardwareConfig(), precision=precision or PrecisionConfig(),
                    tracking=TrackingConfig(enabled=False), sweep=SweepConfig())


def compiled(trainer: TrainerConfig, hardware: HardwareInfo | None = None, tracker=None, replicas: int = 1):
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    plan = BatchPlan(global_size=32, replicas=replicas, steps_per_execution=1)
    compile_model(model, ADAM, settings_with(trainer), "float32", hardware or HardwareInfo(profile="cpu"), plan,
                  tracker or RecordingTracker())
    return model


def test_build_passes_our_errors_through_unwrapped():
    node = OmegaConf.create({"_target_": "tfx_hydra.models.mlp", "name": "m", "input_shape": [8, 8],
                             "num_classes": 10, "units": -4})
    with pytest.raises(ConfigError, match=r"model.units=-4 is invalid"):
        build(node, "model")


def test_build_names_the_group_of_an_unknown_argument():
    node = OmegaConf.create({"_target_": "tfx_hydra.models.mlp", "name": "mlp", "input_shape": [8, 8],
                             "num_classes": 10, "colour": "red"})
    with pytest.raises(ConfigError, match=r"cannot build 'model' from its config: .*unexpected keyword argument 'colour'"):
        build(node, "model")
    data = OmegaConf.create({"_target_": "tfx_hydra.data.digits", "input_shape": [8, 8], "num_classes": 10,
                             "batch_size": 32, "seed": 0, "colour": "red"})
    with pytest.raises(ConfigError, match=r"data.colour is not an option of this data source"):
        build(data, "data")


def test_build_reports_data_errors_as_data_errors(tmp_path):
    node = OmegaConf.create({"_target_": "tfx_hydra.data.mnist", "path": str(tmp_path / "x.npz"),
                             "input_shape": [28, 28], "num_classes": 10, "batch_size": 32, "seed": 0})
    with pytest.raises(DataError, match="does not exist"):
        build(node, "data")


def test_a_loss_or_metric_keras_does_not_know_is_a_config_error_at_compile():
    with pytest.raises(ConfigError, match=r"trainer.loss: Keras does not know 'cross_entropyy'"):
        compiled(TrainerConfig(loss="cross_entropyy"))
    with pytest.raises(ConfigError, match=r"trainer.metrics: Keras does not know 'acuracy'"):
        compiled(TrainerConfig(metrics=["acuracy"]))
    assert compiled(TrainerConfig(metrics=["acc", "sparse_top_k_categorical_accuracy"])).compiled


def test_jit_compile_auto_follows_the_hardware_profile():
    tracker = RecordingTracker()
    assert compiled(TrainerConfig(jit_compile="auto"), HardwareInfo(profile="a100", xla=True), tracker).jit_compile
    assert tracker.tags["xla"] == "on"
    assert not compiled(TrainerConfig(jit_compile="auto"), HardwareInfo(profile="cpu", xla=False)).jit_compile
    assert compiled(TrainerConfig(jit_compile=True), HardwareInfo(profile="cpu", xla=False)).jit_compile


def test_xla_refused_under_op_determinism_is_said_not_dropped(capsys):
    from tensorflow.python.framework import config as tf_config

    tf_config.enable_op_determinism()
    try:
        tracker = RecordingTracker()
        model = compiled(TrainerConfig(jit_compile=True, deterministic=True), tracker=tracker)
    finally:
        tf_config.disable_op_determinism()
    assert model.jit_compile is False
    expected = ("XLA was asked for by trainer.jit_compile=true but is off: op determinism is on "
                "(trainer.deterministic=true), and XLA does not support it.")
    assert tracker.tags["xla"] == "off" and tracker.tags["xla.note"] == expected
    assert expected in " ".join(capsys.readouterr().out.split())


def test_learning_rate_scales_with_replicas_when_asked():
    tracker = RecordingTracker()
    compiled(TrainerConfig(scale_lr_with_replicas=True), tracker=tracker, replicas=4)
    assert tracker.tags["optimizer.learning_rate"] == pytest.approx(0.04)
    compiled(TrainerConfig(), tracker=tracker, replicas=4)
    assert tracker.tags["optimizer.learning_rate"] == pytest.approx(0.01)


def test_each_epoch_reaches_tracking_once_with_its_throughput(data):
    tracker = RecordingTracker()
    history = train(compiled(TrainerConfig(epochs=3)), data, TrainerConfig(epochs=3, verbose=False), tracker)
    assert [epoch for epoch, _ in tracker.epochs] == [0, 1, 2]
    logs = tracker.epochs[-1][1]
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec", "epoch_seconds"} <= set(logs)
    assert logs["examples_per_sec"] == pytest.approx(data.num_train / logs["epoch_seconds"])
    assert tracker.metrics["train_examples_per_sec"] > 0
    assert history.history["val_accuracy"][-1] > 0.5


def test_early_stopping_stops_when_the_monitor_stops_improving(data):
    # mode=max on val_loss: a falling loss never "improves", so patience 0 stops after epoch 2.
    trainer = TrainerConfig(epochs=20, verbose=False, early_stopping=EarlyStoppingConfig(
        enabled=True, monitor="val_loss", mode="max", patience=0, restore_best_weights=False))
    history = train(compiled(trainer), data, trainer, RecordingTracker())
    assert len(history.history["loss"]) == 2


# --- divergence: planted, so the product decides the outcome on every CPU (tests/planted.py) ----------

def compiled_with_loss(loss, trainer: TrainerConfig):
    import keras

    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss, metrics=["accuracy"])
    return model


def test_a_nan_loss_stops_training_and_fails_with_a_hint(data):
    import tensorflow as tf

    trainer = TrainerConfig(epochs=5, verbose=False)
    model = compiled_with_loss(loss_nan_when(tf.Variable(True)), trainer)
    with pytest.raises(TrainingError, match=r"the training loss became nan in epoch 1, batch 1; training stopped. "
                                            r"No epoch completed.*\n  Fix: lower optimizer.learning_rate"):
        train(model, data, trainer, RecordingTracker())


def test_a_nan_loss_in_a_later_epoch_names_epoch_and_batch_and_keeps_the_last_good_backup(data, tmp_path):
    import tensorflow as tf

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


def batches_per_epoch(data, batch_size=32):
    return math.ceil(data.num_train / batch_size)


def test_weights_that_turn_nan_under_a_finite_loss_fail_the_run_at_the_epochs_end(data, tmp_path):
    """What an AVX-512 CPU showed: the reported loss stays finite while the weights are NaN."""
    import json

    trainer = TrainerConfig(epochs=5, verbose=False)
    model = mlp_with_nan_after(2 * batches_per_epoch(data) + 1, name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, ADAM, settings_with(trainer), "float32", HardwareInfo(profile="cpu"), BatchPlan(32, 1, 1),
                  RecordingTracker())
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


@pytest.mark.parametrize("variant", ["steps_per_execution", "grad_accum_steps", "mixed_float16", "two_replicas"])
def test_the_weight_check_holds_under_every_way_of_training(variant, data):
    import keras
    import tensorflow as tf

    from tfx_hydra.precision import apply_loss_scaling, set_precision

    steps = 4 if variant == "steps_per_execution" else 1
    accumulate = 2 if variant == "grad_accum_steps" else 1
    policy = "mixed_float16" if variant == "mixed_float16" else "float32"
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
        set_precision("float32")


def test_a_step_skipped_by_dynamic_loss_scaling_is_not_divergence(data):
    """mixed_float16 with a loss scale far too large: every step overflows float16 and is skipped
    while the scale halves, until it fits. The weights never leave finite values: no failure."""
    import keras

    from tfx_hydra.precision import set_precision

    set_precision("mixed_float16")
    try:
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=2.0 ** 60)
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        trainer = TrainerConfig(epochs=3, verbose=False)
        history = train(model, data, trainer, RecordingTracker())
    finally:
        set_precision("float32")
    assert float(keras.ops.convert_to_numpy(optimizer.dynamic_scale)) < 2.0 ** 40  # dozens of steps were skipped
    assert history.history["val_accuracy"][-1] > 0.5  # and training went on


def test_the_weight_check_finds_a_nan_planted_in_a_trainable_weight():
    import numpy as np

    from tfx_hydra.callbacks import NonFiniteGuard, non_finite_weights

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


def test_evaluate_adds_the_test_split(data):
    trainer = TrainerConfig(epochs=1, verbose=False)
    model = compiled(trainer)
    history = train(model, data, trainer, RecordingTracker())
    tracker = RecordingTracker()
    metrics = evaluate(model, data, history, tracker)
    assert set(tracker.metrics) == {"test_loss", "test_accuracy"}
    assert metrics["test_accuracy"] == tracker.metrics["test_accuracy"]
    assert metrics["val_accuracy"] == history.history["val_accuracy"][-1]
    assert sorted(metrics) == sorted(end_of_run_names(trainer))  # exactly what preflight accepts as sweep.metric
    assert metrics["train_examples_per_sec"] == pytest.approx(data.num_train / metrics["train_seconds"])


def test_the_objective_is_the_configured_metric():
    metrics = {"val_accuracy": 0.9, "test_accuracy": 0.8}
    assert sweep_objective(metrics, SweepConfig(metric="test_accuracy")) == 0.8
    with pytest.raises(ConfigError, match=r"sweep.metric=val_auc is not a metric this run produced.\n"
                                          r"  Fix: one of: test_accuracy, val_accuracy"):
        sweep_objective(metrics, SweepConfig(metric="val_auc"))


# --- gradient accumulation and out-of-memory ---------------------------------------------------

def test_four_accumulated_batches_of_32_update_like_one_batch_of_128():
    import keras
    import numpy as np

    ordered = digits([8, 8], 10, batch_size=32, seed=0, limit=512, shuffle_buffer=0)  # no shuffle: same batches
    big = digits([8, 8], 10, batch_size=128, seed=0, limit=512, shuffle_buffer=0)
    weights = []
    for data, accumulate in ((ordered, 4), (big, 1)):
        keras.utils.set_random_seed(1)
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.0)
        trainer = TrainerConfig(grad_accum_steps=accumulate, steps_per_execution=1)
        compile_model(model, ADAM, settings_with(trainer), "float32", HardwareInfo(profile="cpu"),
                      BatchPlan(32, 1, 1), RecordingTracker())
        model.fit(data.train, epochs=2, verbose=0)
        assert int(model.optimizer.iterations) == 8  # counts updates: 512 / 128 per epoch, not batches
        weights.append(model.get_weights())
    for accumulated, direct in zip(*weights):
        np.testing.assert_allclose(accumulated, direct, atol=2e-6)


def test_out_of_memory_names_the_batch_and_the_ways_out(data, monkeypatch):
    # Fault injection: no GPU here to exhaust, so fit raises the error TensorFlow raises on a GPU OOM.
    import tensorflow as tf

    trainer = TrainerConfig(epochs=1, verbose=False, batch_size=256)
    model = compiled(trainer)

    def exhausted(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[256,4096]")
    monkeypatch.setattr(model, "fit", exhausted)
    with pytest.raises(TrainingError) as caught:
        train(model, data, trainer, RecordingTracker(), BatchPlan(256, 2, 1))
    message = str(caught.value)
    assert "the device ran out of memory at trainer.batch_size=256 (128 per replica): OOM when allocating" in message
    assert "Fix: trainer.batch_size=128 trainer.grad_accum_steps=2 (same effective batch in less memory), " \
           "hardware.memory_growth=true" in message


# --- batch plan ----------------------------------------------------------------------------------

class FakeStrategy:
    """Only the replica count matters to the plan."""

    def __init__(self, replicas):
        self.num_replicas_in_sync = replicas


def test_auto_batch_is_the_profiles_per_replica_batch_times_replicas():
    from tfx_hydra.run import plan_batches

    a100 = HardwareInfo(profile="a100", per_replica_batch_size=512, steps_per_execution=16)
    plan = plan_batches(TrainerConfig(batch_size="auto"), a100, FakeStrategy(1))
    assert (plan.global_size, plan.per_replica, plan.steps_per_execution) == (512, 512, 16)
    assert plan_batches(TrainerConfig(batch_size=96), a100, FakeStrategy(1)).global_size == 96


def test_several_replicas_cap_steps_per_execution_at_one_and_say_why_when_asked(capsys):
    from tfx_hydra.run import plan_batches

    a100 = HardwareInfo(profile="a100", per_replica_batch_size=512, steps_per_execution=16)
    plan = plan_batches(TrainerConfig(batch_size="auto"), a100, FakeStrategy(4))
    assert (plan.global_size, plan.per_replica, plan.steps_per_execution) == (2048, 512, 1)
    assert capsys.readouterr().out == ""  # the profile's value: capped quietly
    plan = plan_batches(TrainerConfig(batch_size=64, steps_per_execution=8), a100, FakeStrategy(2))
    assert plan.steps_per_execution == 1
    assert "trainer.steps_per_execution=8 fails in Keras with 2 replicas" in " ".join(capsys.readouterr().out.split())


def test_scaling_the_learning_rate_needs_one_to_scale():
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    optimizer = OmegaConf.create({"_target_": "keras.optimizers.Adam"})
    with pytest.raises(ConfigError, match=r"trainer.scale_lr_with_replicas=true needs optimizer.learning_rate"):
        compile_model(model, optimizer, settings_with(TrainerConfig(scale_lr_with_replicas=True)), "float32",
                      HardwareInfo(profile="cpu"), BatchPlan(32, 2, 1), RecordingTracker())


def test_tensorboard_histograms_every_n_epochs_and_a_profiled_batch_range(data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = TrainerConfig(epochs=4, verbose=False, tensorboard_histogram_freq=2, tensorboard_profile_batches=[2, 3])
    train(compiled(trainer), data, trainer, RecordingTracker(), tensorboard_dir=str(tmp_path))
    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in events.Tensors("epoch_loss")] == [0, 1, 2, 3]
    assert [e.step for e in events.Tensors("dense_0/kernel/histogram")] == [0, 2]  # every 2nd epoch (Keras: epoch % 2 == 0)
    assert events.Tags()["graph"] is True
    assert list((tmp_path / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))  # the profiled batches


def test_tensorboard_off_writes_nothing(data, tmp_path):
    trainer = TrainerConfig(epochs=1, verbose=False, tensorboard=False)
    train(compiled(trainer), data, trainer, RecordingTracker(), tensorboard_dir=str(tmp_path / "tb"))
    assert not (tmp_path / "tb").exists()


# --- resuming from a backup -----------------------------------------------------------------------------

class StopAfterEpoch(RecordingTracker):
    """Raises once epoch `stop` (zero-based) has been backed up: the tracking callback runs last."""

    def __init__(self, stop):
        super().__init__()
        self.stop = stop

    def log_epoch(self, epoch, logs):
        if epoch == self.stop:
            raise RuntimeError("stopped here")
        super().log_epoch(epoch, logs)


def test_a_backup_at_or_past_the_last_epoch_is_refused_before_training(data, tmp_path):
    backup = tmp_path / "backup"
    trainer = TrainerConfig(epochs=5, verbose=False)
    with pytest.raises(RuntimeError, match="stopped here"):
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
    with pytest.raises(RuntimeError, match="stopped here"):
        train(compiled(trainer), data, trainer, StopAfterEpoch(0), backup_dir=str(backup))
    wider = mlp(name="mlp", input_shape=[8, 8], num_classes=10, units=64)
    compile_model(wider, ADAM, settings_with(trainer), "float32", HardwareInfo(profile="cpu"), BatchPlan(32, 1, 1),
                  RecordingTracker())
    with pytest.raises(TrainingError, match=rf"the backup in {re.escape(str(backup))} was written by a model of another "
                                            r"shape and cannot be resumed"):
        train(wider, data, trainer, RecordingTracker(), backup_dir=str(backup))


def test_a_resume_logs_the_backed_up_epochs_mlflow_never_got_and_no_epoch_twice(data, tmp_path):
    backup = tmp_path / "backup"
    trainer = TrainerConfig(epochs=4, verbose=False)
    first = StopAfterEpoch(1)  # epoch 2 backed up, then the process "dies" before its metrics are written
    with pytest.raises(RuntimeError):
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
