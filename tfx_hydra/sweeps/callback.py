"""SweepCallback: Hydra's hooks that make a multirun one parent MLflow run with one child run per job.

Hydra calls `SweepCallback` in the launching process (`on_multirun_start/end`) and in
every job's own process (`on_job_start/end`), whichever launcher runs the jobs:
in-process (basic), local processes (joblib, submitit_local) or Slurm nodes
(submitit_slurm). So the parent run is made once, before any job, and its id travels
to the jobs through a small file in the sweep directory: every launcher shares that
folder (Slurm jobs see it on the cluster's shared filesystem), and nothing depends on
the launcher pickling our state or forwarding our environment. In the job's process
the callback hands the id to the run as `TFX_HYDRA_SWEEP_JOB` (a JSON environment
variable, read by `current_job`), so the task function never guesses whether it is in a sweep.

When the sweep ends, the parent is closed with its summary (parent.py, summary.py). Hydra's basic
sweeper raises after a batch with a failed job, so `on_multirun_end` never comes: an exit
hook then closes the parent as FAILED with the same summary, rather than leaving it RUNNING.

An Optuna search (hparams_search=optuna) is checked whole here, before its parent exists
(hparams_search/checks.py), and its parent is the study's: every command of one study, on
any machine, finds the same parent run by its `sweep.study` tag.

The store itself is created here too, before any job starts: two processes creating a
fresh SQLite store at once fail in its schema migration.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tfx_hydra import cv, tracking
from tfx_hydra.errors import ConfigError
from tfx_hydra.process import long_lived
from tfx_hydra.settings.checked import validate_section
from tfx_hydra.sweeps import launch
from tfx_hydra.sweeps.hparams_search import checks
from tfx_hydra.sweeps.job import SweepJob, announce_job, current_job
from tfx_hydra.sweeps.parent import (
    STUDY_TAG,
    SWEEP_LOG,
    Parent,
    read_parent_record,
    record_failure_without_run,
    reopen_parent,
    study_parent,
    write_parent_record,
)
from tfx_hydra.sweeps.summary import say


class SweepCallback(Callback):
    """Hydra callback (conf/config.yaml: hydra.callbacks.mlflow_sweep)."""

    def __init__(self) -> None:
        self._parent: Parent | None = None
        self._gradients_before_job: set[str] = set()

    # --- launching process ------------------------------------------------------------

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        search = None
        try:
            launch.require_launcher_runs_here(config)  # before any record of a sweep that could not start
            cv.require_foldable(config.get("cv"), config.get("data"),
                                OmegaConf.select(config, "hydra.runtime.choices.data", default=None))
            if checks.is_search(config):  # an Optuna search: its settings, space and storage, checked whole
                search = checks.plan(config, config.hydra.sweeper.get("params") or {},
                                     list(config.hydra.overrides.task))
        except ConfigError as err:
            # Hydra turns a callback's exception into a warning and goes on to the launcher, which
            # then fails with a traceback; SystemExit passes through, so this message is all there is.
            raise SystemExit(str(err)) from None
        settings = validate_section(config, "tracking")  # a bad value: the same ConfigError a run gives
        if not settings.enabled:
            return
        launch_dir = config.hydra.runtime.cwd
        tracking.check_store_reachable(tracking.resolve_tracking_uri(settings, launch_dir), settings.connect_timeout)
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        os.makedirs(sweep_dir, exist_ok=True)
        with tracking.store_setup_lines_to(os.path.join(sweep_dir, SWEEP_LOG)):  # MLflow's, not the terminal's
            client, experiment_id, uri = tracking.connect(settings, launch_dir)
        tracking.close_lost_runs(client, [experiment_id])  # runs an earlier, killed command left RUNNING
        run_id = reopen_parent(client, sweep_dir)  # the same sweep dir re-run: the same parent
        tags = launch.sweep_tags(config, sweep_dir)
        if search is not None:  # every command of one study, wherever it runs, shares one parent
            tags[STUDY_TAG] = f"{search.settings.study_name} in {search.shown_storage}"
            run_id = run_id or study_parent(client, experiment_id, tags[STUDY_TAG])
        if run_id is None:  # a new parent: who made it, what it sweeps, and a description for the UI
            planned = launch.planned_jobs(config)
            description = launch.parent_description(config, search, planned, tags["command"])
            run = client.create_run(experiment_id, run_name=launch.sweep_name(sweep_dir), tags=tracking.mask_secrets(
                tags | tracking.standard_tags() | {"mlflow.note.content": description}))
            run_id = run.info.run_id
            tracking.send_batch(client, run_id, params=tracking.mask_secrets(
                launch.parent_params(config, search)).items())
            if search is not None:
                run_id = study_parent(client, experiment_id, tags[STUDY_TAG], made=run_id)
        resume = tracking.mask_text(launch.resume_command(tags["command"], sweep_dir))
        write_parent_record(sweep_dir, {"run_id": run_id, "uri": uri, "swept_keys": launch.swept_keys(config),
                                        "scientific": launch.scientific_keys(config), "resume_command": resume})
        self._parent = Parent(client, run_id, sweep_dir, *launch.primary_objective(config),
                              planned=launch.planned_jobs(config),
                              resume=resume, ui=tracking.ui_command(uri, launch_dir), shared=search is not None)
        atexit.register(self._parent.close_unfinished)
        planned = self._parent.planned
        say(f"tfx_hydra sweep: {planned if planned is not None else 'its'} jobs under MLflow parent run {run_id}; "
            f"each job's log: {os.path.join(sweep_dir, '<job>', 'tfx_hydra.log')}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._parent is not None:
            atexit.unregister(self._parent.close_unfinished)
            self._parent.close("FINISHED")
        ray_launcher = sys.modules.get("tfx_hydra.sweeps.ray_launcher")  # imported only by a Ray sweep
        if ray_launcher is not None:
            ray_launcher.stop_local_ray()

    # --- each job's process -------------------------------------------------------------

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._gradients_before_job = long_lived.custom_gradients()
        record = read_parent_record(str(config.hydra.sweep.dir)) if launch.in_multirun(config) else None
        search = config.get("hparams_search") or {}
        if record is None or search.get("worker") is not None:  # a search's worker: each of its trials is a job
            return
        trial = search.get("trial")  # a search's job: named by its trial
        num = int(config.hydra.job.num) if trial is None else int(trial)
        name = launch.job_name(num, list(config.hydra.overrides.task), record["swept_keys"], trial=trial is not None,
                               scientific=record.get("scientific", []))
        announce_job(SweepJob(record["run_id"], num, name, record.get("resume_command", ""), trial=trial is not None))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        # the job's model and traced functions are gone: so go the graphs TensorFlow's gradient registry kept
        # of them, or a process running job after job (a search's worker) grows by each one's
        long_lived.forget_custom_gradients(self._gradients_before_job)
        job = current_job()
        announce_job(None)
        if job is None or job_return.status.name != "FAILED":
            return
        record = read_parent_record(str(config.hydra.sweep.dir))
        # A failed JobReturn holds its exception; asking for `.return_value` would raise it and print Hydra's line
        error = job_return._return_value if isinstance(job_return._return_value, BaseException) else "failed"
        record_failure_without_run(record["uri"], job, list(config.hydra.overrides.task), error)
