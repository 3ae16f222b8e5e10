"""trainer: conf/trainer/ (with conf/optimizer/), every piece of training in one package.

    fit.py           compile_model, fit_phases (head, then fine-tuning), evaluate: the steps run() calls
    compiled.py      the loss, metrics and XLA a model is compiled with (trainer.loss, trainer.metrics)
    losses.py        the losses Keras lacks (label smoothing on integer labels)
    class_weight.py  trainer.class_weight: balanced weights from the training labels
    backups.py       where a phase's backup lives, and the callback that writes it (trainer.backup_every)
    kept_weights.py  the figures of the weights a run keeps (trainer.keep_best)
    debug.py         the debug presets' reports (overfit check, numerics, profile)
    keras_compat.py  Keras' first trace of the train step, built once (the fixes for several replicas are
                     strategy/keras_fix.py's)
    callbacks/       the Keras callbacks a run trains with, one per module

Training takes the callbacks it is handed (a search's pruning callback, a user's own): it imports
nothing of sweeps/. Keras is imported inside functions or by callbacks/, which only the train step
imports, so config validation never pays for it.
"""

from tfx_hydra.trainer.fit import compile_model, evaluate, fit_phases, train

__all__ = ["compile_model", "evaluate", "fit_phases", "train"]
