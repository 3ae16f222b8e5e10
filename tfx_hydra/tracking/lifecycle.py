"""lifecycle: an MLflow run from start to end: FINISHED, FAILED (with its error) or KILLED.

`tracked_run` opens the store, starts the run (or takes up the interrupted run of the same
config, so the same command resumes it), turns Ctrl-C/SIGTERM into `Interrupted` for the
run's duration and always ends the run, whatever ends the block.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from typing import Iterator

from tfx_hydra.metrics import EPOCH
from tfx_hydra.process import signals
from tfx_hydra.process.faults import as_disk_full, describe_error, disk_full_said
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.tracking.known_stores import remember_store
from tfx_hydra.tracking.lost_runs import close_lost_runs, process_is_gone, process_tags
from tfx_hydra.tracking.mlflow_tracker import MlflowTracker
from tfx_hydra.tracking.secrets import mask_secrets
from tfx_hydra.tracking.store import connect, resolve_tracking_uri
from tfx_hydra.tracking.system import cluster_system_metrics, system_metrics
from tfx_hydra.tracking.tracker import BACKUP_TAG, OUTPUTS_TAG, TRAINED_DIR, TRAINED_RECORD, NullTracker

log = logging.getLogger(__name__)


def uri_path(config: TrackingConfig, launch_dir: str) -> str:
    """The file a SQLite store lives in (where a full disk was hit when MLflow does not say)."""
    return resolve_tracking_uri(config, launch_dir).removeprefix("sqlite:///")


@contextmanager
def tracked_run(config: TrackingConfig, launch_dir: str, tags: dict[str, str], resume_key: str | None = None,
                sweep_job=None, offline_dir: str | None = None,
                name: str | None = None) -> Iterator[MlflowTracker | NullTracker]:
    """Start an MLflow run and end it FINISHED, FAILED (with the error as a tag) or KILLED (Ctrl-C).

    With `resume_key`, an interrupted run of the same config (left RUNNING by a crash or
    kill -9, or ended KILLED) whose backup still exists is continued instead of starting
    a new one, so re-running the same command resumes it in the same MLflow run.
    The run is named `config.run_name`, else `name` (a sweep job: the job's own name). A sweep job
    (`sweeps.SweepJob`) becomes a child of its sweep's parent run (its `run_tags`). What MLflow
    does not take once the run has started is kept in `offline_dir` (see MlflowTracker).
    """
    where = os.path.dirname(offline_dir) if offline_dir else launch_dir  # a full disk's path when it names none
    if not config.enabled:
        with disk_full_said(where):
            yield NullTracker()
        return
    with disk_full_said(uri_path(config, launch_dir)):
        client, experiment_id, uri = connect(config, launch_dir)
    remember_store(uri)  # a run id alone then finds its store (reproduce, promote)
    tags = {**tags, **config.tags, "resume.key": resume_key or "none"}
    # tracking.run_name, else a sweep job's own name (its values), else the caller's
    run_name = config.run_name or (sweep_job.name if sweep_job is not None else name)
    if sweep_job is not None:  # nested under the sweep's parent run in the MLflow UI
        tags |= sweep_job.run_tags()
    tracker = None
    previous_handlers = signals.interrupt_on_signals()
    try:
        with signals.uninterrupted():  # a run is created (or taken up) whole, or not at all
            tracker = _start_or_resume(client, experiment_id, uri, launch_dir, run_name, tags, resume_key,
                                       offline_dir)
        sampled = config.system_metrics
        with system_metrics(tracker.run_id, uri, sampled.interval if sampled.enabled else None,
                            resumed=tracker.resumed), signals.interrupts_not_lost_to_errors():
            yield tracker
        signals.raise_missed_interrupt()  # a Ctrl-C a finalizer swallowed ends the run KILLED, not FINISHED
    except KeyboardInterrupt as err:
        signals.interrupt_received()
        name = err.args[0] if err.args else "SIGINT"
        if tracker is not None:
            end_quietly(tracker, "KILLED", f"interrupted ({name})")
        if isinstance(err, signals.Interrupted):
            command = sweep_job.resume_command if sweep_job is not None else tags.get("command")
            err.resume_hint = resume_hint(name, tracker, command, in_sweep=sweep_job is not None)
        raise
    except BaseException as err:
        said = as_disk_full(err, where)  # one message that says where and what to do, not a library's traceback
        if tracker is not None:
            end_quietly(tracker, "FAILED", describe_error(said))
        if said is err:
            raise
        raise said from None
    else:
        tracker.end("FINISHED")
    finally:
        signals.restore_handlers(previous_handlers)


def cluster_metrics(config: TrackingConfig, tracker, folder: str, launch_dir: str):
    """A multi-worker job's workers, around the run: the chief says where its run is (in `folder`, the job's),
    each other worker samples its machine into it (tracking/system.py). `config`: the job's tracking, as the chief
    has it (the other workers' own is off)."""
    sampled = config.system_metrics
    interval = sampled.interval if config.enabled and sampled.enabled else None
    return cluster_system_metrics(folder, tracker.run_id, resolve_tracking_uri(config, launch_dir), interval)


def resume_hint(signal_name: str, tracker: MlflowTracker | None, command: str | None, in_sweep: bool = False) -> str:
    """'interrupted (SIGTERM): MLflow run ... is KILLED, its last completed epoch backed up in ...;
    resume it with: <command>' (for a sweep job, the sweep's command with its sweep dir); what was kept is said
    as it is: the trained weights, an epoch, or nothing (then the same command starts the run again)."""
    what = "resume the sweep (finished jobs are skipped)" if in_sweep else "resume it"
    again = f"{what} with: {command}" if command else "run the same command again to resume it"
    if tracker is None:
        return f"interrupted ({signal_name}) before the MLflow run started: nothing to resume."
    backup = tracker.backup_dir
    if backup and os.path.isdir(backup) and trained_at(backup):
        return (f"interrupted ({signal_name}): MLflow run {tracker.run_id} is KILLED; {trained_at(backup)} kept in "
                f"{backup}; the next command evaluates and exports what is not done, {again}")
    if backup and os.path.isdir(backup):
        return f"interrupted ({signal_name}): MLflow run {tracker.run_id} is KILLED, {backed_up_at(backup)} " \
               f"backed up in {backup}; {again}"
    if not tracker.epochs_logged:  # the same command takes the run up again, from its start (find_interrupted_run)
        again = f"with: {command}" if command else "by running the same command again"
        return (f"interrupted ({signal_name}): MLflow run {tracker.run_id} is KILLED before its first epoch ended: "
                f"nothing trained to keep; it starts again, in the same MLflow run, {again}")
    return (f"interrupted ({signal_name}): MLflow run {tracker.run_id} is KILLED; nothing was backed up "
            "(trainer.backup=false): the same command starts a new run")


def trained_phases(backup: str) -> list[dict]:
    """What the backup's training phases ended with (trainer/trained.py's records), in their order."""
    records = []
    for folder in (backup, os.path.join(backup, "finetune")):
        try:
            with open(os.path.join(folder, TRAINED_DIR, TRAINED_RECORD), encoding="utf-8") as file:
                records.append(json.load(file))
        except (OSError, ValueError):
            pass
    return records


def trained_at(backup: str) -> str | None:
    """'trained: 2 of 2 epochs' once the run's last training phase ended, else None."""
    ended = [record for record in trained_phases(backup) if record.get("last_phase")]
    return f"trained: {ended[0]['epochs_trained']} of {ended[0]['epochs_planned']} epochs" if ended else None


def backed_up_at(backup: str) -> str:
    """Where in training the backup is: 'its last completed epoch', 'epoch 3 at batch 1,200' when it was
    written within an epoch (from the metadata Keras' BackupAndRestore keeps beside the weights), or, once
    training ended, 'trained: 2 of 2 epochs'."""
    if trained_at(backup):
        return trained_at(backup)
    for folder in (os.path.join(backup, "finetune"), backup):
        try:
            with open(os.path.join(folder, "training_metadata.json"), encoding="utf-8") as file:
                metadata = json.load(file)
            epoch, batch = int(metadata.get("epoch", 0)), int(metadata.get("batch") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        return f"epoch {epoch + 1} at batch {batch:,}" if batch else "its last completed epoch"
    return "its last completed epoch"


def _start_or_resume(client, experiment_id: str, uri: str, launch_dir: str, run_name: str | None,
                     tags: dict[str, str], resume_key: str | None, offline_dir: str | None) -> MlflowTracker:
    interrupted = find_interrupted_run(client, experiment_id, resume_key) if resume_key else None
    close_lost_runs(client, [experiment_id], keep=interrupted.info.run_id if interrupted else None)
    tags = {**standard_tags(), **tags, **process_tags()}
    if interrupted:
        backup = interrupted.data.tags.get(BACKUP_TAG)
        first = interrupted.data.tags.get(OUTPUTS_TAG)
        if first and os.path.isdir(first):  # its files stay in one folder, the first command's
            tags[OUTPUTS_TAG] = first
        tracker = MlflowTracker(client, interrupted.info.run_id, uri, launch_dir,
                                resumed_backup_dir=backup if backup and os.path.isdir(backup) else None,
                                offline_dir=offline_dir, previous_error=interrupted.data.tags.get("error"),
                                resumed=True, output_dir=tags.get(OUTPUTS_TAG))
        # this process's tags reach the store before the run is RUNNING again: a RUNNING run still
        # naming its dead process would be closed as lost by any other command's close_lost_runs
        tracker.set_tags(tags)
        tracker.flush()
        client.update_run(interrupted.info.run_id, status="RUNNING")
        return tracker
    run = client.create_run(experiment_id, run_name=run_name, tags=mask_secrets(tags))
    return MlflowTracker(client, run.info.run_id, uri, launch_dir, offline_dir=offline_dir,
                         output_dir=tags.get(OUTPUTS_TAG))


def standard_tags() -> dict[str, str]:
    """MLflow's own system tags, as its fluent `start_run` sets them (user, source name and type):
    the run page's *Created by* and *Source* read them. The git commit is the launch record's.
    From MLflow's default context alone: its registry of every context (`resolve_tags`) also asks
    for a notebook, Databricks and git, importing IPython and GitPython (~0.2 s of every command)
    for tags this run does not keep."""
    from mlflow.tracking.context.default_context import DefaultRunContext

    return DefaultRunContext().tags()


def find_interrupted_run(client, experiment_id: str, resume_key: str):
    """The newest unfinished run of this config that the same command goes on with: one whose backup is on disk
    (it resumes from it), or one killed before its first epoch ended (it starts again); a RUNNING run whose
    process is still alive is another command's, not taken. None when there is none."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`resume.key` = '{resume_key}'",
                              order_by=["attributes.start_time DESC"], max_results=20)
    for run in runs:
        if run.info.status not in ("RUNNING", "KILLED"):
            continue
        if run.info.status == "RUNNING" and not process_is_gone(run.data.tags):
            continue
        backup = run.data.tags.get(BACKUP_TAG)
        if (backup and os.path.isdir(backup)) or f"{EPOCH}loss" not in run.data.metrics:
            return run
    return None


def end_quietly(tracker: MlflowTracker, status: str, error: str) -> None:
    """Record the failure without hiding the error that caused it if the store fails too."""
    try:
        tracker.end(status, error)
    except Exception as err:  # the original error matters more; say what was lost
        log.error("could not mark MLflow run %s %s: %s", tracker.run_id, status, err)
