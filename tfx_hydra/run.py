"""run: one experiment, as the steps ARCHITECTURE.md lists, each a small function.

    0. preflight   validate settings, check paths and the tracking store (no TensorFlow yet)
    1. hardware    devices, profile, memory growth, threads, seeds    -> HardwareInfo
    2. precision   the Keras dtype policy (auto: the profile's)
    3. strategy    the tf.distribute strategy (auto chooses from HardwareInfo) -> BatchPlan
    4. data        train / validation / test tf.data pipelines        -> Datasets
    5. model       built and compiled inside strategy.scope()
    6. train       model.fit, one batched MLflow write and one backup per epoch
    7. evaluate    the held-out test split
    8. export      each selected exporter writes and verifies its artifact

Tracking wraps steps 1-8: the MLflow run starts first and ends FINISHED, FAILED or
KILLED. Each step takes what earlier steps returned; nothing reaches into a global.
TensorFlow is imported by the steps that need it, never at module level, so preflight
errors come back in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from tfx_hydra import console, sweep, tracking
from tfx_hydra.errors import ConfigError, DataError, ExportError, TfxHydraError, TrainingError
from tfx_hydra.metrics import FINETUNE_PHASE, TEST, TRAIN_PHASE, end_of_run, end_of_run_names, phase_timing
from tfx_hydra.schemas import Settings, SweepConfig, TrainerConfig, validate
from tfx_hydra.models import require_backbone
from tfx_hydra.strategy import is_chief


@dataclass
class BatchPlan:
    """How the global batch splits over replicas, and how many steps run per tf.function call."""

    global_size: int
    replicas: int
    steps_per_execution: int

    @property
    def per_replica(self) -> float:
        return self.global_size / self.replicas


def run(cfg: DictConfig) -> float:
    """Run the experiment `cfg` describes; return the sweep objective (`sweep.metric`)."""
    settings = preflight(cfg)
    if cfg.mode == "evaluate":
        return evaluate_export(cfg, settings)
    launch_dir, output_dir = cfg.paths.launch_dir, cfg.paths.output_dir
    chief = is_chief(cfg.strategy.get("_target_"), cfg.strategy.get("cluster", "tf_config"))
    track = settings.tracking if chief else dataclasses.replace(settings.tracking, enabled=False)
    job = sweep.current_job()
    if job is not None:  # a re-run of an interrupted sweep: a job that already finished is not run again
        finished = tracking.finished_sweep_job(track, launch_dir, resume_key(cfg), job.parent_run_id)
        if finished is not None and sweep.OBJECTIVE_METRIC in finished.data.metrics:
            console.info(f"sweep job {job.num} already finished as MLflow run {finished.info.run_id}: skipped")
            return finished.data.metrics[sweep.OBJECTIVE_METRIC]
    with tracking.tracked_run(track, launch_dir, tags=launch_tags(cfg), resume_key=resume_key(cfg),
                              sweep_job=job,
                              offline_dir=os.path.join(output_dir, tracking.OFFLINE_DIR)) as tracker:
        record_launch(tracker, cfg, output_dir, launch_dir)

        from tfx_hydra.hardware import setup_hardware  # first TensorFlow import of the run
        from tfx_hydra.precision import resolve_policy, set_precision

        hardware = setup_hardware(settings.hardware, settings.seed, settings.trainer.deterministic)
        policy, precision_warnings = resolve_policy(settings.precision.policy, hardware)
        set_precision(policy)
        strategy = build(cfg.strategy, "strategy", hardware=hardware)
        plan = plan_batches(settings.trainer, hardware, strategy)
        record_setup(tracker, hardware, policy, strategy, plan, precision_warnings)

        datasets = build(cfg.data, "data", batch_size=plan.global_size)
        with strategy.scope():  # variables (model and optimizer) live where the strategy puts them
            model = build(cfg.model, "model")
            compile_model(model, cfg.optimizer, settings, policy, hardware, plan, tracker)
        if settings.trainer.finetune_epochs:  # said now, not after the first phase's training
            require_backbone(model)
        record_model(tracker, model, output_dir)

        backup_dir = choose_backup_dir(tracker, output_dir, chief)
        tensorboard_dir = os.path.join(output_dir, "tensorboard") if chief else None
        history = None
        if not finetuning_backup_exists(backup_dir, settings.trainer):  # else phase one finished before a crash
            history = train(model, datasets, settings.trainer, tracker, plan, backup_dir, tensorboard_dir)
        if settings.trainer.finetune_epochs:
            with strategy.scope():
                start_finetuning(model, cfg.optimizer, settings, policy, hardware, plan, tracker)
            history = merge_histories(history, train(model, datasets, settings.trainer, tracker, plan,
                                                     os.path.join(backup_dir, FINETUNE_BACKUP), tensorboard_dir,
                                                     phase=FINETUNE_PHASE))
        remove_backup(backup_dir, chief)
        record_tensorboard(tracker, tensorboard_dir)
        metrics = evaluate(model, datasets, history, tracker)
        record_plots(model, datasets, history, tracker, output_dir)
        exports = export_model(model, datasets, cfg.export, tracker, chief)
        objective = sweep_objective(metrics, settings.sweep)
        tracker.log_metrics({sweep.OBJECTIVE_METRIC: objective})

    console.print_summary(metrics, tracker.run_id, exports, tracker.ui_command, output_dir, weights_sha256(model))
    return objective


# --- 0. preflight --------------------------------------------------------------------------

def preflight(cfg: DictConfig) -> Settings:
    """Everything that can be checked without TensorFlow, checked before it is imported."""
    settings = validate(cfg)
    if cfg.mode == "train":
        check_sweep_metric(settings)
        check_exporters(cfg.export)
    check_data_files(cfg.data)
    if settings.tracking.enabled:
        uri = tracking.resolve_tracking_uri(settings.tracking, cfg.paths.launch_dir)
        tracking.check_store_reachable(uri, settings.tracking.connect_timeout)
    return settings


def check_data_files(data: DictConfig) -> None:
    """The files a data source reads, and the options every source shares, checked before TensorFlow
    loads: a typo costs half a second, not ten."""
    from tfx_hydra.data.files import expand_globs
    from tfx_hydra.data.pipeline import PipelineOptions

    shared = {key: data[key] for key in PipelineOptions.__dataclass_fields__
              if key in data and key not in ("batch_size", "seed")}
    PipelineOptions(batch_size=1, seed=0, **shared)  # ranges and choices: data.shard_policy, prefetch, limit, ...

    for key in ("path", "directory", "test_directory"):
        value = data.get(key)
        if value and not os.path.exists(value):
            raise DataError(f"data.{key}={value} does not exist.", fix=f"data.{key}=/abs/path/to/the/data")
    for key in ("train_files", "validation_files", "test_files"):
        value = data.get(key)
        if value:
            expand_globs(f"data.{key}", OmegaConf.to_object(value) if OmegaConf.is_list(value) else value)
    cache = data.get("cache")
    if isinstance(cache, str) and cache != "memory":  # a cache file: its folder must be there to write in
        require_writable_folder("data.cache", cache, os.path.dirname(os.path.abspath(cache)), create=False)


def check_exporters(export_cfg: DictConfig | None) -> None:
    """Each selected exporter built now, from its settings alone (no TensorFlow): a typo in an
    export value fails before training, not after the last epoch. Its folder must be creatable."""
    for name, node in selected_exporters(export_cfg).items():
        _instantiate(node, f"export.{name}")
        if node.get("export_dir"):
            require_writable_folder(f"export.{name}.export_dir", node.export_dir, node.export_dir, create=True)


def selected_exporters(export_cfg: DictConfig | None) -> dict[str, DictConfig]:
    """The exporters `export=[...]` selected: the entries of `export` with a `_target_`."""
    return {name: node for name, node in (export_cfg or {}).items()
            if isinstance(node, DictConfig) and "_target_" in node}


def require_writable_folder(key: str, value: str, folder: str, create: bool) -> None:
    """`folder` (where `key`=`value` writes) exists and is writable, or (create=True) its nearest
    existing parent is a writable folder."""
    path = os.path.abspath(os.path.expanduser(folder))
    existing = path
    while create and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if os.path.exists(existing) else "does not exist"
        raise ConfigError(f"{key}={value} cannot be written: {existing} {what}.", fix=f"{key}=<a writable folder>")
    if not os.access(existing, os.W_OK):
        raise ConfigError(f"{key}={value} cannot be written: {existing} is not writable.",
                          fix=f"{key}=<a writable folder>")


def check_sweep_metric(settings: Settings) -> None:
    """sweep.metric must be something the run will report: found out after training, the run would be lost."""
    known = end_of_run_names(settings.trainer)
    if settings.sweep.metric not in known:
        raise ConfigError(f"sweep.metric={settings.sweep.metric} is not a metric this run logs "
                          f"(trainer.metrics={list(settings.trainer.metrics)}).",
                          fix=f"one of: {', '.join(known)}; or add the metric to trainer.metrics")


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with our errors passed through and bad arguments named by key."""
    console.info(f"{key}: {node.get('_target_')}")
    return _instantiate(node, key, **kwargs)


