"""options: the options every data source takes (conf/data/pipeline/default.yaml), checked before
TensorFlow is imported: the sources build them from their factory's keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfx_hydra.cv import Fold
from tfx_hydra.data import cache as caching
from tfx_hydra.data import service as data_service
from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.checks import require_bool, require_choice, require_positive_or_auto, require_positive_or_null

SHARD_POLICIES = ("auto", "file", "data", "off")


@dataclass(frozen=True)
class PipelineOptions:
    """The options every source takes (conf/data/pipeline/default.yaml)."""

    batch_size: int
    seed: int | None = 0
    shuffle_buffer: int = 2048
    cache: bool | str = "auto"  # auto: memory if it fits, else disk, else none | memory (true) | a path | false
    cache_budget: int | str = "auto"  # bytes the in-memory cache and shuffle buffer may take (auto: cache.py)
    cache_dir: str | None = None  # where cache=auto writes a file cache when memory is short (null: the temp folder)
    prefetch: int | str = "auto"
    map_parallelism: int | str = "auto"
    deterministic: bool = True  # false lets parallel maps hand out examples as they finish
    shard_policy: str = "auto"
    limit: int | None = None
    limit_batches: int | float | None = None  # per split and epoch: a number of batches, or a share of them
    check_finite: bool = True  # NaN/inf inputs are a DataError before training (false: let them through)
    check_finite_batches: int | None = 10  # streamed sources: the first N batches of each split (null: all)
    class_names: tuple[str, ...] | None = None  # the classes' names in index order (null: the data's, or numbered)
    fold: Any = None  # a cv=kfold job's fold (cv.Fold, or its fields as the run hands them); None: the splits as read
    service: Any = False  # off | local | grpc://host:port: the training split read from tf.data service (service.py)
    service_workers: int = 2  # data.service=local: the worker processes it starts

    def __post_init__(self) -> None:
        if self.fold is not None and not isinstance(self.fold, Fold):
            object.__setattr__(self, "fold", Fold(**dict(self.fold)))  # as Hydra hands it over: a mapping
        require_choice("data.shard_policy", self.shard_policy, SHARD_POLICIES)
        data_service.check(self.service, self.service_workers)
        if self.served and (self.limit is not None or self.limit_batches is not None):
            key = "limit" if self.limit is not None else "limit_batches"
            raise ConfigError(f"data.{key} with data.service={self.service}: each tf.data service worker would take "
                              "its own first examples of the pieces it is handed, not the split's.",
                              fix=f"data.{key}=null, or data.service=off to train on a few batches")
        caching.check_options(self.cache, self.cache_budget, self.cache_dir)
        for key in ("prefetch", "map_parallelism"):
            require_positive_or_auto(f"data.{key}", getattr(self, key), "auto")
        require_positive_or_null("data.limit", self.limit, example="null", null_means="every example")
        batches = self.limit_batches
        if batches is not None and (isinstance(batches, bool) or not (
                (isinstance(batches, int) and batches >= 1) or (isinstance(batches, float) and 0 < batches <= 1))):
            raise ConfigError(f"data.limit_batches={batches!r}: expected a number of batches (2), a fraction of them "
                              "(0.1), or null.", fix="data.limit_batches=2")
        require_bool("data.check_finite", self.check_finite, fix=True)
        require_positive_or_null("data.check_finite_batches", self.check_finite_batches, example=10,
                                 null_means="every batch")
        if self.class_names is not None:
            names = self.class_names
            if isinstance(names, str) or not all(isinstance(n, (str, int)) and str(n) for n in names):
                raise ConfigError(f"data.class_names={names!r}: expected a list of names, one per class, in index "
                                  "order.", fix="data.class_names=[cat,dog,bird], or null (the data's, or numbered)")
            object.__setattr__(self, "class_names", tuple(str(n) for n in names))
            if len(set(self.class_names)) != len(self.class_names):
                raise ConfigError(f"data.class_names={list(self.class_names)} names a class twice.",
                                  fix="one distinct name per class")
        if not isinstance(self.shuffle_buffer, int) or self.shuffle_buffer < 0:
            raise ConfigError(f"data.shuffle_buffer={self.shuffle_buffer!r}: expected a non-negative integer "
                              "(0 = no shuffling).", fix="data.shuffle_buffer=2048")

    @property
    def served(self) -> bool:
        """Whether the training split is read from tf.data service (data.service not off)."""
        return data_service.is_on(self.service)

    def tf_options(self):
        """Determinism and the multi-worker auto-shard policy, explicit rather than tf.distribute's
        guess (FILE, falling back to DATA with a warning when there are fewer files than workers)."""
        import tensorflow as tf

        policy = tf.data.experimental.AutoShardPolicy
        result = tf.data.Options()
        result.deterministic = self.deterministic
        result.experimental_distribute.auto_shard_policy = {
            "auto": policy.AUTO, "file": policy.FILE, "data": policy.DATA, "off": policy.OFF}[self.shard_policy]
        return result

    @property
    def parallel_calls(self):
        import tensorflow as tf

        return tf.data.AUTOTUNE if self.map_parallelism == "auto" else self.map_parallelism


def options_from(batch_size: int, seed: int | None, pipeline: dict[str, Any]) -> PipelineOptions:
    """The common options out of a factory's keyword arguments, an unknown key named."""
    known = set(PipelineOptions.__dataclass_fields__) - {"batch_size", "seed"}
    unknown = sorted(set(pipeline) - known)
    if unknown:
        raise ConfigError(f"data.{unknown[0]} is not an option of this data source.",
                          fix=f"check the spelling (python -m tfx_hydra --cfg job --package data); "
                          f"common options: {', '.join(sorted(known))}")
    return PipelineOptions(batch_size=batch_size, seed=seed, **pipeline)
