"""What the trainer and a search's trial hand each other: the trial to report each epoch to, the
exception that ends a pruned trial's training, and what its job returns.

A module of its own, importing nothing: the pruning callback (trial_pruning.py), the
trainer and the run all name these without importing Optuna or the rest of the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Pruned(Exception):
    """Raised by the pruning callback at the end of the epoch after which the pruner stopped the trial."""

    def __init__(self, epoch: int, value: float) -> None:
        super().__init__(f"pruned after epoch {epoch + 1} ({value:.4f})")
        self.epoch, self.value = epoch, value


@dataclass
class PrunedResult:
    """What a pruned trial's job returns to the sweeper."""

    trial: int
    epochs: int
    value: float


@dataclass
class EpochReports:
    """What the trainer needs to report a trial's epochs (trial_pruning.py): its live
    Optuna trial and the metric it reports."""

    trial: Any
    metric: str
