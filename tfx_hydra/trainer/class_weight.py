"""class_weight: trainer.class_weight as Keras' `fit(class_weight=)` takes it, {class index: weight}.

`balanced` weighs each class by n / (classes x its count) over the training split's labels
(scikit-learn's `compute_class_weight("balanced")`), so every class carries the same share of the
training loss however rare it is; a class the training split lacks weighs 1 (it is never seen). A
map of the user's is taken as given, the classes it leaves out weighing 1. Only the training loss is
weighted: validation and test metrics measure the model as it is, so a weighted run is compared
with an unweighted one on the same terms.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import BALANCED

log = logging.getLogger(__name__)


def class_weights(value: Any, datasets, tracker) -> dict[int, float] | None:
    """trainer.class_weight for the data at hand (None: every example weighs 1), said and tagged."""
    if value is None:
        return None
    classes = max(2, datasets.spec.num_classes)  # binary: one sigmoid output, two classes
    if value == BALANCED:
        labels = training_labels(datasets.train)
        weights = balanced(labels, classes)
        how = f"balanced over {len(labels)} training labels"
    else:
        weights = given(value, classes)
        how = "trainer.class_weight"
    log.info(f"class weights ({how}): " + ", ".join(f"{c}: {w:.3g}" for c, w in weights.items()))
    tracker.set_tags({"trainer.class_weight": ", ".join(f"{c}: {w:.4g}" for c, w in weights.items())})
    return weights


def training_labels(train) -> np.ndarray:
    """The class of every training example, in one pass over the split's labels."""
    batches = [np.asarray(labels).reshape(len(labels), -1)[:, 0] for labels in train.map(lambda *e: e[1])]
    return np.rint(np.concatenate(batches)).astype(np.int64) if batches else np.zeros(0, np.int64)


def balanced(labels: np.ndarray, classes: int) -> dict[int, float]:
    from sklearn.utils.class_weight import compute_class_weight

    present = np.unique(labels)
    computed = dict(zip(present.tolist(), compute_class_weight("balanced", classes=present, y=labels).tolist()))
    return {c: float(computed.get(c, 1.0)) for c in range(classes)}


def given(value, classes: int) -> dict[int, float]:
    weights = {int(key): float(weight) for key, weight in value.items()}
    beyond = sorted(c for c in weights if c >= classes)
    if beyond:
        raise ConfigError(f"trainer.class_weight names class {beyond[0]}, but the data has {classes} classes "
                          f"(0 to {classes - 1}).", fix="trainer.class_weight={" + ",".join(
                              f"{c}:{weights.get(c, 1.0):g}" for c in range(classes)) + "}")
    return {c: weights.get(c, 1.0) for c in range(classes)}
