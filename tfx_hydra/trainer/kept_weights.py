"""kept_weights: which weights a run ends with, and the figures of those weights.

Three things may choose them instead of the last epoch: trainer.keep_best (KeepBest puts the best epoch back),
early stopping with `restore_best_weights` (Keras puts its best epoch back when training ends, stopped early
or not) and optimizer.ema (Keras swaps the weights' moving average in when training ends). The test split is
evaluated and every export written with the weights kept, so the run's validation figures must be too: the
last epoch's `val_*` were measured on other weights. `describe` says what was kept (`kept epoch 5 of 8 (best
val_loss 0.3121)`), `validation_on_kept` measures the validation split again on them, and `weights_sha256` is
their fingerprint (the summary's, and the `model.weights_sha256` tag).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Kept:
    said: str  # 'epoch 5 of 8 (best val_loss 0.3121, trainer.keep_best)', 'the last epoch's (8 of 8)'
    last_epoch: bool  # the last epoch's own weights: its val_* are theirs already
    chosen: bool = True  # something chose them (keep_best, early stopping's restore, the EMA): said on the terminal
    epoch: int | None = None  # the epoch (from 0) whose weights they are; None: the EMA's average, of no one epoch


def describe(epochs_run: int, keeping=None, stopping=None, optimizer=None) -> Kept:
    """What the run ends with, from the callbacks that choose (KeepBest's and EarlyStopping's, when used, in
    the order Keras ends them: early stopping's restore first, then KeepBest's) and the optimizer (its EMA is
    swapped in before either)."""
    # both put back the weights an epoch ended with, before any moving average: that epoch's val_* are theirs
    if keeping is not None and keeping.best_epoch is not None:
        return Kept(f"epoch {keeping.best_epoch + 1} of {epochs_run} (best {keeping.monitor} "
                    f"{keeping.best_value:.4f}, trainer.keep_best)", keeping.best_epoch + 1 == epochs_run,
                    epoch=keeping.best_epoch)
    if stopping is not None and stopping.restore_best_weights and getattr(stopping, "best_weights", None) is not None:
        best = stopping.best_epoch + 1
        return Kept(f"epoch {best} of {epochs_run} (best {stopping.monitor} {float(stopping.best):.4f}, restored "
                    "by early stopping)", best == epochs_run, epoch=best - 1)
    if uses_ema(optimizer):
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        return Kept(f"the moving average of the weights (optimizer.ema, momentum {inner.ema_momentum:g}), after "
                    f"epoch {epochs_run}", False)
    return Kept(f"the last epoch's (epoch {epochs_run})", True, chosen=False, epoch=epochs_run - 1)


def uses_ema(optimizer) -> bool:
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # under loss scaling: the inner one
    return bool(getattr(inner, "use_ema", False))


def validation_on_kept(model, datasets, last_epoch: dict[str, float]) -> dict[str, float]:
    """The last epoch's figures with its `val_*` measured again on the weights kept (one pass over the
    validation split), where those are not the last epoch's own."""
    from tfx_hydra.process import stopped_at_a_step
    from tfx_hydra.trainer.callbacks import MissedInterrupt

    with stopped_at_a_step():  # a signal waits for the batch in flight, as in training
        measured = model.evaluate(datasets.validation, return_dict=True, verbose=0, callbacks=[MissedInterrupt(True)])
    return last_epoch | {f"val_{name}": float(value) for name, value in measured.items()}


def weights_sha256(model) -> str:
    """A fingerprint of the trained weights: equal on every worker of a synchronous run."""
    import numpy as np

    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()[:16]


def weights_said(model) -> str:
    """The summary's weights row: their fingerprint, and whether they are optimizer.ema's average."""
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)  # under loss scaling: the inner one
    ema = f" (the EMA of the weights, momentum {optimizer.ema_momentum:g})" if optimizer.use_ema else ""
    return weights_sha256(model) + ema
