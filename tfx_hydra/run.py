"""run: one experiment, as the steps DESIGN.md lists, each a small function.

    0. preflight   validate settings, check paths and the tracking store (no TensorFlow yet)
    1. hardware    devices, memory growth, threads, seeds            -> HardwareInfo
    2. precision   the Keras dtype policy
    3. strategy    the tf.distribute strategy (auto chooses from HardwareInfo)
    4. data        train / validation / test tf.data pipelines       -> Datasets
    5. model       built and compiled inside strategy.scope()
    6. train       model.fit, one batched MLflow write per epoch
    7. evaluate    the held-out test split
    8. export      each selected exporter writes and verifies its artifact

Tracking wraps steps 1-8: the MLflow run starts first and ends FINISHED, FAILED or
KILLED. Each step takes what earlier steps returned; nothing reaches into a global.
TensorFlow is imported by the steps that need it, never at module level, so preflight
errors come back in a fraction of a second.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from tfx_hydra import console, tracking
from tfx_hydra.errors import ConfigError, DataError, TfxHydraError, TrainingError
from tfx_hydra.schemas import Settings, SweepConfig, TrainerConfig, validate


def run(cfg: DictConfig) -> float:
    """Run the experiment `cfg` describes; return the sweep objective (`sweep.metric`)."""
    settings = preflight(cfg)
    launch_dir, output_dir = cfg.paths.launch_dir, cfg.paths.output_dir
    with tracking.tracked_run(settings.tracking, launch_dir, tags=launch_tags(cfg)) as tracker:
        record_launch(tracker, cfg, output_dir, launch_dir)

        from tfx_hydra.hardware import setup_hardware  # first TensorFlow import of the run
        from tfx_hydra.precision import set_precision

        hardware = setup_hardware(settings.hardware, settings.seed)
        policy = set_precision(settings.precision.policy)
        strategy = build(cfg.strategy, "strategy", hardware=hardware)
        record_setup(tracker, hardware, policy, strategy)

        datasets = build(cfg.data, "data")
        with strategy.scope():  # variables (model and optimizer) live where the strategy puts them
            model = build(cfg.model, "model")
            compile_model(model, cfg.optimizer, settings.trainer, hardware)

        history = train(model, datasets, settings.trainer, tracker)
        metrics = evaluate(model, datasets, history, tracker)
        exports = export_model(model, datasets, cfg.export, tracker)
        objective = sweep_objective(metrics, settings.sweep)

    console.print_summary(metrics, tracker.run_id, exports, tracker.ui_command, output_dir)
    return objective


# --- 0. preflight --------------------------------------------------------------------------

def preflight(cfg: DictConfig) -> Settings:
    """Everything that can be checked without TensorFlow, checked before it is imported."""
    settings = validate(cfg)
    data_path = cfg.data.get("path")
    if data_path and not os.path.exists(data_path):
        raise DataError(f"data.path={data_path} does not exist.", fix="data.path=/abs/path/to/the/data")
    if settings.tracking.enabled:
        uri = tracking.resolve_tracking_uri(settings.tracking, cfg.paths.launch_dir)
        tracking.check_store_reachable(uri, settings.tracking.connect_timeout)
    return settings


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with our errors passed through and bad arguments named by key."""
    console.info(f"{key}: {node.get('_target_')}")
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, TfxHydraError):
            raise cause from None
        if isinstance(cause, TypeError) or cause is None:  # unknown/missing argument, bad _target_
            raise ConfigError(f"cannot build '{key}' from its config: {cause or err}",
                              fix=f"check the keys under '{key}' (python -m tfx_hydra --cfg job --package {key})"
                              ) from None
        raise


# --- tracking records ---------------------------------------------------------------------

def launch_tags(cfg: DictConfig) -> dict[str, str]:
    """Tags known before anything runs: how to launch this exact run again."""
    overrides = _hydra_overrides()
    command = " ".join(["python -m tfx_hydra", *(shlex.quote(o) for o in overrides)])
    return {
        "hydra.overrides": " ".join(overrides),
        "command": command,
        "hardware.profile": cfg.hardware.name,
        "precision.policy": cfg.precision.policy,
        "mlflow.note.content": f"Reproduce with `{command}`",
    }


def _hydra_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # called outside a Hydra app (e.g. from Python)
        return []


