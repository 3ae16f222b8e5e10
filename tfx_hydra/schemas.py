"""Schemas for the settings that are not objects: trainer, hardware, precision, tracking, sweep.

`validate(cfg)` runs first, before TensorFlow or MLflow is imported, so a typo or an
out-of-range value fails in a fraction of a second. Types are checked by OmegaConf
(merging the user's values into a structured config); ranges and choices by each
dataclass's `__post_init__`, which `OmegaConf.to_object` calls. Object configs (data,
model, optimizer, strategy, export) are checked by the factories they instantiate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from tfx_hydra.errors import ConfigError, show
from tfx_hydra.metrics import epoch_names
from tfx_hydra.precision import POLICIES

JIT_CHOICES = ("auto", True, False)
ALLOCATORS = (None, "cuda_malloc_async")
MODES = ("train", "evaluate")
DIRECTIONS = ("maximize", "minimize")
EARLY_STOPPING_MODES = ("auto", "min", "max")
# The data gives integer class labels and the models end in a softmax over the classes: only these
# losses fit. Keras' others expect targets shaped like the outputs (one-hot, binary, regression)
# and fail at the first batch with a shape error; they are named here so the message says why.
INTEGER_LABEL_LOSSES = ("sparse_categorical_crossentropy",)
OTHER_KERAS_LOSSES = (
    "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy", "categorical_focal_crossentropy",
    "categorical_hinge", "cosine_similarity", "ctc", "dice", "hinge", "huber", "kl_divergence", "kld", "log_cosh",
    "logcosh", "mae", "mape", "mean_absolute_error", "mean_absolute_percentage_error", "mean_squared_error",
    "mean_squared_logarithmic_error", "mse", "msle", "poisson", "squared_hinge", "tversky")
# Store URIs MLflow takes (a bare path would be MLflow's deprecated file store, which raises)
STORE_SCHEMES = ("sqlite:///", "http://", "https://", "postgresql", "mysql", "mssql", "databricks", "file:")


def _require_positive(key: str, value: int, example: int) -> None:
    if value < 1:
        raise ConfigError(
            f"{key}={value} is out of range: expected a positive integer.", fix=f"{key}={example}"
        )


def _require_positive_or_auto(key: str, value: Any, example: int) -> None:
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}={show(value)} is not a positive integer or auto.", fix=f"{key}={example}")
    _require_positive(key, value, example)


def _require_non_negative(key: str, value: int) -> None:
    if value < 0:
        raise ConfigError(
            f"{key}={value} is out of range: expected 0 (TensorFlow's choice) or more.",
            fix=f"{key}=0",
        )


def _require_choice(key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        allowed = ", ".join(show(c) for c in choices)
        raise ConfigError(f"{key}={show(value)} is not one of: {allowed}.", fix=f"{key}={show(choices[0])}")


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    patience: int = 3
    mode: str = "auto"
    restore_best_weights: bool = True

    def __post_init__(self) -> None:
        _require_non_negative("trainer.early_stopping.patience", self.patience)
        _require_choice("trainer.early_stopping.mode", self.mode, EARLY_STOPPING_MODES)


@dataclass
class TrainerConfig:
    epochs: int = 5
    batch_size: Any = 32  # global batch, or "auto" (the hardware profile's per-replica batch x replicas)
    loss: str = "sparse_categorical_crossentropy"
    metrics: List[str] = field(default_factory=lambda: ["accuracy"])
    jit_compile: Any = "auto"
    steps_per_execution: Any = "auto"  # or a positive integer
    grad_accum_steps: int = 1
    scale_lr_with_replicas: bool = False
    deterministic: bool = False
    backup: bool = True
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    finetune_epochs: int = 0
    finetune_lr: Optional[float] = None
    finetune_layers: Optional[int] = None
    tensorboard: bool = True
    tensorboard_histogram_freq: int = 1
    tensorboard_profile_batches: Optional[List[int]] = None
    verbose: bool = True
    run_eagerly: bool = False  # debug=eager
    check_numerics: bool = False  # debug=numerics
    overfit_check: bool = False  # debug=overfit

    def __post_init__(self) -> None:
        _require_positive("trainer.epochs", self.epochs, 5)
        for key, example in (("finetune_epochs", 3), ("tensorboard_histogram_freq", 1)):
            if getattr(self, key) < 0:
                raise ConfigError(f"trainer.{key}={getattr(self, key)}: expected 0 (off) or more.",
                                  fix=f"trainer.{key}={example}")
        if self.finetune_lr is not None and not self.finetune_lr > 0:
            raise ConfigError(f"trainer.finetune_lr={self.finetune_lr}: expected a positive learning rate or null "
                              "(a tenth of optimizer.learning_rate).", fix="trainer.finetune_lr=1e-5")
        if self.finetune_layers is not None:
            _require_positive("trainer.finetune_layers", self.finetune_layers, 20)
        profile = self.tensorboard_profile_batches
        if profile is not None and (len(profile) != 2 or not 1 <= profile[0] <= profile[1]):
            raise ConfigError(f"trainer.tensorboard_profile_batches={list(profile)}: expected [first, last] batch "
                              "numbers, 1 <= first <= last, or null.", fix="trainer.tensorboard_profile_batches=[10,20]")
        _require_positive_or_auto("trainer.batch_size", self.batch_size, 32)
        _require_positive_or_auto("trainer.steps_per_execution", self.steps_per_execution, 1)
        _require_positive("trainer.grad_accum_steps", self.grad_accum_steps, 1)
        _require_choice("trainer.jit_compile", self.jit_compile, JIT_CHOICES)
        if self.loss in OTHER_KERAS_LOSSES:
            raise ConfigError(f"trainer.loss={self.loss} expects targets shaped like the model's outputs, but the data "
                              "gives integer class labels (and the model a softmax over the classes).",
                              fix=f"trainer.loss={INTEGER_LABEL_LOSSES[0]}")
        monitored = epoch_names(self.metrics)
        if self.early_stopping.enabled and self.early_stopping.monitor not in monitored:
            raise ConfigError(f"trainer.early_stopping.monitor={self.early_stopping.monitor} is not a metric logged "
                              f"every epoch (trainer.metrics={list(self.metrics)}).",
                              fix=f"one of: {', '.join(monitored)}")


@dataclass
class ExpectConfig:
    device_type: Optional[str] = None
    name_pattern: Optional[str] = None
    min_count: int = 0
    min_memory_gb: Optional[float] = None
    min_compute_capability: Optional[float] = None

    def __post_init__(self) -> None:
        _require_choice("hardware.expect.device_type", self.device_type, (None, "CPU", "GPU"))
        _require_non_negative("hardware.expect.min_count", self.min_count)


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
    intra_op_threads: Optional[int] = None
    inter_op_threads: Optional[int] = None
    log_device_placement: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        for key in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, key) is not None:
                _require_non_negative(f"hardware.{key}", getattr(self, key))
        for key in ("per_replica_batch_size", "steps_per_execution"):
            if getattr(self, key) is not None:
                _require_positive(f"hardware.{key}", getattr(self, key), 32)
        if self.precision is not None:
            _require_choice("hardware.precision", self.precision, POLICIES)
        _require_choice("hardware.allocator", self.allocator, ALLOCATORS)
        for index in self.gpus or []:
            if index < 0:
                raise ConfigError(
                    f"hardware.gpus={list(self.gpus)} holds a negative index.",
                    fix="hardware.gpus=[0] (indices as nvidia-smi lists them)",
                )


@dataclass
class PrecisionConfig:
    policy: str = "auto"
    loss_scale: Any = "auto"

    def __post_init__(self) -> None:
        _require_choice("precision.policy", self.policy, ("auto", *POLICIES))
        scale = self.loss_scale
        if scale in ("auto", "dynamic", None):
            return
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ConfigError(
                f"precision.loss_scale={show(scale)} is not one of: auto, dynamic, null, or a positive number.",
                fix="precision.loss_scale=auto",
            )


@dataclass
class SystemMetricsConfig:
    """tracking.system_metrics: MLflow's monitor of CPU, memory and GPUs (tracking/system.py)."""

    enabled: bool = True
    interval: float = 10.0  # seconds between samples

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigError(f"tracking.system_metrics.interval={self.interval} must be positive (seconds).",
                              fix="tracking.system_metrics.interval=10, or tracking.system_metrics.enabled=false")


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None
    artifact_location: Optional[str] = None
    experiment: str = "tfx_hydra"
    run_name: Optional[str] = None
    connect_timeout: float = 5.0
    tags: dict[str, str] = field(default_factory=dict)
    system_metrics: SystemMetricsConfig = field(default_factory=SystemMetricsConfig)

    def __post_init__(self) -> None:
        if not self.experiment or not self.experiment.strip():
            raise ConfigError("tracking.experiment is empty.", fix="tracking.experiment=tfx_hydra")
        if self.uri is not None and not self.uri.startswith(STORE_SCHEMES):
            raise ConfigError(f"tracking.uri={self.uri} is not a store URI MLflow takes (a bare path would be "
                              "MLflow's retired file store).",
                              fix="tracking.uri=sqlite:///mlflow.db (a SQLite file; relative paths start in the launch "
                              "dir), tracking.uri=http://host:5000 (a server), or drop it for the default store")
        if self.uri is not None and self.uri.startswith("file:") and os.environ.get("MLFLOW_ALLOW_FILE_STORE",
                                                                                   "").lower() != "true":
            raise ConfigError(f"tracking.uri={self.uri} is MLflow's retired file store, which MLflow refuses unless "
                              "MLFLOW_ALLOW_FILE_STORE=true is set.",
                              fix="tracking.uri=sqlite:///mlflow.db (MLflow's `mlflow migrate-filestore` moves old "
                              "runs), or export MLFLOW_ALLOW_FILE_STORE=true")
        if self.connect_timeout <= 0:
            raise ConfigError(
                f"tracking.connect_timeout={self.connect_timeout} must be positive (seconds).",
                fix="tracking.connect_timeout=5",
            )


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
            _require_choice("sweep.direction", direction, DIRECTIONS)

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


