"""fit: compile, fit in phases, evaluate: the steps the trainer package's other modules serve.

    compile_model   the optimizer, loss, metrics, XLA and steps_per_execution, inside the strategy's scope
    fit_phases      head training, then (trainer.finetune_epochs) fine-tuning the unfrozen backbone,
                    each phase one model.fit with its own backup, resumable after any interruption

Keras is imported inside the functions: config validation must not pay for it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Sequence

from omegaconf import DictConfig

from tfx_hydra.console import BARE, NATIVE_LOGGER, native_lines_streamed
from tfx_hydra.errors import TfxHydraError
from tfx_hydra.lr_schedule import describe as describe_schedule
from tfx_hydra.lr_schedule import updates_per_epoch
from tfx_hydra.metrics import FINETUNE_PHASE, TRAIN_PHASE, phase_timing
from tfx_hydra.models import count_params, require_backbone, unfreeze_backbone
from tfx_hydra.optimizer import build_optimizer, finetune_learning_rate, peak_learning_rate
from tfx_hydra.process import stopped_at_a_step
from tfx_hydra.settings.checks import require_interval
from tfx_hydra.settings.compose import choice
from tfx_hydra.settings.schemas import Settings, TrainerConfig
from tfx_hydra.strategy import BatchPlan, Setup
from tfx_hydra.tracking import Tracker
from tfx_hydra.trainer import compiled, kept_weights, trained
from tfx_hydra.trainer.backups import EndsTraining, finetuning_backup_exists, phase_backup, remove_backup
from tfx_hydra.trainer.class_weight import class_weights
from tfx_hydra.trainer.debug import NUMERICS_MARK, judge_overfit, non_finite_op, say_numerics_clean, say_profile
from tfx_hydra.trainer.failures import out_of_memory, raise_if_users
from tfx_hydra.trainer.keras_compat import build_before_first_trace

log = logging.getLogger(__name__)


# --- compile -------------------------------------------------------------------------------

def compile_model(model, optimizer_cfg: DictConfig, settings: Settings, setup: Setup, tracker: Tracker,
                  learning_rate: float | None = None, num_train: int | None = None) -> None:
    """Compile with the configured optimizer (scaled, accumulated, loss-scaled as asked, its rate on
    lr_schedule over the phase's `num_train` examples a epoch), loss, metrics, XLA and steps_per_execution;
    say so when XLA was asked for and Keras turned it off."""
    import keras

    from tfx_hydra.trainer.losses import smoothed

    trainer, hardware = settings.trainer, setup.hardware
    epochs = trainer.finetune_epochs if learning_rate is not None else trainer.epochs
    per_epoch = updates_per_epoch(num_train, setup.plan.global_size, trainer.grad_accum_steps) if num_train else None
    optimizer, auto_scale_loss = build_optimizer(optimizer_cfg, settings, setup.policy, setup.plan.replicas,
                                                 learning_rate, per_epoch, epochs)
    peak = peak_learning_rate(optimizer_cfg, settings, setup.plan.replicas, learning_rate)
    rate = peak if peak is not None else float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    if learning_rate is None:  # the fine-tuning phase says its own rate (start_finetuning)
        log.info(f"optimizer: {choice('optimizer') or type(optimizer).__name__}, learning rate {rate:g}"
                 + describe_schedule(getattr(settings, "lr_schedule", None))
                 + (f", {trainer.grad_accum_steps} batches per update" if trainer.grad_accum_steps > 1 else ""))
    wanted_xla = hardware.xla if trainer.jit_compile == "auto" else trainer.jit_compile
    # a causal LM's metrics are weighted by its padding mask (perplexity over the tokens, not the padding)
    weighted = "weighted_metrics" if settings.task.name == "causal_lm" else "metrics"
    model.compile(optimizer=optimizer, loss=smoothed(compiled.loss(trainer.loss), trainer.label_smoothing),
                  **{weighted: compiled.metrics(trainer.metrics)}, jit_compile=wanted_xla,
                  steps_per_execution=setup.plan.steps_per_execution, auto_scale_loss=auto_scale_loss,
                  run_eagerly=trainer.run_eagerly)
    if trainer.run_eagerly and learning_rate is None:
        log.warning("trainer.run_eagerly=true: every step runs op by op in Python, for stepping through with pdb "
                    "(a breakpoint() in a layer's call() stops there); it is many times slower, and XLA is off.")
    xla_note = "none"
    if wanted_xla and not model.jit_compile:
        asked = ("trainer.jit_compile=true" if trainer.jit_compile is True
                 else f"the {hardware.profile} profile (trainer.jit_compile=auto)")
        reason = ("op determinism is on (trainer.deterministic=true), and XLA does not support it"
                  if trainer.deterministic else "a layer of the model does not support XLA")
        xla_note = f"XLA was asked for by {asked} but is off: {reason}."
        log.warning(xla_note)
    lr_tag = "optimizer.learning_rate" if learning_rate is None else "finetune.learning_rate"
    tracker.set_tags({"xla": "on" if model.jit_compile else "off", "xla.note": xla_note,
                      lr_tag: rate,
                      "optimizer.gradient_accumulation_steps": trainer.grad_accum_steps,
                      "optimizer.ema": bool(getattr(optimizer, "use_ema", False)),
                      "optimizer.loss_scale": type(model.optimizer).__name__ == "LossScaleOptimizer"})


# --- fit, in phases ---------------------------------------------------------------------------

def fit_phases(model, datasets, optimizer_cfg: DictConfig, settings: Settings, setup: Setup, tracker: Tracker,
               output_dir: str, backup_dir: str, handed: Sequence = ()):
    """Train the head (trainer.epochs), then fine-tune (trainer.finetune_epochs); one history of both.

    Each phase backs up every epoch, and what it ended with (trained.py) when its training ends; a run killed in
    its fine-tuning phase resumes there, and one killed after a phase ended trains nothing more of it. The backups
    stay until the run is FINISHED (run.py removes them), or go when a callback the caller handed in (`handed`: a
    search's pruning) ends training for good (EndsTraining)."""
    trainer = settings.trainer
    if trainer.finetune_epochs:  # said now, not after the first phase's training
        require_backbone(model)
    tensorboard_dir = os.path.join(output_dir, "tensorboard") if setup.chief else None
    history, users = None, compiled.user_callbacks(trainer.callbacks)  # one instance each, for both phases
    weights = class_weights(trainer.class_weight, datasets, tracker)
    from tfx_hydra.trainer.callbacks.compute_rate import for_run  # Keras at its top: imported to train

    compute = for_run(datasets, trainer, setup, tracker)  # None with trainer.count_flops=false
    try:
        if trained.exists(backup_dir):
            history = restored(model, backup_dir, trainer, tracker, datasets.num_train, TRAIN_PHASE)
        elif not finetuning_backup_exists(backup_dir, trainer):
            history = train(model, datasets, trainer, tracker, setup.plan, backup_dir, tensorboard_dir, handed=handed,
                            users=users, class_weight=weights, compute=compute)
        if trainer.finetune_epochs:
            with setup.strategy.scope():
                start_finetuning(model, optimizer_cfg, settings, setup, tracker, datasets.num_train)
            finetune_dir = trained.phase_dir(backup_dir, finetuning=True)
            history = merge_histories(history, restored(model, finetune_dir, trainer, tracker, datasets.num_train,
                                                        FINETUNE_PHASE) if trained.exists(finetune_dir) else
                                      train(model, datasets, trainer, tracker, setup.plan, finetune_dir,
                                            tensorboard_dir, phase=FINETUNE_PHASE, handed=handed, users=users,
                                            class_weight=weights, compute=compute and compute.again()))
    except EndsTraining:
        remove_backup(backup_dir, setup.chief)
        raise
    if tensorboard_dir and os.path.isdir(tensorboard_dir):  # `tensorboard --logdir <output dir>/tensorboard`
        tracker.log_artifacts(tensorboard_dir, "tensorboard")
        say_profile(trainer, tensorboard_dir)
    if trainer.overfit_check:
        judge_overfit(history, datasets.num_train, tracker)
    return history


def restored(model, phase_dir: str, trainer: TrainerConfig, tracker: Tracker, num_train: int | None, phase: str):
    """A phase that ended before the interruption: its weights back, its history as training returned it."""
    history = trained.restore(phase_dir, model)
    log.info(f"training: the {'fine-tuning' if phase == FINETUNE_PHASE else 'training'} phase ended before the "
             f"interruption ({len(history.epoch)} epochs): its weights are back, nothing is trained again")
    say_phase(history, trainer, tracker, num_train)
    return history


def train(model, datasets, trainer: TrainerConfig, tracker: Tracker, plan: BatchPlan | None = None,
          backup_dir: str | None = None, tensorboard_dir: str | None = None, phase: str = TRAIN_PHASE,
          handed: Sequence = (), users: list | None = None, class_weight: dict | None = None, compute=None):
    """One phase's model.fit, with the callbacks in the order their work needs (see callbacks/).
    phase="finetune" runs trainer.finetune_epochs more epochs, numbered on from the first phase.
    `handed`: callbacks the caller adds (a search trial's pruning), after tracking, so an epoch that ends
    training is in MLflow too. `users`: trainer.callbacks, built; they run after ours. `class_weight`: each
    class's weight in the training loss (class_weight.py)."""
    import keras
    import tensorflow as tf

    from tfx_hydra.trainer import callbacks as cb  # Keras at the top: imported when training, not before

    first_epoch, last_epoch = ((trainer.epochs, trainer.epochs + trainer.finetune_epochs) if phase == FINETUNE_PHASE
                               else (0, trainer.epochs))
    steps = plan.steps_per_execution if plan else 1
    epochs = trainer.epochs + trainer.finetune_epochs
    console = cb.terminal_console() if trainer.verbose else None
    history = keras.callbacks.History()  # fit's own (Keras takes one it is given): what ends the phase reads it

    def phase_ended(saved_logs: dict | None = None) -> None:
        """As training ends (the backup's on_train_end, signals held; without a backup, after fit): which weights
        were kept, the phase's timing and input wait; with a backup, the phase's end written beside it."""
        if saved_logs is not None:  # a resumed phase: the epochs its earlier processes trained, from the backup
            trained.whole_history(history, saved_logs, first_epoch)
        history.kept = kept_weights.describe(first_epoch + len(history.epoch), keeping, early, model.optimizer)
        history.input_bound = waiting.said  # where the pipeline bound training: the summary says it once
        seconds = time.perf_counter() - started
        seconds_name, throughput_name = phase_timing(phase)
        history.timings = ({seconds_name: seconds, throughput_name: clock.examples_trained / seconds}
                           if clock.examples_trained else {})  # end-of-run metrics, logged once
        history.compute = compute.said(clock.examples_trained / seconds) if compute and clock.examples_trained else None
        if saved_logs is not None:
            trained.save(backup_dir, model, history, last_epoch, last_phase=last_epoch == epochs)

    backup = (phase_backup(backup_dir, trainer, phase, datasets, plan, tracker, on_trained=phase_ended)
              if trainer.backup and backup_dir else None)
    resumed = backup.resumed_batches if backup else lambda: 0  # a mid-epoch resume's batches, for the lines
    progress = cb.EpochProgress(console, datasets.num_train, epochs, resumed) if console else None
    callbacks = [  # at an epoch's end, in this order: a diverged epoch is neither shown, logged nor backed up
        keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs=None: datasets.order.set_epoch(epoch)),
        cb.MissedInterrupt(stops_at_batches=backup is None),  # a Ctrl-C lost in a finalizer or waiting: raised
        *([progress] if progress else []),  # gone before the epoch's line
        cb.NonFiniteGuard(steps, backup_dir if trainer.backup else None),
        waiting := cb.InputWait(datasets.cache.startswith(("cache: memory", "cache: disk")),  # the line says it
                                datasets.train.element_spec, plan.global_size if plan else 32, datasets.served),
        *([compute] if compute else []),  # after the first step: the step's FLOPs, for the clock's TFLOP/s and MFU
        clock := cb.EpochClock(datasets.num_train, epochs, trainer.verbose, plan.global_size if plan else 32, resumed,
                               compute=compute),
    ]
    every_seconds, every_steps = require_interval("trainer.log_every", trainer.log_every)
    if every_seconds or every_steps:  # a long epoch: a line mid-epoch where no bar shows it, a curve in MLflow
        callbacks.append(cb.MidwayReport(every_seconds, every_steps, datasets.num_train, epochs, tracker,
                                      say=trainer.verbose and progress is None, resumed_batches=resumed))
    if trainer.tensorboard and tensorboard_dir:
        callbacks.append(cb.TensorBoardWithGraph.from_config(trainer, tensorboard_dir))
    stopping, keeping, early = trainer.early_stopping, None, None
    if stopping.enabled:
        early = keras.callbacks.EarlyStopping(monitor=stopping.monitor, patience=stopping.patience, mode=stopping.mode,
                                              restore_best_weights=stopping.restore_best_weights)
        callbacks.append(early)
    if trainer.keep_best.enabled:  # its best-so-far beside the backup, so a resumed run still has it
        keeping = cb.KeepBest(trainer.keep_best.monitor, trainer.keep_best.mode, backup_dir if trainer.backup else None)
        callbacks.append(keeping)
    if backup:  # an epoch is backed up once all but tracking saw it (a kill before MLflow's write: caught up)
        callbacks.insert(0, keras.callbacks.LambdaCallback(on_epoch_end=backup.fill_in_a_trained_epoch))
        callbacks.append(backup)
    callbacks.append(keras.callbacks.LambdaCallback(on_epoch_end=tracker.log_epoch))  # last: MLflow, once backed up
    callbacks += [*handed, *(users or []), history]
    build_before_first_trace(model, datasets.train)  # one trace of the train step, not two
    if trainer.check_numerics:  # before fit traces its step function: every op of it gets a check
        tf.debugging.enable_check_numerics()
    started = time.perf_counter()  # the phase's timing (phase_ended)
    # TensorFlow's C++ lines (check_numerics' finding, oneDNN's DT_BOOL note) to the job log, not the terminal; a file
    # that cannot be read named, not a traceback; a signal waits for the step in flight (backed up there), then stops
    try:
        with native_lines_streamed(), datasets.named_errors(), stopped_at_a_step():
            model.fit(datasets.train, validation_data=datasets.validation, epochs=last_epoch,
                      initial_epoch=first_epoch, callbacks=callbacks, class_weight=class_weight,
                      shuffle=False, verbose=0)  # the pipeline shuffles, seeded
    except tf.errors.ResourceExhaustedError as err:
        raise out_of_memory(err, trainer, plan) from None
    except tf.errors.InvalidArgumentError as err:
        if trainer.check_numerics and NUMERICS_MARK in err.message:
            keep_in_the_job_log(err.message)
            raise non_finite_op(err.message) from None
        raise_if_users(err)
        raise
    except (TfxHydraError, EndsTraining):  # said already; or a handed callback's end, for its job to say
        raise
    except Exception as err:  # a callback, metric, loss or layer of the user's: its frames, not Keras' and ours
        raise_if_users(err)
        raise
    finally:
        if trainer.check_numerics:  # a process-wide switch: the next run in this process (a sweep's job) is not checked
            tf.debugging.disable_check_numerics()
        if progress:  # Ctrl-C or an error mid-epoch (Keras then ends no epoch): the bar is erased before any
            progress.stop()  # line is said, and is not drawn again under the next one (a search's summary)
    if backup is None:
        phase_ended()
    if keeping is not None and keeping.best_epoch is not None:
        tracker.set_tags({f"{phase}.best_epoch": keeping.best_epoch + 1, f"{phase}.best_{keeping.monitor}":
                          keeping.best_value})
    say_phase(history, trainer, tracker, datasets.num_train)
    return history


def keep_in_the_job_log(report: str) -> None:
    """check_numerics' whole report (the op's stack) in the job log, off the terminal. TensorFlow's C++ side also
    writes it to descriptor 2, which training streams to the job log, but from its own thread: on a loaded machine
    that write can come after the error has ended training, and the report went nowhere (when it comes in time, the
    log holds the report twice)."""
    logging.getLogger(NATIVE_LOGGER).info(report, extra=BARE)


def say_phase(history, trainer: TrainerConfig, tracker: Tracker, num_train: int | None) -> None:
    """What a phase's end tells: which weights it kept (when something chose them), where the pipeline bound it,
    its numerics check, its timing."""
    if history.kept.chosen:  # the last epoch's own weights, as a user expects without a chooser, go unsaid
        log.info(f"weights: kept {history.kept.said}")
    said = history.input_bound
    tracker.set_tags({"weights.kept": history.kept.said, **({"input_bound": said} if said else {})})
    if trainer.check_numerics:  # finite: NonFiniteGuard saw each epoch's running loss
        say_numerics_clean(len(history.history.get("loss", [])), num_train, tracker)
    if history.timings:
        tracker.log_metrics(history.timings)


# --- fine-tuning (transfer learning) -------------------------------------------------------------

def start_finetuning(model, optimizer_cfg: DictConfig, settings: Settings, setup: Setup, tracker: Tracker,
                     num_train: int | None = None) -> None:
    """Unfreeze the backbone (or its top trainer.finetune_layers layers) and recompile at
    trainer.finetune_lr (default: a tenth of the first phase's): a fresh optimizer, so the
    large first-phase steps do not carry momentum into the pretrained weights."""
    trainer = settings.trainer
    trainable = unfreeze_backbone(model, trainer.finetune_layers)
    learning_rate = finetune_learning_rate(optimizer_cfg, settings, model.optimizer)
    compile_model(model, optimizer_cfg, settings, setup, tracker, learning_rate=learning_rate, num_train=num_train)
    log.info(f"fine-tuning: backbone unfrozen ({trainable} trainable weights), learning rate {learning_rate:g}, "
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
    first.kept = second.kept  # what the last phase ended with
    first.input_bound = second.input_bound or first.input_bound
    first.compute = getattr(second, "compute", None) or getattr(first, "compute", None)
    return first
