"""In-memory data split into train / validation / test (seeded, stratified where it can be) and
normalized with figures taken from the training split alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfx_hydra.settings.checks import require_choice, require_fraction


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
        offset, scale = feature_moments(splits["train"].x)
        scale = tuple(1.0 / max(std, 1e-7) for std in scale)
    offset_, scale_ = np.asarray(offset, "float32"), np.asarray(scale, "float32")
    for split in {id(split): split for split in splits.values()}.values():  # validation may be the test split
        x = split.x.astype("float32")  # the one copy: the source's arrays are left as they were
        if normalization != "none":
            x -= offset_
            x *= scale_
        split.x = x
    return offset, scale


def feature_moments(x: np.ndarray, rows: int = 65_536) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per feature (last axis): the mean and standard deviation, summed in float64 a block of rows at a
    time (a float64 copy of the whole split would cost twice its float32 size)."""
    flat = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    blocks = range(0, len(flat), rows)
    total = sum(flat[i:i + rows].sum(axis=0, dtype="float64") for i in blocks)
    mean = total / max(len(flat), 1)
    squares = sum(np.square(flat[i:i + rows].astype("float64") - mean).sum(axis=0) for i in blocks)
    std = np.sqrt(squares / max(len(flat), 1))
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def split_three_ways(x, y, test_split, validation_split, seed, weights=None) -> dict[str, Split]:
    """Seeded train / validation / test split of in-memory arrays, stratified where every class
    can appear in every split (a tiny dataset falls back to a plain seeded split). The split is drawn on
    example indices (the draw depends on the labels and the count only), and each split then takes its
    rows once: `x` is copied once, not once per cut. `weights`: each example's, split with it."""
    require_fraction("data.test_split", test_split)
    require_fraction("data.validation_split", validation_split)
    rest, test, y_rest, _ = split_two_ways(np.arange(len(y)), y, test_split, seed)
    train, validation = split_two_ways(rest, y_rest, validation_split, seed)[:2]
    return {name: Split(_rows(x, held), _rows(y, held), None if weights is None else weights[held])
            for name, held in (("train", train), ("validation", validation), ("test", test))}


def _rows(x, held: np.ndarray):
    return x[held] if isinstance(x, np.ndarray) else [x[i] for i in held]


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