SECTIONS = {
    "trainer": TrainerConfig,
    "hardware": HardwareConfig,
    "precision": PrecisionConfig,
    "tracking": TrackingConfig,
    "sweep": SweepConfig,
}


def validate(cfg: DictConfig) -> Settings:
    """Check every settings section against its schema and return typed settings."""
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed={seed} is not a non-negative integer.", fix="seed=42")
    _require_choice("mode", cfg.get("mode", "train"), MODES)
    require_mandatory_values(cfg)
    sections = {name: validate_section(cfg, name) for name in SECTIONS}
    if "optimizer" in cfg:
        validate_optimizer(cfg.optimizer)
    validate_export_switches(cfg.get("export"))
    return Settings(seed=seed, **sections)


# Ranges of the optimizer arguments Keras' optimizers share; Keras checks few of them itself
# (a negative learning rate trains uphill without a word), and only once TensorFlow is loaded.
OPTIMIZER_RANGES = {  # key: (lowest, highest, lowest allowed, highest allowed, example)
    "learning_rate": (0.0, None, False, None, "0.001"),
    "momentum": (0.0, 1.0, True, True, "0.9"),
    "beta_1": (0.0, 1.0, True, False, "0.9"),
    "beta_2": (0.0, 1.0, True, False, "0.999"),
    "epsilon": (0.0, None, False, None, "1e-07"),
    "weight_decay": (0.0, None, True, None, "0.004"),
    "clipnorm": (0.0, None, False, None, "1.0"),
    "clipvalue": (0.0, None, False, None, "1.0"),
    "global_clipnorm": (0.0, None, False, None, "1.0"),
}


