"""What a search's trial and the run hand each other: the exception that ends a pruned trial's training (a
kind of training's own EndsTraining, so the trainer removes the backups without knowing about searches),
and what its job returns.

A module of its own, importing no Optuna: the pruning callback (trial_pruning.py) and the run name these
without importing the rest of the search.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfx_hydra.trainer.backups import EndsTraining


class Pruned(EndsTraining):
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
