"""Schemas for the settings that are not objects: trainer, hardware, precision, tracking, sweep.

Dataclasses only: checked.validate(cfg) merges the user's values into them, so OmegaConf checks the types, and each
dataclass's `__post_init__` (which `OmegaConf.to_object` calls) checks ranges and choices with checks.py's one
vocabulary. Object configs (data, model, optimizer, ...) are checked by their factories."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from tfx_hydra.errors import ConfigError, show
from tfx_hydra.metrics import HEADS, TASK_HEADS, TASKS, epoch_names, require_trainer_fits_task
from tfx_hydra.precision import POLICIES
from tfx_hydra.settings.checks import (
    require_batch_span,
    require_choice,
    require_interval,
    require_non_negative,
    require_positive,
    require_positive_or_auto,
    require_range,
    require_target,
)
from tfx_hydra.settings.project import default_experiment

JIT_CHOICES = ("auto", True, False)
ALLOCATORS = (None, "cuda_malloc_async")
MODES = ("train", "evaluate")
DIRECTIONS = ("maximize", "minimize")
EARLY_STOPPING_MODES = ("auto", "min", "max")
# Store URIs MLflow takes (a bare path would be MLflow's deprecated file store, which raises)
STORE_SCHEMES = ("sqlite:///", "http://", "https://", "postgresql", "mysql", "mssql", "databricks", "file:")


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    patience: int = 3
    mode: str = "auto"
    restore_best_weights: bool = True

    def __post_init__(self) -> None:
        require_non_negative("trainer.early_stopping.patience", self.patience,
                             "stop at the first epoch without progress", 3)
        require_choice("trainer.early_stopping.mode", self.mode, EARLY_STOPPING_MODES)


@dataclass
class KeepBestConfig:
    enabled: bool = False
    monitor: str = "val_loss"     # any metric logged every epoch
    mode: str = "auto"            # auto (min for a loss, else max) | min | max

    def __post_init__(self) -> None:
        require_choice("trainer.keep_best.mode", self.mode, EARLY_STOPPING_MODES)


@dataclass
class TrainerConfig:
    epochs: int = 5
    batch_size: Any = 32  # global batch, or "auto" (the hardware profile's per-replica batch x replicas)
    loss: Any = "sparse_categorical_crossentropy"  # a Keras name, or a _target_ node (compiled.py)
    metrics: List[Any] = field(default_factory=lambda: ["accuracy"])  # Keras names, or _target_ nodes with a name
    callbacks: List[Any] = field(default_factory=list)  # _target_ nodes: Keras callbacks run after ours
    jit_compile: Any = "auto"
    steps_per_execution: Any = "auto"  # or a positive integer
    grad_accum_steps: int = 1
    scale_lr_with_replicas: bool = False
    deterministic: bool = False
    backup: bool = True
    backup_every: Any = "auto"  # mid-epoch backups too: a duration or a number of steps; null: at epoch ends only
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    keep_best: KeepBestConfig = field(default_factory=KeepBestConfig)
    label_smoothing: float = 0.0  # the cross-entropy's targets pulled this far towards uniform (losses.py)
    class_weight: Any = None  # null | balanced | {class index: weight} (class_weight.py)
    finetune_epochs: int = 0
    finetune_lr: Optional[float] = None
    finetune_layers: Optional[int] = None
    tensorboard: bool = True
    tensorboard_histogram_freq: int = 1
    tensorboard_profile_batches: Optional[List[int]] = None
    verbose: bool = True
    count_flops: bool = True  # each epoch's TFLOP/s and MFU (trainer/flops.py, callbacks/compute_rate.py)
    log_every: Any = "1min"  # an epoch's progress mid-epoch: a duration or a number of steps; null: off (midway.py)
    run_eagerly: bool = False  # debug=eager
    check_numerics: bool = False  # debug=numerics
    overfit_check: bool = False  # debug=overfit

    def __post_init__(self) -> None:
        require_positive("trainer.epochs", self.epochs, 5)
        for key, example in (("finetune_epochs", 3), ("tensorboard_histogram_freq", 1)):
            require_non_negative(f"trainer.{key}", getattr(self, key), "off", example)
        if self.finetune_lr is not None:  # null: a tenth of optimizer.learning_rate
            require_positive("trainer.finetune_lr", self.finetune_lr, "1e-5", integer=False)
        if self.finetune_layers is not None:
            require_positive("trainer.finetune_layers", self.finetune_layers, 20)
        require_batch_span("trainer.tensorboard_profile_batches", self.tensorboard_profile_batches, "[10,20]")
        require_positive_or_auto("trainer.batch_size", self.batch_size, 32)
        require_interval("trainer.log_every", self.log_every)
        require_interval("trainer.backup_every", None if self.backup_every == "auto" else self.backup_every, "10min")
        require_positive_or_auto("trainer.steps_per_execution", self.steps_per_execution, 1)
        require_positive("trainer.grad_accum_steps", self.grad_accum_steps, 1)
        require_range("trainer.label_smoothing", self.label_smoothing, 0.0, 1.0, 0.1, high_inclusive=False)
        require_choice("trainer.jit_compile", self.jit_compile, JIT_CHOICES)
        require_target("trainer.loss", self.loss, "{_target_: myproj.losses.focal}", allow_name=True)
        for index, metric in enumerate(self.metrics):
            require_target(f"trainer.metrics[{index}]", metric, "{_target_: myproj.metrics.Top2, name: top2}",
                           allow_name=True, named=True)
        for index, callback in enumerate(self.callbacks):
            require_target(f"trainer.callbacks[{index}]", callback, "{_target_: myproj.callbacks.Log}")
        monitored = epoch_names(self.metrics)
        for key, watch in (("early_stopping", self.early_stopping), ("keep_best", self.keep_best)):
            if watch.enabled and watch.monitor not in monitored:
                raise ConfigError(f"trainer.{key}.monitor={watch.monitor} is not a metric logged every epoch "
                                  f"(trainer.metrics={list(self.metrics)}).", fix=f"one of: {', '.join(monitored)}")


@dataclass
class ExpectConfig:
    device_type: Optional[str] = None
    name_pattern: Optional[str] = None
    min_count: int = 0
    min_memory_gb: Optional[float] = None
    min_compute_capability: Optional[float] = None

    def __post_init__(self) -> None:
        require_choice("hardware.expect.device_type", self.device_type, (None, "CPU", "GPU"))
        require_non_negative("hardware.expect.min_count", self.min_count, "no GPU needed")


@dataclass
class HardwareConfig:
    """A hardware profile. Tuned values left null on `hardware=auto` come from the profile it picks."""

    name: str = "auto"
    expect: ExpectConfig = field(default_factory=ExpectConfig)
    gpus: Optional[List[int]] = None
    memory_growth: bool = True
    allocator: Optional[str] = None
    xla: Optional[bool] = None
    precision: Optional[str] = None
    per_replica_batch_size: Optional[int] = None
    steps_per_execution: Optional[int] = None
    intra_op_threads: Any = None  # a number, 0 (TensorFlow's choice), or auto (threads.py)
    inter_op_threads: Optional[int] = None
    log_device_placement: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        for key in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, key) not in (None, "auto" if key == "intra_op_threads" else None):
                require_non_negative(f"hardware.{key}", getattr(self, key), "TensorFlow's choice")
        for key in ("per_replica_batch_size", "steps_per_execution"):
            if getattr(self, key) is not None:
                require_positive(f"hardware.{key}", getattr(self, key), 32)
        if self.precision is not None:
            require_choice("hardware.precision", self.precision, (*POLICIES, "auto"))  # auto: by the CPU
        require_choice("hardware.allocator", self.allocator, ALLOCATORS)
        for index in self.gpus or []:
            if index < 0:
                raise ConfigError(f"hardware.gpus={list(self.gpus)} holds a negative index.",
                                  fix="hardware.gpus=[0] (indices as nvidia-smi lists them)")


@dataclass
class PrecisionConfig:
    policy: str = "auto"
    loss_scale: Any = "auto"

    def __post_init__(self) -> None:
        require_choice("precision.policy", self.policy, ("auto", *POLICIES))
        scale = self.loss_scale
        if scale in ("auto", "dynamic", None):
            return
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ConfigError(f"precision.loss_scale={show(scale)} is not one of: auto, dynamic, null, or a positive "
                              "number.", fix="precision.loss_scale=auto")


@dataclass
class SystemMetricsConfig:
    """tracking.system_metrics: MLflow's monitor of CPU, memory and GPUs (tracking/system.py)."""

    enabled: bool = True
    interval: float = 10.0  # seconds between samples

    def __post_init__(self) -> None:
        require_positive("tracking.system_metrics.interval", self.interval, "10", integer=False, unit="seconds")


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None
    artifact_location: Optional[str] = None
    experiment: Optional[str] = None  # None: the project's name (settings.project.default_experiment), else tfx_hydra
    run_name: Optional[str] = None
    connect_timeout: float = 5.0
    tags: dict[str, str] = field(default_factory=dict)
    system_metrics: SystemMetricsConfig = field(default_factory=SystemMetricsConfig)

    def __post_init__(self) -> None:
        self.experiment = default_experiment() if self.experiment is None else self.experiment  # a project's name
        if not self.experiment.strip():
            raise ConfigError("tracking.experiment is empty.", fix="tracking.experiment=tfx_hydra")
        if self.uri is not None and not self.uri.startswith(STORE_SCHEMES):
            raise ConfigError(f"tracking.uri={self.uri} is not a store URI MLflow takes (a bare path would be MLflow's "
                              "retired file store).", fix="tracking.uri=sqlite:///mlflow.db (a SQLite file; relative "
                              "paths start in the launch dir), tracking.uri=http://host:5000 (a server), or drop it "
                              "for the default store")
        file_store = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() == "true"
        if self.uri is not None and self.uri.startswith("file:") and not file_store:
            raise ConfigError(f"tracking.uri={self.uri} is MLflow's retired file store, which MLflow refuses unless "
                              "MLFLOW_ALLOW_FILE_STORE=true is set.", fix="tracking.uri=sqlite:///mlflow.db "
                              "(MLflow's `mlflow migrate-filestore` moves old runs), or export "
                              "MLFLOW_ALLOW_FILE_STORE=true")
        require_positive("tracking.connect_timeout", self.connect_timeout, "5", integer=False, unit="seconds")


