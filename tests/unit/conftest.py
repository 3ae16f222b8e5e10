"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from tfx_hydra.data import digits


@pytest.fixture
def data():
    """A few hundred real digits (8x8, 10 classes) in batches of 32: what the trainer tests fit on."""
    return digits([8, 8], 10, batch_size=32, seed=0)
