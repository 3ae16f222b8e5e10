"""metrics: the names of the metrics a run produces, spelled once; and the losses each task can train with.

Preflight accepts a `sweep.metric` only if it is one of `end_of_run_names`; the end of a
run reports exactly those (`end_of_run`); the summary shows `summary_names` of them. So a
sweep on any name preflight accepts has its objective when the run ends. No TensorFlow
here: preflight runs before it is imported.
"""

from __future__ import annotations

from typing import Any

from tfx_hydra.errors import ConfigError

VALIDATION, TEST = "val_", "test_"
EPOCH_SECONDS, EXAMPLES_PER_SEC = "epoch_seconds", "examples_per_sec"  # per epoch, added by the epoch clock
EPOCH_TIMING = (EPOCH_SECONDS, EXAMPLES_PER_SEC)
LEARNING_RATE = "lr"  # the rate the epoch's last update used (lr_schedule), logged per epoch, not shown on its line
TRAIN_PHASE, FINETUNE_PHASE = "train", "finetune"
PARAMETERS = "parameters"  # the model's number of weights, logged once at the end
OBJECTIVE = "objective"  # what run() returned to a sweeper (sweep.metric's final value), logged on every run


def compiled_names(metrics) -> list[str]:
    """What Keras logs each epoch for the training split: the loss and trainer.metrics (a name, or
    a `_target_` node's `name`)."""
    return ["loss", *(m["name"] if isinstance(m, dict) else m for m in metrics)]


def phase_timing(phase: str) -> tuple[str, str]:
    """A training phase's wall time and throughput, logged once when the phase ends."""
    return f"{phase}_seconds", f"{phase}_examples_per_sec"


def epoch_names(metrics) -> list[str]:
    """What Keras logs at every epoch's end, training and validation: what callbacks can monitor."""
    compiled = compiled_names(metrics)
    return compiled + [f"{VALIDATION}{n}" for n in compiled]


def end_of_run_names(trainer) -> list[str]:
    """Every metric a finished training run reports: the last epoch's (training, validation,
    timing), each phase's timing, the test split's, and the model's parameter count."""
    compiled = compiled_names(trainer.metrics)
    names = [f"{VALIDATION}{n}" for n in compiled] + compiled + [f"{TEST}{n}" for n in compiled]
    phases = [TRAIN_PHASE, FINETUNE_PHASE] if trainer.finetune_epochs else [TRAIN_PHASE]
    timings = [name for phase in phases for name in phase_timing(phase)]
    return names + [*EPOCH_TIMING, LEARNING_RATE] + timings + [PARAMETERS]


def end_of_run(last_epoch: dict[str, float], timings: dict[str, float], test: dict[str, float],
               parameters: float) -> dict[str, float]:
    """The run's results, keyed by the names above (test values under test_*)."""
    return last_epoch | timings | {f"{TEST}{k}": float(v) for k, v in test.items()} | {PARAMETERS: parameters}


def summary_names(metrics: dict[str, float]) -> list[str]:
    """What the end-of-run table shows: the held-out results, validation then test."""
    return sorted(k for k in metrics if k.startswith((VALIDATION, TEST)))


# The kinds of problem (conf/task/, tfx_hydra/task/) and the Keras losses that fit each one's labels and head.
# A loss of another task's would fail at the first batch with a shape error, or train on nonsense (a
# cross-entropy on numeric targets): it is named here, before anything is built, with the task's own.
TASKS = ("classification", "binary", "multilabel", "regression")
CROSSENTROPIES = ("binary_crossentropy", "binary_focal_crossentropy")
REGRESSION_LOSSES = ("mse", "mae", "huber", "log_cosh", "logcosh", "mape", "mean_absolute_error",
                     "mean_absolute_percentage_error", "mean_squared_error", "mean_squared_logarithmic_error",
                     "msle", "poisson")
TASK_LOSSES = {"classification": ("sparse_categorical_crossentropy",), "binary": CROSSENTROPIES,
               "multilabel": CROSSENTROPIES, "regression": REGRESSION_LOSSES}
OTHER_KERAS_LOSSES = ("categorical_crossentropy", "categorical_focal_crossentropy", "categorical_hinge",
                      "cosine_similarity", "ctc", "dice", "hinge", "kl_divergence", "kld", "squared_hinge", "tversky",
                      *{loss for losses in TASK_LOSSES.values() for loss in losses})


def require_loss_fits_task(loss: Any, task: str) -> None:
    """A Keras loss name that cannot train `task`'s labels and head, named with the ones that can."""
    if loss in OTHER_KERAS_LOSSES and loss not in TASK_LOSSES[task]:
        fits = TASK_LOSSES[task]
        raise ConfigError(f"trainer.loss={loss} does not fit task={task}: "
                          + TASK_LOSS_REASONS[task], fix=f"trainer.loss={fits[0]}"
                          + (f" (or {', '.join(fits[1:4])})" if len(fits) > 1 else ""))


TASK_LOSS_REASONS = {
    "classification": "it expects targets shaped like the model's outputs, but the data gives integer class "
                      "labels (and the model a softmax over the classes).",
    "binary": "the data gives one 0/1 label per example and the model a sigmoid probability.",
    "multilabel": "the data gives multi-hot rows and the model one sigmoid per label.",
    "regression": "the data gives numeric targets and the model a linear output.",
}
