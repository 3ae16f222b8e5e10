"""lr_schedule: each schedule's rate at chosen updates against its formula; the rate a run logs per epoch
follows it, continues (not restarts) across a kill and resume, and starts again for fine-tuning; bad values
are preflight errors."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from tests.helpers import compose
from tests.helpers.fakes import PlantedKill, RecordingTracker, StopAfterEpoch
from tests.helpers.training import settings_with, setup_with
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.lr_schedule import LrScheduleConfig, build_schedule, updates_per_epoch
from tfx_hydra.models import mlp
from tfx_hydra.settings.checked import validate_section
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.trainer import compile_model, train

PEAK, PER_EPOCH, EPOCHS = 0.1, 10, 10  # 100 updates
TOTAL = PER_EPOCH * EPOCHS


def cosine(step, length, alpha=0.0, peak=PEAK):
    return peak * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * min(step, length) / length)) + alpha)


FORMULAS = {  # (config, the rate at update `step`), written out from each schedule's definition
    "constant after a warmup": (LrScheduleConfig(warmup_steps=20),
                                lambda s: PEAK * s / 20 if s < 20 else PEAK),
    "cosine after 2 warmup epochs": (LrScheduleConfig(name="cosine", warmup_epochs=2, alpha=0.1),
                                     lambda s: PEAK * s / 20 if s < 20 else cosine(s - 20, 80, 0.1)),
    "linear to a tenth": (LrScheduleConfig(name="linear", end_fraction=0.1),
                          lambda s: PEAK - (PEAK - PEAK * 0.1) * s / TOTAL),
    "polynomial of power 2": (LrScheduleConfig(name="polynomial", power=2.0),
                              lambda s: PEAK * (1 - s / TOTAL) ** 2),
    "step at epochs 3 and 7": (LrScheduleConfig(name="step", boundaries=[3, 7], factor=0.1),
                               lambda s: PEAK * (1 if s <= 30 else 0.1 if s <= 70 else 0.01)),
    "exponential, 0.5 an epoch": (LrScheduleConfig(name="exponential", decay_rate=0.5, decay_epochs=1),
                                  lambda s: PEAK * 0.5 ** (s / PER_EPOCH)),
    "one_cycle": (LrScheduleConfig(name="one_cycle", pct_start=0.3, div_factor=25, final_div_factor=1e4),
                  lambda s: (PEAK / 25 + (PEAK - PEAK / 25) * s / 30) if s < 30 else cosine(s - 30, 70, 1e-4)),
}


@pytest.mark.parametrize("name", list(FORMULAS))
def test_each_schedule_gives_its_formulas_rate_at_chosen_updates(name):
    config, formula = FORMULAS[name]
    schedule = build_schedule(config, PEAK, PER_EPOCH, EPOCHS)
    for step in (0, 1, 10, 19, 20, 21, 29, 30, 31, 50, 69, 70, 71, 99, 100):
        assert float(schedule(step)) == pytest.approx(formula(step), rel=1e-4, abs=1e-9), (name, step)  # float32


def test_a_constant_rate_without_warmup_is_the_plain_number():
    assert build_schedule(LrScheduleConfig(), PEAK, PER_EPOCH, EPOCHS) == PEAK


def test_the_rate_logged_each_epoch_follows_the_schedule_and_continues_after_a_kill(data, tmp_path):
    """A run killed after epoch 2's backup resumes at update 2U of its schedule, not at 0 (a restart would
    warm up again): the rates logged before and after the kill are the formula's at each epoch's end."""
    settings = settings_with(TrainerConfig(epochs=5, verbose=False, steps_per_execution=1))
    settings.lr_schedule = LrScheduleConfig(name="cosine", warmup_epochs=1)
    node = OmegaConf.create({"_target_": "keras.optimizers.SGD", "learning_rate": PEAK, "momentum": 0.0})
    per_epoch = updates_per_epoch(data.num_train, 32, 1)

    def compiled_model():
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
        compile_model(model, node, settings, setup_with(), RecordingTracker(), num_train=data.num_train)
        return model

    killed = StopAfterEpoch(2)
    with pytest.raises(PlantedKill, match="stopped here"):
        train(compiled_model(), data, settings.trainer, killed, backup_dir=str(tmp_path / "backup"))
    resumed = RecordingTracker()
    model = compiled_model()
    train(model, data, settings.trainer, resumed, backup_dir=str(tmp_path / "backup"))
    logged = {epoch: logs["lr"] for epoch, logs in killed.epochs + resumed.epochs}  # epoch 2: in the backup only
    assert sorted(logged) == [0, 1, 3, 4] and int(model.optimizer.iterations) == 5 * per_epoch
    for epoch, rate in logged.items():  # at the end of epoch e, the update count is (e + 1) x U
        expected = cosine((epoch + 1) * per_epoch - per_epoch, 4 * per_epoch)
        assert rate == pytest.approx(expected, rel=1e-5, abs=1e-9), epoch


def test_the_fine_tuning_phase_starts_its_schedule_again_at_its_own_rate(data):
    settings = settings_with(TrainerConfig(epochs=2, finetune_epochs=2, verbose=False))
    settings.lr_schedule = LrScheduleConfig(name="linear", warmup_steps=0)
    node = OmegaConf.create({"_target_": "keras.optimizers.Adam", "learning_rate": 0.01})
    model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
    compile_model(model, node, settings, setup_with(), RecordingTracker(), learning_rate=0.002,
                  num_train=data.num_train)  # the fine-tuning phase's compile
    schedule = model.optimizer._learning_rate  # Keras keeps the schedule itself there
    per_epoch = updates_per_epoch(data.num_train, 32, 1)
    assert float(schedule(0)) == pytest.approx(0.002) and float(schedule(2 * per_epoch)) == pytest.approx(0.0)


@pytest.mark.parametrize("overrides, message", [
    (["lr_schedule=cosine", "lr_schedule.alpha=2"],
     r"lr_schedule.alpha=2.0 is out of range: expected a number \[0, 1\]"),
    (["lr_schedule=step", "lr_schedule.boundaries=[60,30]"],
     r"lr_schedule.boundaries=\[60, 30\]: expected epochs"),
    (["lr_schedule=one_cycle", "lr_schedule.pct_start=1.5"], r"lr_schedule.pct_start=1.5 is out of range"),
    (["lr_schedule.warmup_epochs=-1"], r"lr_schedule.warmup_epochs=-1.0 is out of range"),
])
def test_a_bad_schedule_value_is_a_preflight_error_with_a_fix(overrides, message):
    with pytest.raises(ConfigError, match=message) as refused:
        validate_section(compose(overrides), "lr_schedule", LrScheduleConfig)
    assert refused.value.fix


@pytest.mark.slow  # a run through the CLI (in process)
def test_a_scheduled_run_says_its_schedule_and_logs_the_rate_of_each_epoch(tmp_path):
    from tests.helpers import QUICK, mlflow_client, mlflow_runs
    from tests.helpers.in_process import run_cli_in_process

    done = run_cli_in_process([*QUICK, "trainer.epochs=3", "lr_schedule=cosine", "lr_schedule.warmup_epochs=1",
                               "optimizer=adamw"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "optimizer: adamw, learning rate 0.001, lr_schedule=cosine after 1 warmup epoch\n" in done.stdout
    assert " lr " not in done.stdout  # the rate is a metric, not part of the epoch's line
    (run,) = mlflow_runs(tmp_path)
    rates = [m.value for m in sorted(mlflow_client(tmp_path).get_metric_history(run.info.run_id, "lr"),
                                     key=lambda m: m.step)]
    assert rates == pytest.approx([0.001, 0.0005, 0.0], abs=1e-9)  # warmed up, then half a cosine to 0


def test_a_schedule_on_a_pipeline_of_unknown_length_is_refused_before_training():
    """A user's pipeline that does not know its length gives no count of updates to decay over: said, not a
    schedule silently left out."""
    from tfx_hydra.lr_schedule import require_known_length

    require_known_length(LrScheduleConfig(), None)  # a constant rate needs no length
    require_known_length(LrScheduleConfig(name="cosine"), 1_000)
    for config in (LrScheduleConfig(name="cosine"), LrScheduleConfig(warmup_epochs=1.0)):
        with pytest.raises(DataError, match=rf"lr_schedule={config.name} follows the phase's updates, and the training "
                                            r"pipeline does not know its length yet") as raised:
            require_known_length(config, None)
        assert "assert_cardinality(N)" in str(raised.value) and "to_tfrecord writes an index" in str(raised.value)
