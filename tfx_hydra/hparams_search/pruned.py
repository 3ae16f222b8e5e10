"""A trial its pruner stopped: the exception that ends its training, and what its job returns.

A module of its own, importing nothing: the pruning callback (callbacks/trial_pruning.py), the
trainer and the run all name these without importing Optuna or the rest of the search.
"""

from __future__ import annotations

from dataclasses import dataclass


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
