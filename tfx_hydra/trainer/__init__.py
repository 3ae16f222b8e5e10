"""trainer: conf/trainer/ (with conf/optimizer/), every piece of training in one package.

    fit.py           compile_model, fit_phases (head, then fine-tuning): the steps run() calls
    evaluation.py    evaluate: the test split, and the figures of the weights kept, logged once
    trained.py       what a phase ended with, kept in its backup until the run is FINISHED
    failures.py      a failed fit said: the user's code's frames, out of memory's knobs
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

from tfx_hydra.trainer.backups import choose_backup_dir, remove_backup
from tfx_hydra.trainer.evaluation import evaluate
from tfx_hydra.trainer.fit import compile_model, fit_phases, train
from tfx_hydra.trainer.kept_weights import weights_said

__all__ = ["choose_backup_dir", "compile_model", "evaluate", "fit_phases", "remove_backup", "train", "weights_said"]