def validate_optimizer(node: DictConfig) -> None:
    """The optimizer's numbers in range (a learning-rate schedule, itself a `_target_`, is left to Keras)."""
    for key, (low, high, low_ok, high_ok, example) in OPTIMIZER_RANGES.items():
        value = node.get(key) if isinstance(node, DictConfig) else None
        if value is None or isinstance(value, DictConfig):
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"optimizer.{key}={show(value)} is not a number.", fix=f"optimizer.{key}={example}")
        inside = ((value > low or (low_ok and value == low))
                  and (high is None or value < high or (high_ok and value == high)))
        if not inside:
            bounds = (f"{'[' if low_ok else '('}{low:g}, {high:g}{']' if high_ok else ')'}" if high is not None
                      else f"{'>=' if low_ok else '>'} {low:g}")
            raise ConfigError(f"optimizer.{key}={show(value)} is out of range: expected a number {bounds}.",
                              fix=f"optimizer.{key}={example}")
    if isinstance(node, DictConfig) and "nesterov" in node and not isinstance(node.nesterov, bool):
        raise ConfigError(f"optimizer.nesterov={show(node.nesterov)}: expected true or false.",
                          fix="optimizer.nesterov=false")


EXPORT_SWITCHES = {"strict": bool, "mlflow_model": bool}


