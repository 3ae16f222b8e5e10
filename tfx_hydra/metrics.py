"""metrics: the names of the metrics a run produces, spelled once; and the losses each task can train with.

Preflight accepts a `sweep.metric` only if it is one of `end_of_run_names`; the end of a
run reports exactly those (`end_of_run`); the summary shows `summary_names` of them. So a
sweep on any name preflight accepts has its objective when the run ends. No TensorFlow
here: preflight runs before it is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfx_hydra.errors import ConfigError, show

VALIDATION, TEST = "val_", "test_"
EPOCH_SECONDS, EXAMPLES_PER_SEC = "epoch_seconds", "examples_per_sec"  # per epoch, added by the epoch clock
EPOCH_TIMING = (EPOCH_SECONDS, EXAMPLES_PER_SEC)
INPUT_WAIT = "input_wait"  # per epoch, where measured: the share of training time spent waiting for data
TFLOPS, MFU = "tflops", "mfu"  # per epoch, where the step's FLOPs are counted: achieved TFLOP/s, and its share of peak
LEARNING_RATE = "lr"  # the rate the epoch's last update used (lr_schedule), logged per epoch, not shown on its line
TRAIN_PHASE, FINETUNE_PHASE = "train", "finetune"
PARAMETERS = "parameters"  # the model's number of weights, logged once at the end
OBJECTIVE = "objective"  # what run() returned to a sweeper (sweep.metric's final value), logged on every run

# Keras' figures of each epoch (loss, accuracy, val_loss...) are logged under `epoch/<name>`, one point per epoch: the
# curves. `<name>` itself is logged once, when the run has chosen its weights: the figures of the weights kept (the
# best epoch's, the moving average's), which the runs table, a search and the logged model read. The clock's own
# figures of an epoch have no end-of-run value of their own and keep their names.
EPOCH = "epoch/"
PER_EPOCH_ONLY = (*EPOCH_TIMING, LEARNING_RATE, INPUT_WAIT, TFLOPS, MFU)


def epoch_metric(name: str) -> str:
    """The name an epoch's figure is logged under in MLflow: `epoch/val_loss` for Keras' `val_loss`."""
    return name if name in PER_EPOCH_ONLY or name.startswith(EPOCH) else f"{EPOCH}{name}"


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
TASKS = ("classification", "binary", "multilabel", "regression", "causal_lm")
HEADS = ("softmax", "sigmoid", "linear")  # task.head: the output layer's activation (models/heads.py)
TASK_HEADS = {"causal_lm": ("logits",)}  # a causal LM's is its backbone's own: logits over the vocabulary
CROSSENTROPIES = ("binary_crossentropy", "binary_focal_crossentropy")
REGRESSION_LOSSES = ("mse", "mae", "huber", "log_cosh", "logcosh", "mape", "mean_absolute_error",
                     "mean_absolute_percentage_error", "mean_squared_error", "mean_squared_logarithmic_error",
                     "msle", "poisson")
TASK_LOSSES = {"classification": ("sparse_categorical_crossentropy",), "binary": CROSSENTROPIES,
               "multilabel": CROSSENTROPIES, "regression": REGRESSION_LOSSES, "causal_lm": ()}
# a causal LM answers logits: its cross-entropy is a node (from_logits), which no Keras name spells
LOGITS_LOSS = ("{_target_: keras.losses.SparseCategoricalCrossentropy, from_logits: true, "
               "reduction: mean_with_sample_weight}")
OTHER_KERAS_LOSSES = ("categorical_crossentropy", "categorical_focal_crossentropy", "categorical_hinge",
                      "cosine_similarity", "ctc", "dice", "hinge", "kl_divergence", "kld", "squared_hinge", "tversky",
                      *{loss for losses in TASK_LOSSES.values() for loss in losses})


def require_trainer_fits_task(trainer, task: str) -> None:
    """trainer.loss, .label_smoothing and .class_weight, each checked against the task's labels."""
    require_loss_fits_task(trainer.loss, task)
    require_smoothing_fits_loss(trainer.label_smoothing, trainer.loss, task)
    require_class_weight(trainer.class_weight)
    require_class_weight_fits_task(trainer.class_weight, task)


def require_loss_fits_task(loss: Any, task: str) -> None:
    """A Keras loss name that cannot train `task`'s labels and head, named with the ones that can."""
    if loss in OTHER_KERAS_LOSSES and loss not in TASK_LOSSES[task]:
        fits = TASK_LOSSES[task] or (f"'{LOGITS_LOSS}'",)
        raise ConfigError(f"trainer.loss={loss} does not fit task={task}: "
                          + TASK_LOSS_REASONS[task], fix=f"trainer.loss={fits[0]}"
                          + (f" (or {', '.join(fits[1:4])})" if len(fits) > 1 else ""))


