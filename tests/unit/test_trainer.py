"""The trainer called directly: compile, one phase of fit with its callbacks, evaluation, out of memory, TensorBoard."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorflow.python.framework import config as tf_config

from tests.helpers.fakes import RecordingTracker
from tests.helpers.training import compiled
from tfx_hydra.errors import ConfigError, TrainingError
from tfx_hydra.hardware import HardwareInfo
from tfx_hydra.metrics import end_of_run_names
from tfx_hydra.settings.schemas import EarlyStoppingConfig, TrainerConfig
from tfx_hydra.strategy import BatchPlan
from tfx_hydra.trainer import evaluate, train


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


def test_xla_refused_under_op_determinism_is_said_not_dropped(caplog):
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
    assert (logging.WARNING, expected) in [(r.levelno, r.getMessage()) for r in caplog.records]


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


def test_evaluate_adds_the_test_split(data):
    trainer = TrainerConfig(epochs=1, verbose=False)
    model = compiled(trainer)
    history = train(model, data, trainer, RecordingTracker())
    tracker = RecordingTracker()
    metrics = evaluate(model, data, history, tracker)
    # the kept weights' figures (here the last epoch's), each once; the epoch's clock stays in its curves
    assert set(tracker.metrics) == {"test_loss", "test_accuracy", "parameters", "loss", "accuracy", "val_loss",
                                    "val_accuracy"}
    assert tracker.metrics["val_loss"] == history.history["val_loss"][-1]
    assert metrics["test_accuracy"] == tracker.metrics["test_accuracy"]
    assert metrics["parameters"] == model.count_params() > 0  # what a multi-objective search can minimise
    assert metrics["val_accuracy"] == history.history["val_accuracy"][-1]
    assert sorted(metrics) == sorted(end_of_run_names(trainer))  # exactly what preflight accepts as sweep.metric
    assert metrics["train_examples_per_sec"] == pytest.approx(data.num_train / metrics["train_seconds"])


def test_out_of_memory_names_the_batch_and_the_ways_out(data, monkeypatch):
    # Fault injection: no GPU here to exhaust, so fit raises the error TensorFlow raises on a GPU OOM.

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


def test_tensorboard_histograms_every_n_epochs_and_a_profiled_batch_range(data, tmp_path):
    trainer = TrainerConfig(epochs=4, verbose=False, tensorboard_histogram_freq=2, tensorboard_profile_batches=[2, 3])
    train(compiled(trainer), data, trainer, RecordingTracker(), tensorboard_dir=str(tmp_path))
    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in events.Tensors("epoch_loss")] == [0, 1, 2, 3]
    # every 2nd epoch (Keras: epoch % 2 == 0)
    assert [e.step for e in events.Tensors("dense_0/kernel/histogram")] == [0, 2]
    assert events.SummaryMetadata("dense_0/kernel/histogram").plugin_data.plugin_name == "histograms"  # TB draws it
    buckets = tf.make_ndarray(events.Tensors("dense_0/kernel/histogram")[0].tensor_proto)
    assert buckets.shape == (30, 3) and buckets[:, 2].sum() == 64 * 128  # every weight of the 64x128 kernel counted
    assert events.Tags()["graph"] is True
    assert list((tmp_path / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))  # the profiled batches


@pytest.mark.parametrize("values", [np.random.default_rng(0).normal(size=(300, 7)), np.full(50, 0.25), np.arange(10.0)])
def test_weight_histograms_hold_tensorboards_own_buckets_in_memory_of_the_weights_size(values):
    """TensorBoard's own histogram (its numpy version: a one-hot of values x buckets) is the reference."""
    from tensorboard.plugins.histogram import summary_v2

    from tfx_hydra.trainer.callbacks.tensorboard import histogram_buckets

    expected = tf.make_ndarray(summary_v2.histogram_pb("w", values).value[0].tensor)
    np.testing.assert_allclose(histogram_buckets(values.astype("float32")).numpy(), expected, rtol=1e-6, atol=1e-6)