def validate_export_switches(node: DictConfig | None) -> None:
    """export.strict / mlflow_model are switches, register_as and source names: a typo such as
    export.strict=yes must not read as true."""
    if not isinstance(node, DictConfig):
        return
    for key, kind in EXPORT_SWITCHES.items():
        if key in node and not isinstance(node[key], kind):
            raise ConfigError(f"export.{key}={show(node[key])}: expected true or false.", fix=f"export.{key}=false")
    for key in ("register_as", "source"):
        value = node.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"export.{key}={show(value)}: expected a name or null.", fix=f"export.{key}=null")


def require_mandatory_values(cfg: DictConfig) -> None:
    """Keys a config option leaves for the user (`???`, e.g. data=tfrecord's train_files)."""
    missing = sorted(key for key in _missing_keys(cfg) if not key.startswith("hydra."))
    if missing:
        group = missing[0].split(".")[0]
        option = cfg.get(group, {}).get("_target_", "") if isinstance(cfg.get(group), DictConfig) else ""
        chosen = f" ({option.rsplit('.', 1)[-1]} needs {'them' if len(missing) > 1 else 'it'})" if option else ""
        raise ConfigError(f"{', '.join(missing)} {'have' if len(missing) > 1 else 'has'} no value{chosen}.",
                          fix=" ".join(f"{key}=..." for key in missing) + f" (python -m tfx_hydra --cfg job "
                          f"--package {group} shows the options)")


def _missing_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Dotted keys whose value is `???`, without resolving interpolations (OmegaConf.missing_keys
    resolves them, and fails on the first that points at a missing value)."""
    found = []
    for key, value in node.items_ex(resolve=False):
        if OmegaConf.is_missing(node, key):
            found.append(f"{prefix}{key}")
        elif isinstance(value, DictConfig):
            found += _missing_keys(value, f"{prefix}{key}.")
    return found


def validate_section(cfg: DictConfig, name: str, schema: type | None = None) -> Any:
    """One settings section (`trainer`, `tracking`, ...) of `cfg` as its typed dataclass
    (`schema`: a section kept with its own package, e.g. hparams_search)."""
    schema = schema or SECTIONS[name]
    if name not in cfg:
        raise ConfigError(f"the config has no '{name}' section.", fix=f"add '{name}' to the defaults list")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), cfg[name])
        return OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except ConfigKeyError as err:
        key = f"{name}.{err.full_key}" if err.full_key else name
        raise ConfigError(
            f"unknown key '{key}'. Valid keys in '{name}': {', '.join(schema.__dataclass_fields__)}.",
            fix=f"check the spelling of '{key}'",
        ) from None
    except ValidationError as err:
        field_key = str(err.full_key).split("[")[0]  # a bad list element: report the list
        key = f"{name}.{field_key}"
        expected = _expected_type(schema, str(err.full_key))
        raise ConfigError(
            f"{key} got {err.value!r}, which has the wrong type: expected {expected}.",
            fix=f"{key}={_example(schema, str(err.full_key))}",
        ) from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"invalid '{name}' section: {err.msg}") from None


def _expected_type(schema: type, full_key: str) -> str:
    """Say in words what type the schema declares for `full_key`."""
    from omegaconf import BooleanNode, FloatNode, IntegerNode, ListConfig, StringNode

    if "[" in full_key:  # an element of a list: name the list's element type
        element_type = getattr(_field_type(schema, full_key.split("[")[0]), "__args__", (None,))[0]
        names = {int: "a list of integers", str: "a list of strings", float: "a list of numbers"}
        return names.get(element_type, "a list")
    node: Any = OmegaConf.structured(schema)
    for part in full_key.split("."):
        node = node._get_node(part)
    meanings = ((BooleanNode, "true or false"), (IntegerNode, "an integer"), (FloatNode, "a number"),
                (StringNode, "a string"), (ListConfig, "a list"))
    return next((meaning for kind, meaning in meanings if isinstance(node, kind)), "a value of another type")


def _field_type(schema: type, dotted: str) -> Any:
    """The (unwrapped Optional) annotation of a possibly nested dataclass field."""
    import typing

    hint: Any = schema
    for part in dotted.split("."):
        hint = typing.get_type_hints(hint)[part]
        args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
        if getattr(hint, "__origin__", None) is typing.Union and len(args) == 1:
            hint = args[0]
    return hint


def _example(schema: type, full_key: str) -> str:
    if "[" in full_key:
        return "[0]"
    node: Any = OmegaConf.structured(schema)
    return show(OmegaConf.select(node, full_key) if full_key else None)
