"""task: what kind of problem a run solves, one module per option of conf/task/:

    classification.py  one class per example, softmax (the default)
    binary.py          a 0/1 label per example, one sigmoid
    multilabel.py      multi-hot labels, one sigmoid per label
    regression.py      numeric targets, a linear head
    causal_lm.py       a language model's next tokens, from the text itself; served as generated text

and base.py, what every task answers. The task's config names the loss, the metrics and the sweep's
objective (trainer.loss, trainer.metrics and sweep.metric default to them); its object decides the labels
the data must hold, the head, what a served model returns and the reports a run logs.
"""

from __future__ import annotations

from typing import Any

from tfx_hydra.settings.schemas import TASKS
from tfx_hydra.task.base import Task
from tfx_hydra.task.binary import Binary
from tfx_hydra.task.causal_lm import CausalLM
from tfx_hydra.task.classification import Classification
from tfx_hydra.task.multilabel import Multilabel
from tfx_hydra.task.regression import Regression

BY_NAME: dict[str, type[Task]] = {task.name: task for task in (Classification, Binary, Multilabel, Regression,
                                                               CausalLM)}
assert tuple(BY_NAME) == TASKS  # one spelling: the schema checks task.name against TASKS


def get(name: str = "classification", threshold: float | None = None, standardize_targets: bool = False) -> Task:
    """The task called `name` (a data source of the user's that is handed a name gets its object here)."""
    kind = BY_NAME[name]
    if kind.head == "sigmoid" and threshold is None:
        threshold = 0.5
    return kind(threshold=threshold, standardize_targets=standardize_targets)


def from_config(node: Any) -> Task:
    """The configured task (cfg.task or the validated TaskConfig)."""
    return get(node.name, node.threshold, bool(node.standardize_targets))


__all__ = ["BY_NAME", "Binary", "CausalLM", "Classification", "Multilabel", "Regression", "Task", "from_config", "get"]
