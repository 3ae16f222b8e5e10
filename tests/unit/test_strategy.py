"""Strategies: auto's choice from HardwareInfo, and real training under MirroredStrategy on 2 logical CPUs."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

import tfx_hydra.strategy as strategy_module
from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError, HardwareMismatch
from tfx_hydra.hardware import GpuDetails, HardwareInfo
from tfx_hydra.models import mlp
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.strategy import (
    BatchPlan,
    auto_strategy,
    describe_strategy,
    is_chief,
    mirrored_strategy,
    multi_worker_strategy,
    one_device_strategy,
    plan_batches,
    steps_for_run,
    tpu_strategy,
)
from tfx_hydra.strategy.keras_fix import needs_multi_worker_fix

CPU_ONLY = HardwareInfo(profile="cpu")


def test_auto_on_cpu_is_the_default_strategy():
    strategy = auto_strategy(CPU_ONLY)
    assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1


def test_auto_picks_mirrored_for_several_gpus(monkeypatch):
    # No GPU here: record which factory auto chooses for a 2-GPU HardwareInfo instead of building it.

    chosen = []
    monkeypatch.setattr(strategy_module, "mirrored_strategy", lambda hardware: chosen.append("mirrored"))
    monkeypatch.setattr(strategy_module, "one_device_strategy", lambda hardware, device: chosen.append(device))
    two = HardwareInfo(profile="auto", gpus=[GpuDetails(0, "NVIDIA A100"), GpuDetails(1, "NVIDIA A100")])
    strategy_module.auto_strategy(two)
    strategy_module.auto_strategy(HardwareInfo(profile="auto", gpus=[GpuDetails(0, "NVIDIA A100")]))
    assert chosen == ["mirrored", "/gpu:0"]


def test_one_device_defaults_to_the_cpu_here():
    strategy = one_device_strategy(CPU_ONLY)
    assert strategy.extended.worker_devices[0].endswith("CPU:0")
    assert describe_strategy(strategy) == "one_device on cpu:0"
    assert describe_strategy(auto_strategy(CPU_ONLY)) == "default"


def test_an_unknown_device_lists_the_real_ones():
    with pytest.raises(ConfigError, match=r"strategy device '/gpu:0' does not exist on this machine.\n"
                                          r"  Fix: use one of: /cpu:0, /cpu:1"):
        one_device_strategy(CPU_ONLY, device="/gpu:0")


def test_unknown_cross_device_ops():
    with pytest.raises(ConfigError, match=r"strategy.cross_device_ops=ring is not one of: nccl"):
        mirrored_strategy(CPU_ONLY, devices=["/cpu:0", "/cpu:1"], cross_device_ops="ring")


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_mirrored_on_two_logical_cpus_trains_with_two_replicas(two_logical_cpus):
    assert len(two_logical_cpus) == 2
    strategy = mirrored_strategy(CPU_ONLY, devices=["/cpu:0", "/cpu:1"], cross_device_ops="reduce_to_one")
    assert strategy.num_replicas_in_sync == 2
    assert describe_strategy(strategy) == "mirrored on cpu:0, cpu:1"  # as the console says it
    data = digits([8, 8], 10, batch_size=64, seed=0)
    with strategy.scope():
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    kernel = model.get_layer("dense_0").kernel.value
    assert len(kernel.values) == 2  # one mirrored copy per replica
    model.fit(data.train, epochs=5, verbose=0)
    assert model.evaluate(data.test, return_dict=True, verbose=0)["accuracy"] > 0.85


# --- multi-worker, Slurm and TPU ---------------------------------------------------------------



MWMS = "tfx_hydra.strategy.multi_worker_strategy"


@pytest.mark.parametrize("tf_config,chief", [
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}, True),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, False),
    (None, True),
])
def test_only_the_chief_worker_tracks(monkeypatch, tf_config, chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert is_chief(MWMS) is chief
    assert is_chief("tfx_hydra.strategy.mirrored_strategy") is True  # single-machine strategies: always


def test_slurm_rank_decides_the_chief(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert is_chief(MWMS, cluster="slurm") is False
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert is_chief(MWMS, cluster="slurm") is True


def test_slurm_cluster_outside_slurm_says_to_use_srun(monkeypatch):
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    with pytest.raises(ConfigError, match=r"strategy.cluster=slurm, but this process was not started by Slurm.*"
                                          r"\n  Fix: launch with srun"):
        multi_worker_strategy(CPU_ONLY, cluster="slurm")


def test_ray_trains_with_the_tf_config_ray_train_sets_and_refuses_to_start_without_it(monkeypatch):
    """strategy.cluster=ray: worker 0 of the TF_CONFIG Ray Train sets is the chief; outside a Ray Train worker (no
    TF_CONFIG) the strategy is refused with the command that starts its workers, before TensorFlow is asked."""
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                                "task": {"type": "worker", "index": 1}}))
    assert is_chief(MWMS, cluster="ray") is False
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ConfigError, match=r"strategy.cluster=ray trains on Ray Train workers.*\n  Fix: launch the "
                                          r"job through Ray: python -m tfx_hydra -m hydra/launcher=ray "
                                          r"strategy=multi_worker"):
        multi_worker_strategy(CPU_ONLY, cluster="ray")


def test_unknown_communication_is_a_config_error():
    with pytest.raises(ConfigError, match=r"strategy.communication=mpi is not one of: auto, ring, nccl"):
        multi_worker_strategy(CPU_ONLY, communication="mpi")


def test_tpu_without_a_tpu_fails_clearly_without_touching_the_network():
    with pytest.raises(HardwareMismatch, match=r"strategy=tpu with strategy.tpu=local, but this machine has no TPU "
                                               r"device.\n  Fix: run on a Cloud TPU VM"):
        tpu_strategy(CPU_ONLY)


def test_the_keras_fix_is_gated_to_the_versions_it_was_verified_on():
    assert needs_multi_worker_fix("3.15.1") and needs_multi_worker_fix("3.7.0")
    assert not needs_multi_worker_fix("3.6.0") and not needs_multi_worker_fix("3.16.0")


# --- the batch plan ----------------------------------------------------------------------------

class FakeStrategy:
    """Only the replica count matters to the plan."""

    def __init__(self, replicas):
        self.num_replicas_in_sync = replicas


def test_auto_batch_is_the_profiles_per_replica_batch_times_replicas():
    a100 = HardwareInfo(profile="a100", per_replica_batch_size=512, steps_per_execution=16)
    plan = plan_batches(TrainerConfig(batch_size="auto"), a100, FakeStrategy(1))
    assert (plan.global_size, plan.per_replica, plan.steps_per_execution) == (512, 512, 16)
    assert plan_batches(TrainerConfig(batch_size=96), a100, FakeStrategy(1)).global_size == 96


def test_several_replicas_cap_steps_per_execution_at_one_and_say_why_when_asked(caplog):
    a100 = HardwareInfo(profile="a100", per_replica_batch_size=512, steps_per_execution=16)
    plan = plan_batches(TrainerConfig(batch_size="auto"), a100, FakeStrategy(4))
    assert (plan.global_size, plan.per_replica, plan.steps_per_execution) == (2048, 512, 1)
    assert caplog.records == []  # the profile's value: capped quietly
    plan = plan_batches(TrainerConfig(batch_size=64, steps_per_execution=8), a100, FakeStrategy(2))
    assert plan.steps_per_execution == 1
    assert "trainer.steps_per_execution=8 fails in Keras with 2 replicas" in caplog.records[0].getMessage()


class Splits:
    """The two splits steps_for_run reads, as real tf.data pipelines of `train` and `validation` batches."""

    def __init__(self, train: int, validation: int) -> None:
        self.train = tf.data.Dataset.range(train * 4).batch(4)
        self.validation = tf.data.Dataset.range(validation * 4).batch(4)


CPU_64 = BatchPlan(global_size=4, replicas=1, steps_per_execution=64)


def test_auto_takes_one_step_per_call_for_a_run_too_short_to_fill_one_call():
    # 3 epochs of 15 training and 5 validation batches: 60 in all, fewer than one call of 64 would take
    plan = steps_for_run(CPU_64, TrainerConfig(epochs=3), Splits(train=15, validation=5))
    assert (plan.global_size, plan.steps_per_execution) == (4, 1)
    assert plan.steps_reason == "steps_per_execution=auto: the run's 60 batches would not fill one call of 64"
    # a fine-tuning phase's epochs count too: 3 + 1 epochs of 20 batches fill it
    assert steps_for_run(CPU_64, TrainerConfig(epochs=3, finetune_epochs=1), Splits(15, 5)) == CPU_64


def test_a_run_that_fills_a_call_or_asked_for_its_steps_keeps_them():
    assert steps_for_run(CPU_64, TrainerConfig(epochs=4), Splits(train=11, validation=5)) == CPU_64  # 64 batches
    asked = BatchPlan(global_size=4, replicas=1, steps_per_execution=8)
    assert steps_for_run(asked, TrainerConfig(epochs=1, steps_per_execution=8), Splits(2, 1)) == asked


def test_a_run_of_unknown_length_keeps_the_profiles_steps():
    splits = Splits(train=2, validation=1)
    splits.train = splits.train.filter(lambda batch: tf.reduce_sum(batch) >= 0)  # tf.data cannot count a filter
    assert steps_for_run(CPU_64, TrainerConfig(epochs=1), splits) == CPU_64


def test_one_step_per_call_trains_bit_for_bit_as_a_bundle_of_them():
    """What lets auto choose by the run's length alone: the same weights and losses (dropout included)."""
    import keras
    import numpy as np

    rng = np.random.RandomState(0)
    batches = tf.data.Dataset.from_tensor_slices((rng.rand(300, 8, 8).astype("float32"),
                                                  rng.randint(0, 10, 300))).batch(32)
    trained = []
    for steps in (1, 64):
        keras.utils.set_random_seed(0)
        model = mlp(name="mlp", input_shape=[8, 8], num_classes=10, dropout=0.3)
        model.compile("adam", "sparse_categorical_crossentropy", steps_per_execution=steps)
        history = model.fit(batches, epochs=2, validation_data=batches, verbose=0)
        trained.append((model.get_weights(), history.history))
    (one, one_history), (bundled, bundled_history) = trained
    assert all(np.array_equal(a, b) for a, b in zip(one, bundled))
    assert one_history == bundled_history