def _instantiate(node: DictConfig, key: str, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, TfxHydraError):
            raise cause from None
        if isinstance(cause, (TypeError, ValueError)) or cause is None:  # a bad argument or value, bad _target_
            raise ConfigError(f"cannot build '{key}' from its config: {cause or err}",
                              fix=f"check the keys under '{key}' (python -m tfx_hydra --cfg job --package {key})"
                              ) from None
        raise


def resume_key(cfg: DictConfig) -> str:
    """A fingerprint of the config as written (interpolations unresolved, so the run's own
    output folder does not enter it): the same command gives the same key."""
    container = OmegaConf.to_container(cfg, resolve=False)
    container.pop("hydra", None)
    return hashlib.sha256(json.dumps(container, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- tracking records ---------------------------------------------------------------------

def launch_tags(cfg: DictConfig) -> dict[str, str]:
    """Tags known before anything runs: how to launch this exact run again."""
    overrides = _hydra_overrides()
    command = " ".join(["python -m tfx_hydra", *(shlex.quote(o) for o in overrides)])
    return {
        "hydra.overrides": " ".join(overrides),
        "command": command,
        "hardware.requested": cfg.hardware.name,
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

    if tracker.resumed_backup_dir:
        console.info(f"resuming MLflow run {tracker.run_id} from its backup in {tracker.resumed_backup_dir}")
    else:  # params are write-once in MLflow: a resumed run keeps those of its first attempt
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
    tracking.mask_files(output_dir)  # credentials never reach the saved configs (nor MLflow)
    tracker.log_artifact(os.path.join(output_dir, "config_resolved.yaml"))
    hydra_dir = os.path.join(output_dir, ".hydra")
    if os.path.isdir(hydra_dir):
        tracking.mask_files(hydra_dir)  # Hydra's own copies: config, overrides, hydra.yaml
        tracker.log_artifacts(hydra_dir, ".hydra")
    environment_dir = os.path.join(output_dir, "environment")
    os.makedirs(environment_dir, exist_ok=True)
    with open(os.path.join(environment_dir, "packages.txt"), "w", encoding="utf-8") as packages:
        packages.write(installed_packages())
    if git.dirty:
        with open(os.path.join(environment_dir, "git.diff"), "w", encoding="utf-8") as diff:
            diff.write(git.diff)
    tracker.log_artifacts(environment_dir, "environment")


def record_setup(tracker, hardware, policy: str, strategy, plan: BatchPlan, precision_warnings: list[str]) -> None:
    """What the hardware, precision and strategy steps chose (and why), plus the software environment."""
    from tfx_hydra.environment import collect_environment
    from tfx_hydra.hardware import describe_gpus

    console.info(f"hardware: {describe_gpus(hardware.gpus)}; profile {hardware.profile} ({hardware.reason})")
    console.info(f"precision {policy}; {type(strategy).__name__} with {plan.replicas} replica(s); "
                 f"global batch {plan.global_size} ({plan.per_replica:g} per replica); "
                 f"steps_per_execution {plan.steps_per_execution}")
    if hardware.mismatch:
        console.warn(f"{hardware.mismatch} Carrying on with the {hardware.profile} profile's settings on what is "
                     "here (hardware.strict=true makes this an error).")
    if plan.global_size % plan.replicas:
        console.warn(f"trainer.batch_size={plan.global_size} does not divide over {plan.replicas} replicas: "
                     "the replicas get uneven batches.")
    for warning in precision_warnings:
        console.warn(warning)
    tags = {"hardware.profile": hardware.profile, "hardware.profile_reason": hardware.reason,
            "hardware.devices": describe_gpus(hardware.gpus), "hardware.mismatch": hardware.mismatch or "none",
            "precision.policy": policy, "precision.warning": " ".join(precision_warnings) or "none",
            "strategy": type(strategy).__name__, "strategy.replicas": plan.replicas,
            "batch.global": plan.global_size, "batch.per_replica": f"{plan.per_replica:g}",
            "steps_per_execution": plan.steps_per_execution}
    tracker.set_tags(tags | collect_environment(hardware))


# --- 3. strategy: how batches split ----------------------------------------------------------

def plan_batches(trainer: TrainerConfig, hardware, strategy) -> BatchPlan:
    """trainer.batch_size is the global batch; auto takes the profile's per-replica batch x replicas."""
    from tfx_hydra.keras_compat import MULTI_REPLICA_ISSUE, MULTI_REPLICA_MAX_STEPS_PER_EXECUTION

    replicas = strategy.num_replicas_in_sync
    global_size = (hardware.per_replica_batch_size * replicas if trainer.batch_size == "auto"
                   else trainer.batch_size)
    steps = (hardware.steps_per_execution if trainer.steps_per_execution == "auto"
             else trainer.steps_per_execution)
    if replicas > 1 and steps > MULTI_REPLICA_MAX_STEPS_PER_EXECUTION:
        if trainer.steps_per_execution != "auto":
            console.warn(f"trainer.steps_per_execution={steps} fails in Keras with {replicas} replicas "
                         f"({MULTI_REPLICA_ISSUE}): using {MULTI_REPLICA_MAX_STEPS_PER_EXECUTION} (same updates).")
        steps = MULTI_REPLICA_MAX_STEPS_PER_EXECUTION
    return BatchPlan(global_size=global_size, replicas=replicas, steps_per_execution=steps)


# --- 5. model ------------------------------------------------------------------------------

def compile_model(model, optimizer_cfg: DictConfig, settings: Settings, policy: str, hardware, plan: BatchPlan,
                  tracker, learning_rate: float | None = None) -> None:
    """Compile with the configured optimizer (scaled, accumulated, loss-scaled as asked), loss,
    metrics, XLA and steps_per_execution; say so when XLA was asked for and Keras turned it off."""
    import keras

    from tfx_hydra.precision import apply_loss_scaling

    trainer, precision = settings.trainer, settings.precision
    optimizer_args: dict[str, Any] = {}
    if learning_rate is None:
        configured = optimizer_cfg.get("learning_rate")
        if isinstance(configured, int) and not isinstance(configured, bool):
            optimizer_args["learning_rate"] = float(configured)  # Keras rejects an int (optimizer.learning_rate=1)
    else:  # the fine-tuning phase's
        optimizer_args["learning_rate"] = float(learning_rate)
    if trainer.scale_lr_with_replicas and plan.replicas > 1:
        if optimizer_cfg.get("learning_rate") is None:
            raise ConfigError("trainer.scale_lr_with_replicas=true needs optimizer.learning_rate to scale.",
                              fix="optimizer.learning_rate=0.001, or trainer.scale_lr_with_replicas=false")
        optimizer_args["learning_rate"] = optimizer_args.get("learning_rate", optimizer_cfg.learning_rate) * plan.replicas
    if trainer.grad_accum_steps > 1:
        optimizer_args["gradient_accumulation_steps"] = trainer.grad_accum_steps
    optimizer = build(optimizer_cfg, "optimizer", **optimizer_args)
    optimizer, auto_scale_loss = apply_loss_scaling(optimizer, policy, precision.loss_scale)
    _require_keras_name("trainer.loss", trainer.loss, keras.losses, "sparse_categorical_crossentropy")
    for metric in trainer.metrics:  # Keras would only fail at the first batch of fit
        if metric not in KERAS_COMPILE_METRIC_ALIASES:
            _require_keras_name("trainer.metrics", metric, keras.metrics, "[accuracy]")
    wanted_xla = hardware.xla if trainer.jit_compile == "auto" else trainer.jit_compile
    model.compile(optimizer=optimizer, loss=trainer.loss, metrics=list(trainer.metrics), jit_compile=wanted_xla,
                  steps_per_execution=plan.steps_per_execution, auto_scale_loss=auto_scale_loss)
    xla_note = "none"
    if wanted_xla and not model.jit_compile:
        asked = ("trainer.jit_compile=true" if trainer.jit_compile is True
                 else f"the {hardware.profile} profile (trainer.jit_compile=auto)")
        reason = ("op determinism is on (trainer.deterministic=true), and XLA does not support it"
                  if trainer.deterministic else "a layer of the model does not support XLA")
        xla_note = f"XLA was asked for by {asked} but is off: {reason}."
        console.warn(xla_note)
    lr_tag = "optimizer.learning_rate" if learning_rate is None else "finetune.learning_rate"
    tracker.set_tags({"xla": "on" if model.jit_compile else "off", "xla.note": xla_note,
                      lr_tag: float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
                      "optimizer.gradient_accumulation_steps": trainer.grad_accum_steps,
                      "optimizer.loss_scale": type(model.optimizer).__name__ == "LossScaleOptimizer"})


# Names model.compile resolves itself (from the loss) that keras.metrics.get does not know.
KERAS_COMPILE_METRIC_ALIASES = ("acc", "crossentropy", "ce")


def _require_keras_name(key: str, name: str, module, example: str) -> None:
    try:
        module.get(name)
    except ValueError:
        raise ConfigError(f"{key}: Keras does not know '{name}'.",
                          fix=f"{key}={example} (or another name from {module.__name__})") from None


def record_model(tracker, model, output_dir: str) -> None:
    """The model summary (model/summary.txt in the output dir, `model_summary/` in MLflow) and its
    parameter counts as tags: what a reader compares first between runs."""
    folder = os.path.join(output_dir, "model")
    os.makedirs(folder, exist_ok=True)
    lines: list[str] = []
    model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line), line_length=110, expand_nested=True)
    with open(os.path.join(folder, "summary.txt"), "w", encoding="utf-8") as summary:
        summary.write("\n".join(lines) + "\n")
    trainable, frozen = count_params(model.trainable_weights), count_params(model.non_trainable_weights)
    tracker.set_tags({"model.params.total": trainable + frozen, "model.params.trainable": trainable,
                      "model.params.non_trainable": frozen})
    tracker.log_artifacts(folder, "model_summary")


def count_params(weights) -> int:
    import numpy as np

    return int(sum(np.prod(w.shape) for w in weights))


# --- 6. train ------------------------------------------------------------------------------

def choose_backup_dir(tracker, output_dir: str, chief: bool) -> str:
    """Where BackupAndRestore keeps the per-epoch backup: the interrupted run's when resuming,
    this run's output dir otherwise; a throwaway folder on non-chief workers."""
    if not chief:
        return tempfile.mkdtemp(prefix="tfx_hydra-worker-backup-")
    backup_dir = tracker.resumed_backup_dir or os.path.join(output_dir, "backup")
    tracker.set_tags({tracking.BACKUP_TAG: backup_dir})
    return backup_dir


def train(model, datasets, trainer: TrainerConfig, tracker, plan: BatchPlan | None = None,
          backup_dir: str | None = None, tensorboard_dir: str | None = None, phase: str = TRAIN_PHASE):
    """model.fit with per-epoch timing, tracking, backup, NaN stop, TensorBoard and optional early
    stopping. phase="finetune" runs trainer.finetune_epochs more epochs, numbered on from the first phase."""
    import keras
    import tensorflow as tf

    first_epoch, last_epoch = ((trainer.epochs, trainer.epochs + trainer.finetune_epochs) if phase == FINETUNE_PHASE
                               else (0, trainer.epochs))
    from tfx_hydra.callbacks import EpochBackup, NonFiniteGuard

    clock = console.EpochClock(datasets.num_train, trainer.epochs + trainer.finetune_epochs, trainer.verbose)
    steps = plan.steps_per_execution if plan else 1
    callbacks = [  # at an epoch's end, in this order: a diverged epoch is neither shown, logged nor backed up
        NonFiniteGuard(steps, backup_dir if trainer.backup else None),
        keras.callbacks.LambdaCallback(on_epoch_begin=clock.start, on_epoch_end=clock.stop),
    ]
    if trainer.tensorboard and tensorboard_dir:
        callbacks.append(tensorboard_callback(trainer, tensorboard_dir))
    stopping = trainer.early_stopping
    if stopping.enabled:
        callbacks.append(keras.callbacks.EarlyStopping(monitor=stopping.monitor, patience=stopping.patience,
                                                       mode=stopping.mode,
                                                       restore_best_weights=stopping.restore_best_weights))
    if trainer.backup and backup_dir:  # an epoch is backed up once everything but tracking has seen it
        finetuning = phase == FINETUNE_PHASE
        callbacks.append(EpochBackup(backup_dir, last_epoch, catch_up=tracker.log_missing_epochs,
                                     epochs_key="trainer.finetune_epochs" if finetuning else "trainer.epochs",
                                     epochs_before=first_epoch))
    # last: MLflow gets an epoch once it is backed up (a kill in between is caught up on resume)
    callbacks.append(keras.callbacks.LambdaCallback(on_epoch_end=tracker.log_epoch))
    started = time.perf_counter()
    try:
        history = model.fit(datasets.train, validation_data=datasets.validation, epochs=last_epoch,
                            initial_epoch=first_epoch, callbacks=callbacks, shuffle=False,
                            verbose=0)  # the pipeline shuffles, seeded
    except tf.errors.ResourceExhaustedError as err:
        raise out_of_memory(err, trainer, plan) from None
    seconds = time.perf_counter() - started
    losses = history.history.get("loss", [])  # finite: NonFiniteGuard saw each epoch's running loss
    history.timings = {}  # the phase's wall time and throughput: end-of-run metrics, logged once
    if losses:
        seconds_name, throughput_name = phase_timing(phase)
        history.timings = {seconds_name: seconds, throughput_name: datasets.num_train * len(losses) / seconds}
        tracker.log_metrics(history.timings)
    return history


def tensorboard_callback(trainer: TrainerConfig, log_dir: str):
    """Keras' TensorBoard: epoch scalars, weight histograms every `tensorboard_histogram_freq`
    epochs, the graph, and a profile of `tensorboard_profile_batches` ([first, last]) if asked.

    Keras 3 writes only the conceptual graph (the model config; its docs: write_graph "not
    supported at this time"), so the op-level graph of the forward pass is traced and written
    here once, for TensorBoard's Graphs tab.
    """
    import keras
    import tensorflow as tf

    class TensorBoardWithGraph(keras.callbacks.TensorBoard):
        def on_train_begin(self, logs=None):
            super().on_train_begin(logs)
            forward = tf.function(lambda inputs: self.model(inputs, training=False))
            spec = tf.TensorSpec((None, *self.model.inputs[0].shape[1:]), tf.float32)
            with self._train_writer.as_default():
                tf.summary.graph(forward.get_concrete_function(spec).graph)

    profile = trainer.tensorboard_profile_batches
    return TensorBoardWithGraph(log_dir=log_dir, histogram_freq=trainer.tensorboard_histogram_freq,
                                write_graph=True, update_freq="epoch", profile_batch=tuple(profile) if profile else 0)


def record_tensorboard(tracker, tensorboard_dir: str | None) -> None:
    """The TensorBoard logs go to MLflow's `tensorboard/`: `tensorboard --logdir <output dir>/tensorboard`
    reads them locally, and they stay with the run when the output dir is gone."""
    if tensorboard_dir and os.path.isdir(tensorboard_dir):
        tracker.log_artifacts(tensorboard_dir, "tensorboard")


# --- 6b. fine-tune (transfer learning) --------------------------------------------------------

FINETUNE_BACKUP = "finetune"  # phase two's backup, inside the run's backup folder


def finetuning_backup_exists(backup_dir: str, trainer: TrainerConfig) -> bool:
    """A run killed in its fine-tuning phase resumes there: phase one's result is in that backup."""
    resuming = bool(trainer.finetune_epochs and trainer.backup and
                    os.path.isdir(os.path.join(backup_dir, FINETUNE_BACKUP)))
    if resuming:
        console.info("resuming in the fine-tuning phase: the head-training phase finished before the interruption")
    return resuming


def start_finetuning(model, optimizer_cfg: DictConfig, settings: Settings, policy: str, hardware,
                     plan: BatchPlan, tracker) -> None:
    """Unfreeze the backbone (or its top trainer.finetune_layers layers) and recompile at
    trainer.finetune_lr (default: a tenth of the first phase's): a fresh optimizer, so the
    large first-phase steps do not carry momentum into the pretrained weights."""
    import keras

    from tfx_hydra.models import unfreeze_backbone

    trainer = settings.trainer
    trainable = unfreeze_backbone(model, trainer.finetune_layers)
    base_lr = optimizer_cfg.get("learning_rate")  # unscaled; compile_model scales it with the replicas again
    if base_lr is None:  # the optimizer's own default
        base_lr = float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
    learning_rate = trainer.finetune_lr if trainer.finetune_lr is not None else float(base_lr) / 10
    compile_model(model, optimizer_cfg, settings, policy, hardware, plan, tracker, learning_rate=learning_rate)
    console.info(f"fine-tuning: backbone unfrozen ({trainable} trainable weights), learning rate {learning_rate:g}, "
                 f"{trainer.finetune_epochs} more epochs")
    tracker.set_tags({"finetune.layers": trainer.finetune_layers or "all",
                      "model.params.trainable_finetune": count_params(model.trainable_weights)})


def merge_histories(first, second):
    """One history across both phases (the first is None when resuming in phase two)."""
    if first is None:
        return second
    for key, values in second.history.items():
        first.history.setdefault(key, []).extend(values)
    first.epoch.extend(second.epoch)
    first.timings = {**getattr(first, "timings", {}), **getattr(second, "timings", {})}
    return first


def remove_backup(backup_dir: str, chief: bool) -> None:
    """After success: Keras removed each phase's backup; drop the folder they lived in."""
    if not chief:
        shutil.rmtree(backup_dir, ignore_errors=True)
    elif os.path.isdir(backup_dir) and not os.listdir(backup_dir):
        os.rmdir(backup_dir)


def out_of_memory(err, trainer: TrainerConfig, plan: BatchPlan | None) -> TrainingError:
    """The device ran out of memory: say which knobs trade memory for speed."""
    batch = plan.global_size if plan else trainer.batch_size
    per_replica = f" ({plan.per_replica:g} per replica)" if plan else ""
    smaller = max(1, int(batch) // 2)
    return TrainingError(
        f"the device ran out of memory at trainer.batch_size={batch}{per_replica}: {err.message.splitlines()[0]}",
        fix=f"trainer.batch_size={smaller} trainer.grad_accum_steps={trainer.grad_accum_steps * 2} (same "
        "effective batch in less memory), hardware.memory_growth=true (share the GPU), or precision=mixed/bf16",
    )


# --- 7. evaluate ---------------------------------------------------------------------------

def evaluate(model, datasets, history, tracker) -> dict[str, float]:
    """The run's results (metrics.end_of_run): the last epoch's metrics, each phase's timing, and
    the test split's, logged as test_*."""
    test = model.evaluate(datasets.test, return_dict=True, verbose=0)
    last_epoch = {k: float(v[-1]) for k, v in history.history.items() if v}
    results = end_of_run(last_epoch, getattr(history, "timings", {}), test)
    tracker.log_metrics({k: v for k, v in results.items() if k.startswith(TEST)})
    return results


def record_plots(model, datasets, history, tracker, output_dir: str) -> None:
    """Training curves and the test split's confusion matrix, as PNGs (and the matrix as CSV) in
    the run's output dir and MLflow's `plots/`: what a reader of the run looks at first."""
    if tracker.run_id is None:  # tracking off, or a non-chief worker
        return
    import numpy as np

    from tfx_hydra.plots import plot_confusion_matrix, plot_training_curves

    folder = os.path.join(output_dir, "plots")
    os.makedirs(folder, exist_ok=True)
    plot_training_curves(history.history, os.path.join(folder, "training_curves.png"))
    matrix = confusion_matrix(model, datasets.test, datasets.spec.num_classes)
    np.savetxt(os.path.join(folder, "confusion_matrix.csv"), matrix, fmt="%d", delimiter=",")
    plot_confusion_matrix(matrix.tolist(), os.path.join(folder, "confusion_matrix.png"))
    tracker.log_artifacts(folder, "plots")


def confusion_matrix(model, dataset, num_classes: int):
    """counts[true, predicted] over `dataset` (batches of inputs and integer labels)."""
    import numpy as np

    counts = np.zeros((num_classes, num_classes), dtype=np.int64)
    for inputs, labels in dataset:
        predicted = np.argmax(np.asarray(model(inputs, training=False)), axis=-1)
        np.add.at(counts, (np.asarray(labels).reshape(-1).astype(int), predicted.reshape(-1)), 1)
    return counts


def weights_sha256(model) -> str:
    """A fingerprint of the trained weights: equal on every worker of a synchronous run."""
    import numpy as np

    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()[:16]


# --- 8. export -----------------------------------------------------------------------------

def export_model(model, datasets, export_cfg: DictConfig, tracker, chief: bool = True) -> list:
    """Run every selected exporter; log each artifact and its verification figures.

    A failing exporter never loses the training run: its error is recorded (tag
    `export.<name>.error`), the other exporters still run, and the run fails only with
    export.strict=true. Non-chief workers export too (saving a distributed model may need
    every worker), into a throwaway folder that is deleted afterwards.
    """
    results, failures = [], {}
    for name, node in selected_exporters(export_cfg).items():
        if not chief:
            with tempfile.TemporaryDirectory(prefix="tfx_hydra-worker-export-") as scratch:  # gone on every exit
                build(node, f"export.{name}", export_dir=scratch)(model, datasets)
            continue
        try:
            result = build(node, f"export.{name}")(model, datasets)
        except Exception as err:  # recorded, not fatal: the trained model and the other exports stay
            if tracking.full_disk_path(err) is not None:  # ...unless the disk is full: the next would fail too
                raise
            failures[name] = tracking.describe_error(err)
            console.warn(f"export {name} failed: {failures[name]}")
            tracker.set_tags({f"export.{name}.error": failures[name]})
            continue
        if os.path.isfile(result.path):
            tracker.log_artifact(result.path, f"export/{name}")
        else:
            tracker.log_artifacts(result.path, f"export/{name}")
        tracker.log_metrics(result.metrics)
        tracker.set_tags({f"export.{name}.path": result.path})
        results.append(result)
    if chief:
        tracker.set_tags({"model.weights_sha256": weights_sha256(model), "export.failed": len(failures)})
        if (export_cfg or {}).get("mlflow_model", True):
            inputs, _ = next(iter(datasets.validation))
            tracker.log_model(model, inputs[:5], register_as=(export_cfg or {}).get("register_as"))
    if failures and (export_cfg or {}).get("strict", False):
        raise ExportError(f"{len(failures)} export(s) failed: " + "; ".join(f"{k}: {v}" for k, v in failures.items()),
                          fix="fix the exporter's settings, or drop export.strict=true to keep the run on failure")
    return results


def evaluate_export(cfg: DictConfig, settings: Settings) -> float:
    """mode=evaluate: run the configured data's test split through an exported SavedModel
    (export.source: a folder, or runs:/<run id> for a tracked run's export) and log its metrics:
    the check before shipping a model."""
    from tfx_hydra.export import evaluate_saved_model, resolve_export_source

    source = cfg.export.get("source")
    if not source:
        raise ConfigError("mode=evaluate needs the model to evaluate.",
                          fix="export.source=/path/to/export/mlp/1 (or runs:/<run id>)")
    tags = launch_tags(cfg) | {"mode": "evaluate", "export.source": source}
    with tracking.tracked_run(settings.tracking, cfg.paths.launch_dir, tags=tags,
                              offline_dir=os.path.join(cfg.paths.output_dir, tracking.OFFLINE_DIR)) as tracker:
        tracker.log_config(cfg)
        path = resolve_export_source(source, settings.tracking, cfg.paths.launch_dir,  # before TensorFlow: fails fast
                                     download_dir=os.path.join(cfg.paths.output_dir, "export_source"))
        from tfx_hydra.hardware import setup_hardware

        setup_hardware(settings.hardware, settings.seed)
        datasets = build(cfg.data, "data", batch_size=settings.trainer.batch_size
                         if settings.trainer.batch_size != "auto" else 256)
        metrics = evaluate_saved_model(path, datasets)
        tracker.set_tags({"export.source.path": path})
        tracker.log_metrics(metrics)
    console.print_summary(metrics, tracker.run_id, [], tracker.ui_command, cfg.paths.output_dir, "n/a (evaluate)")
    return metrics.get(settings.sweep.metric, metrics["test_accuracy"])


def sweep_objective(metrics: dict[str, float], sweep: SweepConfig) -> float:
    """The value Hydra's sweepers optimise: `sweep.metric` from the finished run."""
    if sweep.metric not in metrics:
        raise ConfigError(f"sweep.metric={sweep.metric} is not a metric this run produced.",
                          fix=f"one of: {', '.join(sorted(metrics))}")
    return metrics[sweep.metric]