def record_launch(tracker, cfg: DictConfig, output_dir: str, launch_dir: str) -> None:
    """Config, overrides, git state and packages: recorded before any training."""
    from tfx_hydra.environment import git_state, installed_packages

    tracker.log_config(cfg)
    git = git_state(launch_dir)
    tags = {"git.commit": git.commit or "none (not a git work tree)", "git.dirty": git.dirty,
            "git.branch": git.branch or "none"}
    if git.commit:
        tags["mlflow.source.git.commit"] = git.commit  # shown by the MLflow UI's run page
    tracker.set_tags(tags)
    os.makedirs(output_dir, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.pop("hydra", None)
    OmegaConf.save(OmegaConf.create(resolved), os.path.join(output_dir, "config_resolved.yaml"))
    tracker.log_artifact(os.path.join(output_dir, "config_resolved.yaml"))
    hydra_dir = os.path.join(output_dir, ".hydra")
    if os.path.isdir(hydra_dir):
        tracker.log_artifacts(hydra_dir, ".hydra")
    environment_dir = os.path.join(output_dir, "environment")
    os.makedirs(environment_dir, exist_ok=True)
    with open(os.path.join(environment_dir, "packages.txt"), "w", encoding="utf-8") as packages:
        packages.write(installed_packages())
    if git.dirty:
        with open(os.path.join(environment_dir, "git.diff"), "w", encoding="utf-8") as diff:
            diff.write(git.diff)
    tracker.log_artifacts(environment_dir, "environment")


def record_setup(tracker, hardware, policy: str, strategy) -> None:
    """What the hardware, precision and strategy steps chose, plus the software environment."""
    from tfx_hydra.environment import collect_environment
    from tfx_hydra.hardware import describe_gpus

    console.info(f"hardware: profile {hardware.profile} on {describe_gpus(hardware.gpus)}; "
                 f"precision {policy}; {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)")
    tags = {"hardware.devices": describe_gpus(hardware.gpus), "hardware.mismatch": hardware.mismatch or "none",
            "precision.policy": policy, "strategy": type(strategy).__name__,
            "strategy.replicas": strategy.num_replicas_in_sync}
    if hardware.mismatch:
        console.warn(f"{hardware.mismatch} Carrying on with the {hardware.profile} profile's settings on what is "
                     "here (hardware.strict=true makes this an error).")
    tracker.set_tags(tags | collect_environment(hardware))


# --- 5. model ------------------------------------------------------------------------------

def compile_model(model, optimizer_cfg: DictConfig, trainer: TrainerConfig, hardware) -> None:
    """Compile with the configured optimizer, loss and metrics; XLA per trainer.jit_compile."""
    import keras

    optimizer = build(optimizer_cfg, "optimizer")
    _require_keras_name("trainer.loss", trainer.loss, keras.losses, "sparse_categorical_crossentropy")
    for metric in trainer.metrics:  # Keras would only fail at the first batch of fit
        if metric not in KERAS_COMPILE_METRIC_ALIASES:
            _require_keras_name("trainer.metrics", metric, keras.metrics, "[accuracy]")
    jit_compile = hardware.xla if trainer.jit_compile == "auto" else trainer.jit_compile
    model.compile(optimizer=optimizer, loss=trainer.loss, metrics=list(trainer.metrics),
                  jit_compile=jit_compile, steps_per_execution=trainer.steps_per_execution)


# Names model.compile resolves itself (from the loss) that keras.metrics.get does not know.
KERAS_COMPILE_METRIC_ALIASES = ("acc", "crossentropy", "ce")


def _require_keras_name(key: str, name: str, module, example: str) -> None:
    try:
        module.get(name)
    except ValueError:
        raise ConfigError(f"{key}: Keras does not know '{name}'.",
                          fix=f"{key}={example} (or another name from {module.__name__})") from None


# --- 6. train ------------------------------------------------------------------------------

def train(model, datasets, trainer: TrainerConfig, tracker):
    """model.fit with per-epoch timing, tracking, NaN stop and optional early stopping."""
    import keras

    clock = console.EpochClock(datasets.num_train, trainer.epochs, trainer.verbose)
    callbacks = [
        keras.callbacks.LambdaCallback(on_epoch_begin=clock.start, on_epoch_end=clock.stop),
        keras.callbacks.LambdaCallback(on_epoch_end=tracker.log_epoch),  # after the clock: logs its figures
        keras.callbacks.TerminateOnNaN(),
    ]
    stopping = trainer.early_stopping
    if stopping.enabled:
        callbacks.append(keras.callbacks.EarlyStopping(monitor=stopping.monitor, patience=stopping.patience,
                                                       mode=stopping.mode,
                                                       restore_best_weights=stopping.restore_best_weights))
    started = time.perf_counter()
    history = model.fit(datasets.train, validation_data=datasets.validation, epochs=trainer.epochs,
                        callbacks=callbacks, shuffle=False, verbose=0)  # the pipeline shuffles, seeded
    seconds = time.perf_counter() - started
    losses = history.history.get("loss", [])
    if any(not math.isfinite(v) for v in losses):
        raise TrainingError(
            f"the training loss became {losses[-1]} in epoch {len(losses)}; training stopped.",
            fix="lower optimizer.learning_rate, check the data for NaN/inf, or use precision=fp32",
        )
    epochs_run = len(losses)
    tracker.log_metrics({"train_seconds": seconds,
                         "train_examples_per_sec": datasets.num_train * epochs_run / seconds})
    return history


# --- 7. evaluate ---------------------------------------------------------------------------

def evaluate(model, datasets, history, tracker) -> dict[str, float]:
    """The last epoch's metrics plus the test split's, logged as test_*."""
    test = model.evaluate(datasets.test, return_dict=True, verbose=0)
    test_metrics = {f"test_{k}": float(v) for k, v in test.items()}
    tracker.log_metrics(test_metrics)
    last_epoch = {k: float(v[-1]) for k, v in history.history.items() if v}
    return last_epoch | test_metrics


# --- 8. export -----------------------------------------------------------------------------

def export_model(model, datasets, export_cfg: DictConfig, tracker) -> list:
    """Run every selected exporter; log each artifact and its verification figures."""
    results = []
    for name, node in (export_cfg or {}).items():
        exporter = build(node, f"export.{name}")
        result = exporter(model, datasets)
        tracker.log_artifacts(result.path, f"export/{name}")
        tracker.log_metrics(result.metrics)
        tracker.set_tags({f"export.{name}.path": result.path})
        results.append(result)
    return results


def sweep_objective(metrics: dict[str, float], sweep: SweepConfig) -> float:
    """The value Hydra's sweepers optimise: `sweep.metric` from the finished run."""
    if sweep.metric not in metrics:
        raise ConfigError(f"sweep.metric={sweep.metric} is not a metric this run produced.",
                          fix=f"one of: {', '.join(sorted(metrics))}")
    return metrics[sweep.metric]
