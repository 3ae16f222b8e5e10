"""In-memory data split into train / validation / test (seeded, stratified where it can be) and
normalized with figures taken from the training split alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfx_hydra.validation import require_choice, require_fraction


@dataclass
class Split:
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray | None = None  # each example's weight in the training loss (csv's data.weight_column)

    def first(self, count: int) -> "Split":
        return Split(self.x[:count], self.y[:count], None if self.w is None else self.w[:count])

    def arrays(self) -> tuple:
        """What tf.data slices: (x, y), or (x, y, w) when the split has weights."""
        return (self.x, self.y) if self.w is None else (self.x, self.y, self.w)


NORMALIZATIONS = ("scale", "standardize", "none")


def normalize_arrays(splits: dict[str, Split], normalization: str, raw_scale: float) -> tuple[Any, Any]:
    """(offset, scale) applied to every split: `scale` multiplies by the source's raw range,
    `standardize` uses the training split's per-feature mean and std. Returns them for the spec."""
    require_choice("data.normalization", normalization, NORMALIZATIONS)
    if normalization == "none":
        offset, scale = 0.0, 1.0
    elif normalization == "scale":
        offset, scale = 0.0, raw_scale
    else:
        train = splits["train"].x.astype("float64")
        axes = tuple(range(train.ndim - 1))  # per feature (last axis)
        offset = train.mean(axis=axes)
        scale = 1.0 / np.maximum(train.std(axis=axes), 1e-7)
        offset, scale = tuple(float(v) for v in offset), tuple(float(v) for v in scale)
    for split in {id(split): split for split in splits.values()}.values():  # validation may be the test split
        split.x = ((split.x.astype("float32") - np.asarray(offset, "float32")) * np.asarray(scale, "float32"))
    return offset, scale


def split_three_ways(x, y, test_split, validation_split, seed) -> dict[str, Split]:
    """Seeded train / validation / test split of in-memory arrays, stratified where every class
    can appear in every split (a tiny dataset falls back to a plain seeded split)."""
    require_fraction("data.test_split", test_split)
    require_fraction("data.validation_split", validation_split)
    x_rest, x_test, y_rest, y_test = split_two_ways(x, y, test_split, seed)
    x_train, x_val, y_train, y_val = split_two_ways(x_rest, y_rest, validation_split, seed)
    return {"train": Split(x_train, y_train), "validation": Split(x_val, y_val), "test": Split(x_test, y_test)}


def split_two_ways(x, y, fraction, seed):
    """(x_kept, x_held, y_kept, y_held): `fraction` held out, seeded, stratified where possible."""
    from sklearn.model_selection import train_test_split

    if len(y) and y.ndim == 1 and y.dtype.kind in "iu" and np.bincount(y).min() >= 2:  # classes: stratified
        try:
            return train_test_split(x, y, test_size=fraction, random_state=seed, stratify=y)
        except ValueError:  # fewer held-out examples than classes
            pass
    return train_test_split(x, y, test_size=fraction, random_state=seed)


def with_test_folder(x, y, test_x, test_y, validation_split: float, seed) -> dict[str, Split]:
    """Sources whose test split is a folder of its own: validation held out of the rest, stratified, seeded."""
    require_fraction("data.validation_split", validation_split)
    train_x, val_x, train_y, val_y = split_two_ways(x, y, validation_split, seed)
    return {"train": Split(train_x, train_y), "validation": Split(val_x, val_y), "test": Split(test_x, test_y)}


def hold_out_validation(x_train, y_train, x_test, y_test, validation_split: float) -> dict[str, Split]:
    """Sources with a fixed test split: validation is the training split's tail (0: the test split)."""
    test = Split(x_test, y_test)
    if validation_split == 0:  # the seed article's choice: validate on the test split
        return {"train": Split(x_train, y_train), "validation": test, "test": test}
    require_fraction("data.validation_split", validation_split)
    count = max(1, int(round(len(x_train) * validation_split)))
    return {"train": Split(x_train[:-count], y_train[:-count]),
            "validation": Split(x_train[-count:], y_train[-count:]), "test": test}


def target_figures(task, targets: np.ndarray) -> dict[str, Any]:
    """Regression: the training targets' mean and std, per target (with task.standardize_targets the model's
    last layer maps its outputs to the targets' units with them: tfx_hydra.models.heads)."""
    if task.name != "regression":
        return {}
    mean, std = targets.astype("float64").mean(axis=0), targets.astype("float64").std(axis=0)
    return {"target_mean": tuple(float(v) for v in mean), "target_std": tuple(float(max(v, 1e-7)) for v in std)}
