"""cv: k-fold cross-validation (`-m cv=kfold cv.folds=5`), one sweep job per fold.

The training and validation splits an in-memory source read are pooled and cut into `cv.folds`
disjoint folds (stratified by class for classification and binary, seeded by the run's seed, so
every fold's job cuts the same way); job `cv.fold` validates on its fold and trains on the others.
The test split is never touched. The run hands the data step the job's fold as an argument (`fold`,
which a source passes on with its data.* options; `from_arrays` cuts it): nothing reaches back into a
global. The option's file sweeps `cv.fold` over range(cv.folds) through Hydra's own sweeper, so a fold
is an ordinary job: launched, resumed and tracked like any other.
The sweep's parent run gets the mean and standard deviation of every validation and test metric
over the folds (`fold_statistics`), per configuration when other keys are swept too.

Streamed sources (files read batch by batch, and a table larger than data.cache_budget) have no pool to
cut: they are refused.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import require_choice, require_positive

FOLD_TAG, FOLDS_TAG = "cv.fold", "cv.folds"
STRATIFIED_TASKS = ("classification", "binary")


@dataclass
class CvConfig:
    """cv: none, or kfold with its number of folds and the fold this job validates on."""

    name: str = "none"
    folds: Any = None
    fold: Any = None
    stratified: bool = True

    def __post_init__(self) -> None:
        require_choice("cv", self.name, ("none", "kfold"))
        if self.name != "kfold":
            return
        require_positive("cv.folds", self.folds, 5)
        if self.folds < 2:
            raise ConfigError(f"cv.folds={self.folds}: k-fold needs at least 2 folds.", fix="cv.folds=5")
        if isinstance(self.fold, bool) or not isinstance(self.fold, int) or not 0 <= self.fold < self.folds:
            raise ConfigError(f"cv.fold={self.fold} is not a fold of cv.folds={self.folds}: expected 0 to "
                              f"{self.folds - 1} (-m sweeps them all).", fix=f"cv.fold=0 (or -m cv=kfold "
                              f"cv.folds={self.folds})")

    @property
    def active(self) -> bool:
        return self.name == "kfold"


@dataclass(frozen=True)
class Fold:
    """A cv=kfold job's fold, handed to the data step as its `fold` argument (data.options: `data.fold`)."""

    folds: int
    fold: int
    seed: int
    stratified: bool = True


def data_arguments(cv: CvConfig | None, seed: int) -> dict[str, Any]:
    """What the run hands the data step besides its config: `fold` in a cv=kfold job, nothing otherwise."""
    if cv is None or not cv.active:
        return {}
    return {"fold": {"folds": cv.folds, "fold": cv.fold, "seed": seed, "stratified": cv.stratified}}


def folded(splits: dict, task: str, fold: Fold | None) -> dict:
    """The splits with training and validation re-cut into `fold` (unchanged without one)."""
    if fold is None:
        return splits
    if splits["validation"] is splits["test"]:
        raise DataError("cv=kfold pools the training and validation splits, and this source validates on its "
                        "test split: the test split would be trained on.", fix="data.validation_split=0.1")
    train, validation = splits["train"], splits["validation"]
    x, y = np.concatenate([train.x, validation.x]), np.concatenate([train.y, validation.y])
    held = fold_indices(y, fold.folds, fold.fold, fold.seed, stratified=fold.stratified and task in STRATIFIED_TASKS)
    kept = np.setdiff1d(np.arange(len(y)), held)
    w = None if train.w is None else np.concatenate([train.w, validation.w])
    return {**splits, "train": replace(train, x=x[kept], y=y[kept], w=None if w is None else w[kept]),
            "validation": replace(validation, x=x[held], y=y[held], w=None if w is None else w[held])}


def fold_indices(y, folds: int, fold: int, seed: int, stratified: bool):
    """The example indices of fold `fold` of `folds` (scikit-learn's StratifiedKFold or KFold, shuffled
    with `seed`): disjoint, together every example once."""
    from sklearn.model_selection import KFold, StratifiedKFold

    labels = np.asarray(y).reshape(len(y), -1)[:, 0]
    if stratified:
        smallest = int(np.unique(labels, return_counts=True)[1].min())  # among the classes present
        if smallest < folds:
            raise DataError(f"cv.folds={folds} stratified: a class has only {smallest} examples in the training "
                            "and validation splits, fewer than the folds.",
                            fix=f"cv.folds={max(2, int(smallest))} (or cv.stratified=false)")
        cutter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    else:
        cutter = KFold(n_splits=folds, shuffle=True, random_state=seed)
    _, held = list(cutter.split(np.zeros(len(labels)), labels if stratified else None))[fold]
    return held


# our sources that read their data into memory, where folds are cut (from_arrays): the others stream files
FOLDING_SOURCES = {"tfx_hydra.data.digits": "digits", "tfx_hydra.data.synthetic": "synthetic",
                   "tfx_hydra.data.keras_dataset": "keras (mnist, ..., a .npz)", "tfx_hydra.data.csv": "csv",
                   "tfx_hydra.data.text_folder": "text_folder", "tfx_hydra.data.text_table": "text_table"}
STREAMED_FIX = f"a source read into memory ({', '.join(FOLDING_SOURCES.values())}), or cv=none"


def require_foldable(cv: Any, data: Any, option: str | None = None) -> None:
    """cv=kfold on one of our streamed sources (tfrecord, image_folder, tfds), refused before any job or sweep
    record exists; a source of the user's is known only once built (require_folded)."""
    target = str((data or {}).get("_target_", ""))
    if cv is None or cv.get("name") != "kfold" or not target.startswith("tfx_hydra.") or target in FOLDING_SOURCES:
        return
    named = f"data={option}" if option else f"data._target_={target}"
    raise ConfigError(f"cv=kfold cuts folds from data held in memory, and {named} streams its examples (files read "
                      "batch by batch).", fix=STREAMED_FIX)


def require_folded(datasets, cv: CvConfig | None, target: str) -> None:
    """A streamed source ignores cv=kfold: said, rather than a 'fold' trained on the usual split."""
    if cv is not None and cv.active and not datasets.folded:
        raise DataError(f"cv=kfold cuts folds from data held in memory, and data._target_={target} streams its "
                        "examples (files read batch by batch).", fix=STREAMED_FIX)


def tags(cv: CvConfig | None) -> dict[str, str]:
    return {FOLD_TAG: str(cv.fold), FOLDS_TAG: str(cv.folds)} if cv is not None and cv.active else {}


def configuration(overrides: str) -> str:
    """A fold job's overrides without its fold: what the folds of one configuration share."""
    return " ".join(o for o in overrides.split() if not re.match(r"^cv\.fold=", o))


def fold_statistics(children) -> dict[str, dict[str, tuple[float, float, int]]]:
    """{configuration: {metric: (mean, std, folds)}} over the FINISHED fold runs among `children`
    (MLflow runs), for every val_ and test_ metric; std is the sample's (n - 1)."""
    groups: dict[str, list[dict[str, float]]] = {}
    for child in children:
        if child.info.status == "FINISHED" and FOLD_TAG in child.data.tags:
            key = configuration(child.data.tags.get("hydra.overrides", ""))
            groups.setdefault(key, []).append(child.data.metrics)
    found = {}
    for key, runs in groups.items():
        names = sorted({m for run in runs for m in run if m.startswith(("val_", "test_"))})
        found[key] = {m: _mean_std([run[m] for run in runs if m in run]) for m in names}
    return found


def _mean_std(values: list[float]) -> tuple[float, float, int]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values)
