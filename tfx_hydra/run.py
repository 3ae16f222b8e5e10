"""run: one experiment, as the sequence of its steps. Each line hands off to the module that owns the step.

    0. preflight   settings (schemas), data files, exporters, sweep.metric, the store  -- no TensorFlow yet
    1. hardware    hardware.py     devices, profile, memory growth, threads, seeds  -> HardwareInfo
    2. precision   precision.py    the Keras dtype policy (auto: the profile's)
    3. strategy    strategy.py     the tf.distribute strategy and the batch plan    -> Setup
    4. data        data/           train / validation / test tf.data pipelines      -> Datasets
                                   (then the batch plan's steps per call, for the run's length)
    5. model       models/ + trainer.compile_model, inside strategy.scope()
    6. train       trainer.fit_phases: head, then fine-tuning; backups (per epoch, within one, and each phase's end,
                                   kept until the run is FINISHED); the job's callbacks
    7. evaluate    trainer.evaluate: the held-out test split, and the kept weights' figures
    8. export      export/: each selected exporter writes and verifies its artifact (a resumed run: those not done)

Tracking (tracking/) wraps steps 1-8: the MLflow run starts first and ends FINISHED, FAILED or
KILLED. Each step takes what earlier steps returned; nothing reaches into a global. The run works for a
`job` (job.py): alone, a sweep's or a search trial's, whose hooks add their part; it names no sweep.
TensorFlow is imported by the steps that need it, never at module level, so preflight errors
come back in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import os

from omegaconf import DictConfig, OmegaConf

from tfx_hydra import cv, records, reports, task, tracking, trainer
from tfx_hydra.console import print_summary, shown_names
from tfx_hydra.data import service as data_service
from tfx_hydra.data.pipeline import require_datasets
from tfx_hydra.data.preflight import check_data_config, declared_input_values
from tfx_hydra.data.spec import fill_in_config
from tfx_hydra.errors import ConfigError
from tfx_hydra.export import check_exporters, evaluate_saved_model, export_model, resolve_export_source
from tfx_hydra.export.source import record_evaluated_model, record_evaluated_split
from tfx_hydra.hardware import setup_hardware
from tfx_hydra.job import Job, RunResult
from tfx_hydra.lr_schedule import LrScheduleConfig, require_known_length
from tfx_hydra.metrics import record_objective, require_known_metric
from tfx_hydra.models.adapt import adapt_to_training_split
from tfx_hydra.models.contract import require_fits_data, require_keras_model, require_model_takes_the_inputs
from tfx_hydra.models.heads import in_target_units
from tfx_hydra.models.presets import require_preset_here
from tfx_hydra.precision import resolve_policy, set_precision
from tfx_hydra.settings.checked import validate, validate_section
from tfx_hydra.settings.compose import build, choice, require_importable_targets
from tfx_hydra.settings.schemas import Settings
from tfx_hydra.strategy import Setup, is_chief, is_multi_worker, plan_batches, require_cluster_here, steps_for_run
from tfx_hydra.trainer.backups import EndsTraining


def run(cfg: DictConfig, job: Job | None = None) -> RunResult:
    """Run the experiment `cfg` describes, for `job` (None: the user's alone); return its objective
    (`sweep.metric`: one value, or one per metric) and MLflow run."""
    job = job or Job()
    settings = preflight(cfg)
    if cfg.mode == "evaluate":
        return evaluate_export(cfg, settings)
    launch_dir, output_dir = cfg.paths.launch_dir, cfg.paths.output_dir
    chief = is_chief(cfg.strategy.get("_target_"), cfg.strategy.get("cluster", "tf_config"))
    track = settings.tracking if chief else dataclasses.replace(settings.tracking, enabled=False)
    resume_key = records.resume_key(cfg)
    done = job.finished(settings.tracking, launch_dir, resume_key)  # read by every worker: all skip, or none waits
    if done is not None:  # a re-run of an interrupted sweep: this job already finished
        return done
    with tracking.tracked_run(track, launch_dir, tags=records.launch_tags(cfg), resume_key=resume_key,
                              sweep_job=job.tracked_as(), offline_dir=os.path.join(output_dir, tracking.OFFLINE_DIR),
                              name=records.run_name(cfg)) as tracker, \
            job.attending(cfg, settings, tracker), \
            tracking.cluster_metrics(settings.tracking, tracker, cfg.paths.output_dir, launch_dir), \
            data_service.serving(cfg.data.get("service"), cfg.data.get("service_workers", 2),  # data.service=local:
                                 cfg.paths.output_dir) as service:  # its processes start beside TensorFlow's import
        output_dir = records.run_folder(cfg, tracker)  # a resumed run's: its first command's, one place for its files
        records.record_launch(tracker, cfg, output_dir, launch_dir)

        # TensorFlow is first imported here, by the step that must configure its devices before any op
        hardware = setup_hardware(settings.hardware, settings.seed, settings.trainer.deterministic,
                                  input_values=declared_input_values(cfg.data),  # for intra_op_threads=auto
                                  model_target=cfg.model.get("_target_"))
        policy, precision_warnings = resolve_policy(settings.precision.policy, hardware)
        set_precision(policy)
        strategy = build(cfg.strategy, "strategy", hardware=hardware)
        setup = Setup(hardware, policy, strategy, plan_batches(settings.trainer, hardware, strategy), chief)
        records.record_setup(tracker, setup, precision_warnings)

        datasets = require_datasets(build(cfg.data, "data", batch_size=setup.plan.global_size,
                                          **cv.data_arguments(settings.cv, settings.seed),  # a k-fold job's fold
                                          **service.data_arguments()),  # the local service's address
                                    cfg.data._target_, task.from_config(settings.task))
        fill_in_config(cfg.data, datasets.spec)  # data.input_shape / num_classes left unset: the file's
        cv.require_folded(datasets, settings.cv, cfg.data._target_)
        require_known_length(settings.lr_schedule, datasets.num_train)  # a schedule counts the epoch's updates
        setup = dataclasses.replace(setup, plan=steps_for_run(setup.plan, settings.trainer, datasets))
        records.record_batches(tracker, setup.plan)
        records.record_data(tracker, datasets, cv.tags(settings.cv))
        service.record(tracker)  # data.service: its address and workers
        with strategy.scope():  # variables (model and optimizer) live where the strategy puts them
            model = in_target_units(require_keras_model(build(cfg.model, "model"), cfg.model._target_), datasets.spec)
            require_fits_data(model, datasets)
            adapt_to_training_split(model, datasets)  # a vocabulary, a normalization: from the training split only
            records.record_model(tracker, model, output_dir)
            trainer.compile_model(model, cfg.optimizer, settings, setup, tracker, num_train=datasets.num_train)

        backup_dir = trainer.choose_backup_dir(tracker, output_dir, setup.chief)  # kept until the run is FINISHED
        try:
            history = trainer.fit_phases(model, datasets, cfg.optimizer, settings, setup, tracker, output_dir,
                                         backup_dir, handed=job.training_callbacks())
        except EndsTraining as ending:  # a callback of the job's ended training (a search's pruner): its epochs stay
            return job.ended_training(tracker, ending)
        metrics = trainer.evaluate(model, datasets, history, tracker)
        objective = record_objective(metrics, settings.sweep, tracker)

        exports = []
        if job.keeps_artifacts(objective, tracker):  # a search's trial behind the best so far: neither
            reports.record_plots(tracker, model, datasets, history, output_dir,
                                 pending=job.plots_wait)  # drawn if it ends the best
            exports = export_model(model, datasets, cfg.export, tracker, setup.chief,
                                   done_in=backup_dir if settings.trainer.backup else None)  # a resumed run's
        job.completed(tracker, history)
    trainer.remove_backup(backup_dir, setup.chief)  # the run is FINISHED: its trained weights are in its artifacts

    print_summary(metrics, tracker.run_id, exports, tracker.ui_command if job.shows_ui else None, output_dir,
                  trainer.weights_said(model),
                  shown_names(datasets.spec.class_names) if datasets.spec.class_names else None,
                  history.kept.said if history.kept.chosen else None, getattr(history, "input_bound", None),
                  getattr(history, "compute", None))
    return RunResult(objective, tracker.run_id)


def preflight(cfg: DictConfig) -> Settings:
    """Everything that can be checked without TensorFlow, checked before it is imported."""
    settings = validate(cfg)
    generates = task.get(settings.task.name).generates  # a causal LM: served as generated text
    if cfg.mode == "evaluate" and generates:
        raise ConfigError("mode=evaluate scores a served model's answers against the data's labels; a causal LM "
                          "answers generated text: its test_perplexity is measured by the run that trains it.",
                          fix="mode=train (its summary and MLflow run hold test_perplexity)")
    settings.lr_schedule = validate_section(cfg, "lr_schedule", LrScheduleConfig) if "lr_schedule" in cfg else None
    settings.cv = validate_section(cfg, "cv", cv.CvConfig) if "cv" in cfg else None
    cv.require_foldable(cfg.get("cv"), cfg.data, choice("data"))
    require_importable_targets(OmegaConf.to_container(cfg, resolve=False))
    require_model_takes_the_inputs(cfg.model, cfg.data)
    require_preset_here(cfg.model, cfg.data)  # model=keras_hub: the preset is data, on this machine
    if cfg.mode == "train":
        require_known_metric(settings)
        check_exporters(cfg.export, text_inputs=cfg.data.get("inputs") == "text", generates=generates)
    check_data_config(cfg.data, settings.task.name)
    if is_multi_worker(cfg.strategy.get("_target_")):
        require_cluster_here(cfg.strategy.get("cluster"))
        data_service.require_one_trainer(cfg.data.get("service"))
    if settings.tracking.enabled:
        uri = tracking.resolve_tracking_uri(settings.tracking, cfg.paths.launch_dir)
        tracking.check_store_reachable(uri, settings.tracking.connect_timeout)
    return settings


def evaluate_export(cfg: DictConfig, settings: Settings) -> RunResult:
    """mode=evaluate: run the configured data's test split through an exported SavedModel
    (export.source: a folder, or runs:/<run id> for a tracked run's export) and log its metrics:
    the check before shipping a model."""
    source = cfg.export.get("source")
    if not source:
        raise ConfigError("mode=evaluate needs the model to evaluate.",
                          fix="export.source=/path/to/export/mlp/1 (or runs:/<run id>)")
    output_dir = cfg.paths.output_dir
    tags = records.launch_tags(cfg) | {"mode": "evaluate", "export.source": source}
    with tracking.tracked_run(settings.tracking, cfg.paths.launch_dir, tags=tags,
                              offline_dir=os.path.join(output_dir, tracking.OFFLINE_DIR)) as tracker:
        tracker.log_config(records.resolved_config(cfg))
        path = resolve_export_source(source, settings.tracking, cfg.paths.launch_dir,  # before TensorFlow: fails fast
                                     download_dir=os.path.join(output_dir, "export_source"))
        record_evaluated_model(tracker, source, path)
        setup_hardware(settings.hardware, settings.seed)
        batch_size = settings.trainer.batch_size if settings.trainer.batch_size != "auto" else 256
        datasets = require_datasets(build(cfg.data, "data", batch_size=batch_size), cfg.data._target_,
                                    task.from_config(settings.task))
        metrics = evaluate_saved_model(path, datasets, record_evaluated_split(datasets))
        tracker.log_metrics(metrics)
    print_summary(metrics, tracker.run_id, [], tracker.ui_command, output_dir, "n/a (evaluate)",
                  shown_names(datasets.spec.class_names) if datasets.spec.class_names else None)
    metric = settings.sweep.metric  # a val_ metric: its test_ value, the only split evaluated here
    return RunResult(metrics.get(metric, metrics.get(metric.replace("val_", "test_", 1), metrics["test_loss"])),
                     tracker.run_id)
