"""cv=kfold: folds cut from the pooled training and validation splits (disjoint, stratified, seeded), the
test split untouched, a streamed source refused, and the folds' mean and std per configuration."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np
import pytest

from tfx_hydra.cv import CvConfig, Fold, fold_indices, fold_statistics, require_folded
from tfx_hydra.data import from_pipelines
from tfx_hydra.data.pipeline import PipelineOptions, from_arrays
from tfx_hydra.data.splits import Split
from tfx_hydra.errors import ConfigError, DataError


def test_the_folds_are_disjoint_cover_every_example_and_keep_the_class_proportions():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)
    held = [fold_indices(labels, 5, fold, seed=3, stratified=True) for fold in range(5)]
    assert sorted(np.concatenate(held).tolist()) == list(range(100))  # each example in exactly one fold
    for fold in held:
        assert np.bincount(labels[fold]).tolist() == [12, 6, 2]  # a fifth of each class
    assert [f.tolist() for f in held] == [fold_indices(labels, 5, i, seed=3, stratified=True).tolist()
                                          for i in range(5)]  # every fold's job cuts the same way
    assert held[0].tolist() != fold_indices(labels, 5, 0, seed=4, stratified=True).tolist()  # the seed decides


def test_a_class_rarer_than_the_folds_is_refused_when_stratified():
    with pytest.raises(DataError, match=r"a class has only 2 examples.*\n  Fix: cv.folds=2 \(or cv.stratified=false\)"):
        fold_indices(np.array([0] * 20 + [1] * 2), 5, 0, seed=0, stratified=True)
    assert len(fold_indices(np.array([0] * 20 + [1] * 2), 5, 0, seed=0, stratified=False)) in (4, 5)
    assert len(fold_indices(np.array([0] * 10 + [2] * 10), 5, 0, seed=0, stratified=True)) == 4  # class 1 absent


def splits(n_train=80, n_validation=20, n_test=30):
    rng = np.random.default_rng(0)
    made = {name: Split(rng.normal(size=(n, 4)).astype("float32"), np.arange(n) % 2)
            for name, n in (("train", n_train), ("validation", n_validation), ("test", n_test))}
    made["validation"].x[:, 0] = 100  # validation examples are marked
    return made


def test_an_in_memory_source_validates_on_the_jobs_fold_and_never_touches_the_test_split():
    options = PipelineOptions(batch_size=10)
    folding = PipelineOptions(batch_size=10, fold={"folds": 4, "fold": 1, "seed": 0, "stratified": True})  # as run
    data = from_arrays(splits(), [4], 2, folding, "none", named="rows", source="rng")
    plain = from_arrays(splits(), [4], 2, options, "none", named="rows", source="rng")
    assert data.folded and not plain.folded
    assert (data.num_train, data.num_validation, data.num_test) == (75, 25, 30)  # 100 pooled, a quarter held out
    assert data.reads["test"].digest == plain.reads["test"].digest
    validation = np.concatenate([x for x, _ in data.validation])
    assert 0 < (validation[:, 0] == 100).sum() < 20  # the fold mixes former training and validation rows


def test_a_source_that_validates_on_its_test_split_is_refused():
    same = splits()
    same["validation"] = same["test"]
    with pytest.raises(DataError, match="trained on"):
        from_arrays(same, [4], 2, PipelineOptions(batch_size=10, fold=Fold(folds=3, fold=0, seed=0)), "none",
                    named="rows", source="rng")


def test_a_streamed_source_is_refused_with_the_sources_that_fold():
    import tensorflow as tf

    pipeline = tf.data.Dataset.from_tensor_slices((np.zeros((40, 4), "float32"), np.zeros(40, "int64")))
    data = from_pipelines(pipeline, pipeline, pipeline, input_shape=[4], num_classes=2, batch_size=10)
    with pytest.raises(DataError, match=r"data._target_=acme.load streams its examples.*\n  Fix: a source read into"):
        require_folded(data, CvConfig(name="kfold", folds=3, fold=0), "acme.load")
    require_folded(data, CvConfig(), "acme.load")  # cv=none: any source


@pytest.mark.parametrize("given, message", [
    (dict(name="kfold", folds=1, fold=0), r"cv.folds=1: k-fold needs at least 2 folds"),
    (dict(name="kfold", folds=5, fold=5), r"cv.fold=5 is not a fold of cv.folds=5: expected 0 to 4"),
    (dict(name="loo"), r"cv=loo"),
])
def test_bad_cv_settings_are_one_error_with_a_fix(given, message):
    with pytest.raises(ConfigError, match=message) as raised:
        CvConfig(**given)
    assert "Fix: " in str(raised.value)


def fold_run(overrides: str, val: float, test: float, status: str = "FINISHED"):
    return SimpleNamespace(info=SimpleNamespace(status=status),
                           data=SimpleNamespace(tags={"cv.fold": "0", "hydra.overrides": overrides},
                                                metrics={"val_accuracy": val, "test_accuracy": test, "loss": 1.0}))


def test_fold_statistics_are_the_mean_and_sample_std_per_configuration_of_finished_folds():
    runs = [fold_run(f"cv=kfold cv.fold={i} model.units=32", v, t) for i, (v, t) in enumerate([(.9, .8), (.8, .7),
                                                                                               (.7, .9)])]
    runs += [fold_run("cv=kfold cv.fold=0 model.units=64", .5, .5), fold_run("cv.fold=1 cv=kfold model.units=64", .2,
                                                                            .2, status="FAILED")]
    found = fold_statistics(runs)
    assert set(found) == {"cv=kfold model.units=32", "cv=kfold model.units=64"}
    mean, std, n = found["cv=kfold model.units=32"]["val_accuracy"]
    assert (mean, std, n) == pytest.approx((statistics.mean([.9, .8, .7]), statistics.stdev([.9, .8, .7]), 3))
    assert found["cv=kfold model.units=64"]["test_accuracy"] == (0.5, 0.0, 1)  # the FAILED fold is left out
    assert "loss" not in found["cv=kfold model.units=32"]  # validation and test metrics only


def test_sample_weights_stay_with_their_rows_through_the_folds():
    from tfx_hydra.cv import folded

    weighed = splits()
    for split in weighed.values():
        split.w = split.x[:, 1].copy()  # each row's weight is its own second feature
    cut = folded(weighed, "classification", Fold(folds=4, fold=2, seed=0))
    for name in ("train", "validation"):
        assert np.array_equal(cut[name].w, cut[name].x[:, 1])
    assert len(cut["train"].w) + len(cut["validation"].w) == 100 and cut["test"] is weighed["test"]
