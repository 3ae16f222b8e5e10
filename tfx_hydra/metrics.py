"""metrics: the names of the metrics a run produces, spelled once.

Preflight accepts a `sweep.metric` only if it is one of `end_of_run_names`; the end of a
run reports exactly those (`end_of_run`); the summary shows `summary_names` of them. So a
sweep on any name preflight accepts has its objective when the run ends. No TensorFlow
here: preflight runs before it is imported.
"""

from __future__ import annotations

VALIDATION, TEST = "val_", "test_"
EPOCH_SECONDS, EXAMPLES_PER_SEC = "epoch_seconds", "examples_per_sec"  # per epoch, added by the epoch clock
EPOCH_TIMING = (EPOCH_SECONDS, EXAMPLES_PER_SEC)
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
    return names + [*EPOCH_TIMING] + [name for phase in phases for name in phase_timing(phase)] + [PARAMETERS]


def end_of_run(last_epoch: dict[str, float], timings: dict[str, float], test: dict[str, float],
               parameters: float) -> dict[str, float]:
    """The run's results, keyed by the names above (test values under test_*)."""
    return last_epoch | timings | {f"{TEST}{k}": float(v) for k, v in test.items()} | {PARAMETERS: parameters}


def summary_names(metrics: dict[str, float]) -> list[str]:
    """What the end-of-run table shows: the held-out results, validation then test."""
    return sorted(k for k in metrics if k.startswith((VALIDATION, TEST)))
