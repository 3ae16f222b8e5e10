"""Fixtures shared by unit and end-to-end tests (helpers live in tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import write_mnist_npz


@pytest.fixture(scope="session", autouse=True)
def two_logical_cpus():
    """Split the CPU into 2 logical devices before TensorFlow initialises, so MirroredStrategy
    has 2 replicas on a machine without GPUs (ARCHITECTURE.md: multi-device behaviour is tested on CPU)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    return tf.config.list_logical_devices("CPU")


@pytest.fixture
def mnist_npz(tmp_path) -> Path:
    return write_mnist_npz(tmp_path / "mnist.npz")
