"""pruning: TrialPruning, the callback a trial hands training: it reports each epoch's `sweep.metric` to
the live Optuna trial and raises `Pruned` (training's own `EndsTraining`) when the pruner stops it.

optuna-integration's KerasPruningCallback does the reporting and asks the pruner. Three things
are ours: a metric missing from the epoch's logs is a mistake said at the first epoch (the
library only warns, and the trial would train to its end unpruned); the pruning is raised
as `Pruned`, which the run turns into a PRUNED trial whose epochs stay in MLflow; and the last epoch
of a fit is reported but never pruned: the trial has trained it, so it ends COMPLETE with its value
(which the sampler learns from) instead of PRUNED with nothing saved.
"""

from __future__ import annotations

import optuna
from optuna_integration import KerasPruningCallback

from tfx_hydra.errors import ConfigError
from tfx_hydra.trainer.backups import EndsTraining


class Pruned(EndsTraining):
    """Raised by the pruning callback at the end of the epoch after which the pruner stopped the trial."""

    def __init__(self, epoch: int, value: float) -> None:
        super().__init__(f"pruned after epoch {epoch + 1} ({value:.4f})")
        self.epoch, self.value = epoch, value


class TrialPruning(KerasPruningCallback):
    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._monitor not in logs:
            raise ConfigError(f"sweep.metric={self._monitor} is not logged after each epoch, so the pruner has "
                              f"nothing to compare (each epoch logs: {', '.join(sorted(logs))}).",
                              fix="sweep.metric=val_accuracy (a per-epoch validation metric), or "
                              "hparams_search.pruner=none to search without pruning")
        if epoch + 1 >= (self.params or {}).get("epochs", float("inf")):  # nothing left to save by pruning
            self._trial.report(float(logs[self._monitor]), step=epoch)
            return
        try:
            super().on_epoch_end(epoch, logs)
        except optuna.TrialPruned:
            raise Pruned(epoch, float(logs[self._monitor])) from None
