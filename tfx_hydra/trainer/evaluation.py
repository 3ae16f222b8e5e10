"""evaluation: the run's results, the figures of the weights it kept -- the test split's, and the validation and
training figures a user compares runs by.

Whatever chose the weights (trainer.keep_best, early stopping's restore, optimizer.ema: kept_weights.py), the
figures logged under the metrics' own names (`val_loss`, `loss`, `test_loss`) are those weights': what the MLflow
runs table shows, a search ranks and the logged model links. Each epoch's own figures are its curves
(`epoch/val_loss`, metrics.epoch_metric). The validation split is measured again where the weights kept are not the
last epoch's; the training figures are the kept epoch's (the EMA's average was trained as no epoch: the last
epoch's).
"""

from __future__ import annotations

from tfx_hydra.console import native_lines_streamed
from tfx_hydra.metrics import INPUT_WAIT, PER_EPOCH_ONLY, end_of_run
from tfx_hydra.process import stopped_at_a_step
from tfx_hydra.tracking import Tracker
from tfx_hydra.trainer import kept_weights


def evaluate(model, datasets, history, tracker: Tracker) -> dict[str, float]:
    """The run's results (metrics.end_of_run): the kept weights' training and validation figures, the last
    epoch's timing, each phase's, the test split's (test_*) and the model's size in `parameters` (a multi-objective
    search can trade accuracy against it); all but the epoch's timing logged, each once."""
    from tfx_hydra.trainer.callbacks import MissedInterrupt  # Keras at its top: imported when evaluating

    # the first read of a cache on disk: TensorFlow warns it was not read whole, though it was; a signal waits for
    # the batch in flight, as in training, and stops the run at its end
    with native_lines_streamed(), datasets.named_errors(), stopped_at_a_step():
        test = model.evaluate(datasets.test, return_dict=True, verbose=0, callbacks=[MissedInterrupt(True)])
    kept = getattr(history, "kept", None)
    figures = kept_epochs_figures(history, kept.epoch if kept is not None else None)
    if kept is not None and not kept.last_epoch:
        figures = kept_weights.validation_on_kept(model, datasets, figures)
    timings = getattr(history, "timings", {})  # logged as each phase ended
    results = end_of_run(figures, timings, test, float(model.count_params()))
    tracker.log_metrics({k: v for k, v in results.items() if k not in PER_EPOCH_ONLY and k not in timings})
    return results


def kept_epochs_figures(history, epoch: int | None) -> dict[str, float]:
    """Each figure of the epochs' logs at the kept epoch (None, or an epoch the history does not hold: the
    last), but the clock's, which are the last epoch's."""
    at = history.epoch.index(epoch) if epoch is not None and epoch in history.epoch else -1
    return {k: float(v[-1] if k in PER_EPOCH_ONLY or len(v) != len(history.epoch) else v[at])
            for k, v in history.history.items() if v and k != INPUT_WAIT}