def test_tensorboard_off_writes_nothing(data, tmp_path):
    trainer = TrainerConfig(epochs=1, verbose=False, tensorboard=False)
    train(compiled(trainer), data, trainer, RecordingTracker(), tensorboard_dir=str(tmp_path / "tb"))
    assert not (tmp_path / "tb").exists()


def pruning_study(tmp_path, lower: float):
    """A real study whose pruner stops a trial whose val_accuracy is below `lower` after any epoch."""
    import optuna

    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/o.db", direction="maximize",
                                pruner=optuna.pruners.ThresholdPruner(lower=lower))
    return study, optuna.trial.Trial(study, study.ask()._trial_id)


def test_a_pruned_trial_stops_after_the_epoch_its_pruner_judged_and_the_epoch_is_tracked(data, tmp_path):
    from tfx_hydra.sweeps.hparams_search.pruning import Pruned, TrialPruning

    study, trial = pruning_study(tmp_path, lower=2.0)  # no accuracy reaches 2: pruned at the first epoch
    trainer = TrainerConfig(epochs=4, verbose=False, early_stopping=EarlyStoppingConfig(enabled=True, patience=1))
    tracker = RecordingTracker()
    with pytest.raises(Pruned) as pruned:
        train(compiled(trainer), data, trainer, tracker, handed=[TrialPruning(trial, "val_accuracy")])
    assert pruned.value.epoch == 0 and len(tracker.epochs) == 1  # the pruned epoch reached tracking first
    assert study.trials[0].intermediate_values == {0: pytest.approx(pruned.value.value)}


def test_an_unpruned_trial_reports_every_epoch_beside_early_stopping(data, tmp_path):
    from tfx_hydra.sweeps.hparams_search.pruning import TrialPruning

    study, trial = pruning_study(tmp_path, lower=-1.0)  # never prunes
    trainer = TrainerConfig(epochs=3, verbose=False, early_stopping=EarlyStoppingConfig(enabled=True, patience=5))
    history = train(compiled(trainer), data, trainer, RecordingTracker(), handed=[TrialPruning(trial, "val_accuracy")])
    reported = study.trials[0].intermediate_values
    assert list(reported) == [0, 1, 2] and reported[2] == pytest.approx(history.history["val_accuracy"][-1])


def test_pruning_on_a_metric_no_epoch_logs_says_so_at_the_first_epoch(data, tmp_path):
    from tfx_hydra.sweeps.hparams_search.pruning import TrialPruning

    _, trial = pruning_study(tmp_path, lower=-1.0)
    trainer = TrainerConfig(epochs=2, verbose=False)
    with pytest.raises(ConfigError, match=r"sweep.metric=test_accuracy is not logged after each epoch"):
        train(compiled(trainer), data, trainer, RecordingTracker(), handed=[TrialPruning(trial, "test_accuracy")])


def test_check_numerics_is_off_again_once_its_run_ends(data):
    """trainer.check_numerics (debug=numerics) turns on TensorFlow's process-wide checks: the next run in
    the same process (a sweep's next job under the basic launcher) must not inherit them."""
    from tests.helpers.planted import mlp_with_nan_after

    trainer = TrainerConfig(epochs=2, verbose=False, check_numerics=True, backup=False)
    model = mlp_with_nan_after(2, name="mlp", input_shape=[8, 8], num_classes=10)
    with pytest.raises(TrainingError, match="produced the first NaN or infinity"):
        train(compiled(trainer, model=model), data, trainer, RecordingTracker())
    nan = tf.function(lambda x: tf.math.log(x - 1.0))(tf.zeros((2,)))  # a NaN, made without complaint now
    assert bool(tf.reduce_all(tf.math.is_nan(nan)))


def test_check_numerics_says_it_found_nothing_on_a_healthy_model(data, caplog):
    trainer = TrainerConfig(epochs=1, verbose=False, check_numerics=True, backup=False)
    tracker = RecordingTracker()
    with caplog.at_level(logging.INFO, logger="tfx_hydra"):
        train(compiled(trainer), data, trainer, tracker)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("numerics: ")]
    assert said == [f"numerics: checked every op of the training and validation steps, 1 epoch over "
                    f"{data.num_train:,} training examples: no NaN or infinity."]
    assert tracker.tags["debug.numerics"] == "clean"