TASK_LOSS_REASONS = {
    "classification": "it expects targets shaped like the model's outputs, but the data gives integer class "
                      "labels (and the model a softmax over the classes).",
    "binary": "the data gives one 0/1 label per example and the model a sigmoid probability.",
    "multilabel": "the data gives multi-hot rows and the model one sigmoid per label.",
    "regression": "the data gives numeric targets and the model a linear output.",
    "causal_lm": "the labels are each position's next token, from the text itself, and the model answers logits "
                 "over the vocabulary.",
}


# trainer.label_smoothing softens the targets of a cross-entropy: the binary ones take it in Keras, the
# sparse categorical one through tfx_hydra.trainer.losses (Keras' takes none). A loss of the user's takes its own.
SMOOTHABLE_LOSSES = ("sparse_categorical_crossentropy", *CROSSENTROPIES)


def require_smoothing_fits_loss(smoothing: float, loss: Any, task: str) -> None:
    """Label smoothing asked for a loss that has no labels to soften (or is the user's own)."""
    if not smoothing or loss in SMOOTHABLE_LOSSES:
        return
    if isinstance(loss, Mapping):
        raise ConfigError(f"trainer.label_smoothing={smoothing:g} is applied to the built-in cross-entropies; "
                          f"trainer.loss is your own ({loss.get('_target_')}): smooth inside it.",
                          fix="trainer.label_smoothing=0 and a label_smoothing argument of your loss's")
    what = "regression's targets are numbers, not labels" if task == "regression" else "it is not a cross-entropy"
    fits = [name for name in SMOOTHABLE_LOSSES if name in TASK_LOSSES[task]]
    raise ConfigError(f"trainer.label_smoothing={smoothing:g} softens a cross-entropy's targets, but trainer.loss="
                      f"{loss} (task={task}) has none to soften: {what}.",
                      fix="trainer.label_smoothing=0" + (f", or trainer.loss={fits[0]}" if fits else ""))


# trainer.class_weight weighs each training example by its class (Keras' fit(class_weight=)): one class per
# example, so the tasks whose label is one class.
BALANCED = "balanced"
CLASS_WEIGHTED_TASKS = ("classification", "binary")


def require_class_weight(value: Any) -> None:
    """null, `balanced`, or a map from class index (0, 1, ...) to a positive weight."""
    if value is None or value == BALANCED:
        return
    example = "{0:1.0,1:5.0}"
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"trainer.class_weight={show(value)} is not one of: null, balanced, or a map from class "
                          "index to weight.", fix=f"trainer.class_weight=balanced (or trainer.class_weight={example})")
    for key, weight in value.items():
        if not str(key).isdigit():
            raise ConfigError(f"trainer.class_weight has the key {key!r}: keys are class indices (0, 1, ...), as "
                              "the labels are.", fix=f"trainer.class_weight={example}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise ConfigError(f"trainer.class_weight.{key}={show(weight)} is not a positive number.",
                              fix=f"trainer.class_weight={example}")


def require_class_weight_fits_task(value: Any, task: str) -> None:
    if value is not None and task not in CLASS_WEIGHTED_TASKS:
        why = ("an example has several labels" if task == "multilabel" else "its targets are numbers, not classes")
        raise ConfigError(f"trainer.class_weight weighs each example by its class, and a task={task} example "
                          f"has no one class: {why}.", fix="trainer.class_weight=null")


def require_known_metric(settings) -> None:
    """sweep.metric must be something the run will report: found out after training, the run would be lost."""
    known = end_of_run_names(settings.trainer)
    for metric in settings.sweep.metrics:
        if metric not in known:
            raise ConfigError(f"sweep.metric={metric} is not a metric this run logs "
                              f"(trainer.metrics={list(settings.trainer.metrics)}).",
                              fix=f"one of: {', '.join(known)}; or add the metric to trainer.metrics")


def objective(metrics: dict[str, float], sweep) -> float | list[float]:
    """The value Hydra's sweepers optimise: `sweep.metric` from the finished run (a list of
    values, in sweep.metric's order, for a multi-objective search)."""
    missing = [m for m in sweep.metrics if m not in metrics]
    if missing:
        raise ConfigError(f"sweep.metric={missing[0]} is not a metric this run produced.",
                          fix=f"one of: {', '.join(sorted(metrics))}")
    values = [metrics[m] for m in sweep.metrics]
    return values[0] if isinstance(sweep.metric, str) else values


def record_objective(metrics: dict[str, float], sweep, tracker) -> float | list[float]:
    """The objective (see `objective`), logged on the run as `objective`: what a re-run of the sweep
    reads back to skip this job, and what the sweep's table ranks."""
    value = objective(metrics, sweep)
    tracker.log_metrics({OBJECTIVE: value[0] if isinstance(value, list) else value})
    return value
