"""data.service's contracts that need no running service: its keys checked before TensorFlow, a pipeline that calls
Python refused before the first epoch (a worker would fail mid-training with 'Could not find callback'), a
multi-worker run refused, and a served training split's place in the pipeline (not cached, length left open)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tfx_hydra.data import service
from tfx_hydra.data.options import PipelineOptions
from tfx_hydra.data.pipeline import cached_splits, finish
from tfx_hydra.errors import ConfigError, DataError


@pytest.mark.parametrize("value", [False, None, "off", "local", "grpc://localhost:5050", "grpc://10.0.0.7:6000"])
def test_off_local_and_a_dispatcher_address_are_taken(value):
    assert PipelineOptions(batch_size=8, service=value).served == (value not in (False, None, "off"))


@pytest.mark.parametrize("key, value, said", [
    ("service", "localhost:5050", "data.service='localhost:5050': expected off, local, or a dispatcher's address"),
    ("service", True, "data.service=True: expected off, local"),
    ("service_workers", 0, "data.service_workers=0: expected a number of worker processes (1 or more)"),
    ("service_workers", "two", "data.service_workers='two'"),
])
def test_a_bad_service_key_is_said_with_its_fix(key, value, said):
    with pytest.raises(ConfigError, match="Fix: data.service") as raised:
        PipelineOptions(batch_size=8, **{"service": "local", key: value})
    assert said in str(raised.value)


@pytest.mark.parametrize("key, value", [("limit", 100), ("limit_batches", 2)])
def test_a_debugging_limit_is_refused_beside_the_service(key, value):
    with pytest.raises(ConfigError, match=f"data.{key} with data.service=local: each tf.data service worker"):
        PipelineOptions(batch_size=8, service="local", **{key: value})


def test_a_multi_worker_run_is_refused_with_the_service_and_taken_without():
    service.require_one_trainer(False)
    with pytest.raises(ConfigError, match="strategy=multi_worker: tfx_hydra reads tf.data service from one trainer"):
        service.require_one_trainer("grpc://dispatcher:5050")


def test_a_pipeline_calling_python_is_refused_before_any_worker_runs_it():
    pure = tf.data.Dataset.range(10).map(lambda x: x * 2).batch(4)
    service.require_graph_only(pure)
    for calls_python in (lambda x: tf.py_function(lambda v: v * 2, [x], tf.int64),
                         lambda x: tf.numpy_function(lambda v: v * 2, [x], tf.int64)):
        with pytest.raises(DataError, match="calls Python .* which a tf.data service worker cannot run") as raised:
            service.require_graph_only(tf.data.Dataset.range(10).map(calls_python).batch(4))
        assert "Fix: write that step in TensorFlow ops, or data.service=off" in str(raised.value)


def test_local_reaching_the_pipeline_without_a_started_service_says_how_to_start_one():
    options = PipelineOptions(batch_size=4, service="local")
    with pytest.raises(ConfigError, match="data.service=local reaches the data source without a service"):
        finish(tf.data.Dataset.range(10).map(lambda x: (x, x)), options, training=True, num_examples=10)


def test_the_served_training_split_is_not_cached_and_the_others_are():
    options = PipelineOptions(batch_size=4, service="grpc://localhost:1")  # nothing is read: no service needed
    splits = {name: tf.data.Dataset.range(20).map(lambda x: (tf.cast(x, tf.float32), x))
              for name in ("train", "validation", "test")}
    _, plan = cached_splits(options, splits, dict.fromkeys(splits, 20), in_memory=True)
    assert plan.where == {"train": None, "validation": "memory", "test": "memory"}
    assert plan.said.endswith("; train: decoded by the tf.data service workers each epoch")
    assert finish(splits["validation"], options, training=False, num_examples=20).cardinality() == 5


def test_a_dispatcher_that_does_not_answer_is_said_not_waited_for():
    """tf.data service registers the pipeline with the dispatcher as it is built, and retries without end."""
    (port,) = service.free_ports(1)  # nothing listens there
    options = PipelineOptions(batch_size=4, service=f"grpc://localhost:{port}")
    with pytest.raises(DataError, match=f"data.service=grpc://localhost:{port}: no tf.data service dispatcher "
                       "answers there") as raised:
        finish(tf.data.Dataset.range(10).map(lambda x: (x, x)), options, training=True, num_examples=10)
    assert "Fix: start one" in str(raised.value)


def test_free_ports_are_distinct():
    ports = service.free_ports(5)
    assert len(set(ports)) == 5 and all(1024 < p < 65536 for p in ports)


def test_a_served_source_is_the_same_examples_in_pieces_the_dispatcher_hands_out():
    """Dynamic sharding splits a pipeline at its first source: served, that is a range over pieces of 32 examples
    (one dispatcher request per piece, not per example), and reading it whole gives the examples in their order."""
    x = tf.reshape(tf.range(70 * 3), [70, 3])
    y = tf.range(70)
    served = service.sliced((x, y), served=True)
    plain = service.sliced((x, y), served=False)
    assert [(a.tolist(), b) for a, b in served.as_numpy_iterator()] == \
        [(a.tolist(), b) for a, b in plain.as_numpy_iterator()]
    graph = served._as_serialized_graph().numpy()
    assert b"RangeDataset" in graph and b"FlatMapDataset" in graph  # the first source: 3 pieces (32, 32, 6)