@dataclass
class TaskConfig:
    """task: the kind of problem (conf/task/). Its loss, metrics and objective are read by trainer.* and
    sweep.* (interpolated): they are checked there."""

    name: str = "classification"
    head: str = "softmax"
    loss: Any = "sparse_categorical_crossentropy"
    metrics: List[Any] = field(default_factory=lambda: ["accuracy"])
    objective: str = "val_accuracy"
    direction: str = "maximize"
    threshold: Optional[float] = None
    standardize_targets: bool = False

    def __post_init__(self) -> None:
        require_choice("task", self.name, TASKS)
        require_choice("task.head", self.head, TASK_HEADS.get(self.name, HEADS))
        if self.threshold is not None:
            require_range("task.threshold", self.threshold, 0.0, 1.0, 0.5, low_inclusive=False, high_inclusive=False)
        if self.name in ("binary", "multilabel") and self.threshold is None:
            raise ConfigError(f"task={self.name} needs task.threshold: the probability from which a label counts "
                              "as 1.", fix="task.threshold=0.5")


@dataclass
class SweepConfig:
    """What a sweep optimises; a list of metrics (one direction each) is a multi-objective search."""

    metric: Any = "val_accuracy"   # a name, or a list of names
    direction: Any = "maximize"    # maximize | minimize, or a list: one per metric

    def __post_init__(self) -> None:
        names, directions = self.metrics, self.directions
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) < len(names):
            raise ConfigError(f"sweep.metric={show(self.metric)} is not a metric name or a list of different ones.",
                              fix="sweep.metric=val_accuracy (or sweep.metric=[val_accuracy,parameters])")
        if len(directions) != len(names):
            raise ConfigError(f"sweep.direction={show(self.direction)} does not match sweep.metric={show(self.metric)}:"
                              f" one direction per metric, {len(names)} here.",
                              fix=f"sweep.direction=[{','.join(['maximize'] * len(names))}]")
        for direction in directions:
            require_choice("sweep.direction", direction, DIRECTIONS)

    @property
    def metrics(self) -> list:
        return [self.metric] if isinstance(self.metric, str) else list(self.metric)

    @property
    def directions(self) -> list:
        return [self.direction] if isinstance(self.direction, str) else list(self.direction)


@dataclass
class Settings:
    """The validated, typed settings a run reads (object configs stay as DictConfig)."""

    seed: int
    trainer: TrainerConfig
    hardware: HardwareConfig
    precision: PrecisionConfig
    tracking: TrackingConfig
    sweep: SweepConfig
    task: TaskConfig = field(default_factory=TaskConfig)
    lr_schedule: Any = None  # lr_schedule.LrScheduleConfig: kept with its package, checked in preflight
    cv: Any = None  # cv.CvConfig: likewise

    def __post_init__(self) -> None:
        require_trainer_fits_task(self.trainer, self.task.name)


SECTIONS = {
    "trainer": TrainerConfig,
    "hardware": HardwareConfig,
    "precision": PrecisionConfig,
    "tracking": TrackingConfig,
    "sweep": SweepConfig,
    "task": TaskConfig,
}
