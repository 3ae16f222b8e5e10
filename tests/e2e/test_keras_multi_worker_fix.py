"""strategy/keras_fix.py's multi-worker fix, isolated: plain Keras fit under MultiWorkerMirroredStrategy with two local
workers fails without it (keras-team/keras#20585) and trains identical weights with it.

When a Keras release fixes the bug upstream, `test_plain_keras_still_fails_without_the_fix` starts failing:
that is the signal to stop applying the fix to that version (keras_fix.PATCHED_KERAS)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import cli_env, free_ports

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    import tensorflow as tf
    if sys.argv[1] == "fixed":
        from tfx_hydra.strategy.keras_fix import apply_keras_fixes
        assert apply_keras_fixes()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int64")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(data, epochs=2, verbose=0)
    print("WEIGHTS", float(sum(np.sum(w) for w in model.get_weights())))
""")


def run_two_workers(mode: str, tmp_path) -> list[subprocess.CompletedProcess]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    processes = []
    for index in range(2):
        env = cli_env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen([sys.executable, str(script), mode], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return [(p, p.communicate(timeout=300)[0]) for p in processes]


def test_plain_keras_still_fails_without_the_fix(tmp_path):
    for process, output in run_two_workers("plain", tmp_path):
        assert process.returncode != 0
        assert "PerReplica" in output and "to a Tensor" in output


def test_with_the_fix_both_workers_train_the_same_weights(tmp_path):
    results = run_two_workers("fixed", tmp_path)
    weights = []
    for process, output in results:
        assert process.returncode == 0, output[-3000:]
        weights.append(next(line for line in output.splitlines() if line.startswith("WEIGHTS")))
    assert weights[0] == weights[1]
