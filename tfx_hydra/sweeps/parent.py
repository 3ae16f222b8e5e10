"""A sweep's parent MLflow run: made (or taken up again) before any job, found by every job through a
record in the sweep dir, and closed by the launching process.

When the sweep ends, the parent gets the jobs' count by status, the best objective (`sweep.metric`,
`sweep.direction`) with a tag naming the best child, and a table and plot comparing the jobs
(summary.py: sweep_summary.txt/.csv/.png in the sweep dir, and as the parent's artifacts); a cv=kfold
sweep's parent also gets each val_/test_ metric's mean and std over the folds. A child still RUNNING
whose process is gone (a killed worker) is closed KILLED first, so no job of a finished sweep stays
RUNNING. `children` is the one query for a parent's child runs: every question about the jobs goes
through it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfx_hydra import tracking
from tfx_hydra.cv import fold_statistics
from tfx_hydra.metrics import OBJECTIVE, epoch_metric
from tfx_hydra.process import describe_error, held_signals
from tfx_hydra.sweeps.summary import (
    LOST,
    STOPPED,
    SUMMARY_CSV,
    SUMMARY_PNG,
    SUMMARY_TXT,
    best_job,
    report_jobs_to_resume,
    say,
    summary_table,
    write_summary,
)

PARENT_RUN_FILE = "mlflow_parent_run.json"  # in the sweep dir: the parent's id, for every job and the sweeper
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag: the UI nests a child under its parent by it
JOB_NUM_TAG = "sweep.job_num"
TRIAL_TAG = "optuna.trial"  # a search's job: the number of the trial it ran
STUDY_TAG = "sweep.study"  # an Optuna search's parent: "<study name> in <storage>"
SWEEP_LOG = "sweep.log"  # the launching process's library lines (MLflow creating its store): not the terminal's
# What Hydra's sweepers write in the sweep dir: the sweep's config, Optuna's best parameters.
SWEEP_RECORDS = ("multirun.yaml", "optimization_results.yaml", SWEEP_LOG)


def children(client, parent_run_id: str, status: str | None = None, tags: dict[str, str] | None = None,
             newest: int | None = None, experiment_id: str | None = None) -> list:
    """The parent's child runs (`status`: only those in it; `tags`: only those with these values;
    `newest`: at most that many, the latest started first), in `experiment_id` (a job's own, which it
    knows), else in the parent's."""
    experiment_id = experiment_id or client.get_run(parent_run_id).info.experiment_id
    where = [f"tags.`{PARENT_TAG}` = '{parent_run_id}'", *(f"tags.`{k}` = '{v}'" for k, v in (tags or {}).items())]
    if status:
        where.append(f"attributes.status = '{status}'")
    order = ["attributes.start_time DESC"] if newest else None
    return client.search_runs([experiment_id], filter_string=" and ".join(where),
                              max_results=newest or 5000, order_by=order)


def read_parent_record(sweep_dir: str) -> dict[str, Any] | None:
    """The sweep's parent run as the launching process recorded it (None: tracking=none)."""
    try:
        with open(os.path.join(os.path.abspath(sweep_dir), PARENT_RUN_FILE), encoding="utf-8") as record:
            return json.load(record)
    except FileNotFoundError:
        return None  # tracking=none, or a launcher without our callback's start


def write_parent_record(sweep_dir: str, record: dict[str, Any]) -> None:
    """Written whole, then moved in: a second command of the same study may be reading it."""
    partial = os.path.join(sweep_dir, f"{PARENT_RUN_FILE}.{os.getpid()}")
    with open(partial, "w", encoding="utf-8") as out:
        json.dump(record, out)
    os.replace(partial, os.path.join(sweep_dir, PARENT_RUN_FILE))


def reopen_parent(client, sweep_dir: str) -> str | None:
    """Re-running a sweep into the same sweep dir continues its parent run."""
    record = read_parent_record(sweep_dir)
    if record is None:
        return None
    try:
        client.update_run(record["run_id"], status="RUNNING")
    except Exception:  # noqa: BLE001 - a parent from another store or deleted: start a new one
        return None
    return record["run_id"]


def study_parent(client, experiment_id: str, study: str, made: str | None = None) -> str | None:
    """The parent run of an Optuna study's commands: the earliest one tagged with the study. Two
    commands starting at once may each make one (`made`); both then take the earliest, and the
    later one's run is deleted, so the study keeps one parent."""
    runs = client.search_runs([experiment_id], max_results=50, order_by=["attributes.start_time ASC"],
                              filter_string=f"tags.`{STUDY_TAG}` = '{study}'")
    runs = [r for r in runs if PARENT_TAG not in r.data.tags]
    if not runs:
        return made
    first = min(runs, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
    if made is not None and made != first:
        client.delete_run(made)
    if made is None:
        client.update_run(first, status="RUNNING")
    return first


_OPEN: list["Parent"] = []  # this process's sweep parents not yet closed: an interrupt closes them (close_interrupted)


def close_interrupted(interrupt: BaseException) -> str | None:
    """Ctrl-C or SIGTERM stopped this process's sweep: close its parent KILLED with its jobs still running
    counted as interrupted (not lost), and return the one line that says what happened and how to resume
    (None: no sweep was open here)."""
    if not _OPEN:
        return None
    name = getattr(interrupt, "signal_name", "SIGINT")
    return _OPEN[-1].close("KILLED", jobs_done=False, interrupted=name,
                           retried=list(getattr(interrupt, "retried_trials", None) or []))


class Parent:
    """The parent run, as the launching process closes it."""

    def __init__(self, client, run_id: str, sweep_dir: str, metric: str, direction: str,
                 planned: int | None = None, resume: str = "", ui: str = "", shared: bool = False) -> None:
        self.client, self.run_id, self.sweep_dir = client, run_id, sweep_dir
        self.metric, self.direction = metric, direction
        self.planned, self.resume = planned, resume  # how many jobs the sweep has; the command that resumes it
        self.ui = ui  # the command that opens the store in the MLflow UI
        self.closed = False
        self.shared = shared  # a study's parent: other commands may still be running its children
        _OPEN.append(self)

    def close(self, status: str | None, note: str | None = None, jobs_done: bool = True,
              interrupted: str | None = None, retried: list[int] | None = None) -> str | None:
        """End the parent with the jobs' counts. `jobs_done`: the launcher returned, so a child still
        RUNNING lost its process (a killed worker) and is closed KILLED here, counted as killed.
        status None: KILLED if a job was killed (or lost), else FAILED. `interrupted` (a signal's name): the
        command was stopped, and with it its jobs: those still RUNNING were interrupted, not lost; `retried`:
        the trials a search runs again first. Returns, for an interrupt, the line that says it all."""
        if self.closed:
            return None
        self.closed = True
        if self in _OPEN:
            _OPEN.remove(self)
        if interrupted:
            stopped_now = close_interrupted_children(self.client, self.run_id, interrupted)
            note = f"interrupted ({interrupted})"
        lost = [] if interrupted else close_lost_children(self.client, self.run_id, jobs_done and not self.shared)
        jobs = summarize_jobs(self.client, self.run_id, self.metric)
        counts = {state: sum(j["status"] == state for j in jobs) for state in ("FINISHED", "FAILED", "KILLED")}
        never_ran = max(0, self.planned - len(jobs)) if self.planned is not None else 0
        if status is None:
            status = "KILLED" if counts["KILLED"] else "FAILED"
        if lost:
            report_jobs_to_resume(LOST, [j for j in jobs if j["run_id"] in lost], never_ran, self.resume,
                                  closed="closed KILLED")
        stopped = [j for j in jobs if j["status"] == "KILLED" and "(SIGTERM)" in j["error"] and j["run_id"] not in lost]
        if stopped and not jobs_done and not interrupted:  # the launcher gave up on them: say it, and how to go on
            report_jobs_to_resume(STOPPED, stopped, never_ran, self.resume, closed="KILLED")
        if status == "FINISHED" and jobs and counts["FINISHED"] == 0:
            status = "FAILED"
            note = note or "no job of the sweep finished"
        tags = {"sweep.jobs": len(jobs), "sweep.finished": counts["FINISHED"], "sweep.failed": counts["FAILED"],
                "sweep.killed": counts["KILLED"], "sweep.lost": len(lost), "sweep.never_ran": never_ran,
                "sweep.planned": self.planned if self.planned is not None else "unknown"}
        metrics = {"jobs": len(jobs), "jobs_finished": counts["FINISHED"], "jobs_failed": counts["FAILED"]}
        folds = fold_statistics(children(self.client, self.run_id))  # a cv=kfold sweep: per configuration
        best = None if folds else best_job(jobs, self.direction)  # a fold is no model to pick: the mean is the result
        if best is not None:
            tags |= {"sweep.best_run_id": best["run_id"], "sweep.best_run_name": best["name"]}
            metrics[f"best_{self.metric}"] = best["objective"]
        if len(folds) == 1:  # one configuration cross-validated: its mean and std are the sweep's result
            for name, (mean, std, _) in next(iter(folds.values())).items():
                metrics |= {f"cv_mean_{name}": mean, f"cv_std_{name}": std}
        if note:
            tags["error"] = note
        elif "error" in self.client.get_run(self.run_id).data.tags:  # an earlier attempt's, resumed since
            self.client.delete_tag(self.run_id, "error")
        tracking.send_batch(self.client, self.run_id, tags=tags.items(),
                            metrics=[(k, v, tracking.now_ms(), 0) for k, v in metrics.items()])
        summary = summary_table(jobs, counts, self.metric, self.direction, best, self.run_id, self.sweep_dir,
                                status, self.planned, folds)
        with open(os.path.join(self.sweep_dir, SUMMARY_TXT), "w", encoding="utf-8") as text:
            text.write(summary + "\n")
        if jobs:
            write_summary(jobs, self.sweep_dir, self.metric, best)
        tracking.mask_files(self.sweep_dir)  # Hydra's multirun.yaml holds the sweep's overrides
        for name in (SUMMARY_TXT, SUMMARY_CSV, SUMMARY_PNG, *SWEEP_RECORDS):
            if os.path.exists(os.path.join(self.sweep_dir, name)):
                self.client.log_artifact(self.run_id, os.path.join(self.sweep_dir, name))
        self.client.set_terminated(self.run_id, status=status)
        say(summary + (f"\nbrowse: {self.ui}" if self.ui else ""))
        if interrupted:
            return interrupted_account(interrupted, jobs, stopped_now, never_ran, self.planned, retried or [],
                                       self.resume)
        return None

    def close_unfinished(self) -> None:
        """Exit hook: the sweep stopped before Hydra's end (a failed job under the basic sweeper, Ctrl-C)."""
        try:
            self.close(None, jobs_done=False,
                       note="the sweep ended with an error: Hydra's sweeper stops after the batch of jobs in which "
                       "one failed or was interrupted (see the FAILED/KILLED child runs); later batches did not run")
        except Exception as err:  # at exit, say what was lost rather than raise into nothing
            print(f"tfx_hydra: could not close the sweep's MLflow parent run {self.run_id}: {err}")


def summarize_jobs(client, parent_run_id: str, metric: str) -> list[dict[str, Any]]:
    """One row per child run: its job number, name, status, objective and error, and the last value of
    `metric` it logged (what a pruned trial last reported, its last epoch's `epoch/<metric>`: it has no
    objective, nor the end-of-run figures)."""
    rows = []
    for child in children(client, parent_run_id):
        tags = child.data.tags
        rows.append({"job": int(tags.get(JOB_NUM_TAG, -1)), "name": child.info.run_name,
                     "run_id": child.info.run_id, "status": child.info.status,
                     "objective": child.data.metrics.get(OBJECTIVE),
                     "error": tags.get("error", ""),
                     # an Optuna search's trials: PRUNED or COMPLETE, and how many epochs each trained
                     "state": tags.get("optuna.state", ""), "epochs": tags.get("epochs_trained", ""),
                     "last": child.data.metrics.get(metric, child.data.metrics.get(epoch_metric(metric)))})
    return sorted(rows, key=lambda row: row["job"])


def close_interrupted_children(client, parent_run_id: str, name: str) -> list[str]:
    """The sweep's children still RUNNING when its command was interrupted: stopped by the same signal (their
    processes got it, or the launcher tore them down), each closed KILLED as a run the signal stopped is."""
    closed = []
    for child in children(client, parent_run_id, status="RUNNING"):
        with held_signals():
            tracking.send_batch(client, child.info.run_id, tags=[("error", f"interrupted ({name})")])
            client.set_terminated(child.info.run_id, status="KILLED")
        closed.append(child.info.run_id)
    return closed


def interrupted_account(name: str, jobs: list[dict[str, Any]], stopped_now: list[str], never_ran: int,
                        planned: int | None, retried: list[int], resume: str) -> str:
    """'interrupted (SIGINT): the sweep stopped with 3 of 8 jobs finished; trial 4 ... interrupted (its run
    KILLED, its backup kept) and run again first when resumed; 3 never ran. Resume it with: ...'."""
    finished = sum(j["status"] == "FINISHED" for j in jobs)
    stopped = [j for j in jobs if j["status"] == "KILLED" and (j["run_id"] in stopped_now or f"({name})" in j["error"])]
    said = f"interrupted ({name}): the sweep stopped with {finished} of {planned or len(jobs)} job(s) finished"
    if retried:  # a search: its interrupted trials are failed and queued again
        said += f"; trial{'s' if len(retried) > 1 else ''} {', '.join(map(str, retried))} interrupted (KILLED) and " \
                "run again first"
    elif stopped:
        said += f"; interrupted (KILLED, backups kept): {'; '.join(j['name'] for j in stopped)}"
    if never_ran:
        said += f"; {never_ran} not started"
    return said + f". Resume it (finished jobs are skipped) with: {resume}"


def close_lost_children(client, parent_run_id: str, jobs_done: bool) -> list[str]:
    """Children left RUNNING whose process is gone, or (jobs_done) any child still RUNNING: KILLED
    with a note, so no job of a finished sweep stays RUNNING and its backup still resumes."""
    closed = []
    for child in children(client, parent_run_id, status="RUNNING"):
        if jobs_done or tracking.process_is_gone(child.data.tags):
            tracking.close_lost_run(client, child, "lost: its sweep job's process ended without closing the run "
                                    "(a killed worker, e.g. kill -9 or the out-of-memory killer)")
            closed.append(child.info.run_id)
    return closed


def record_failure_without_run(uri: str, job, overrides: list[str], error: BaseException | str) -> None:
    """A job that failed before its run started (a bad value for one job) still shows under the
    parent, FAILED with its error, so the sweep's count of failures is complete."""
    client = tracking.client_for(uri)
    if children(client, job.parent_run_id, tags={JOB_NUM_TAG: str(job.num)}, newest=1):
        return
    parent = client.get_run(job.parent_run_id)
    run = client.create_run(parent.info.experiment_id, run_name=job.name, tags=tracking.mask_secrets({
        PARENT_TAG: job.parent_run_id, JOB_NUM_TAG: str(job.num), "hydra.overrides": " ".join(overrides),
        "error": describe_error(error) if isinstance(error, BaseException) else str(error)}))
    client.set_terminated(run.info.run_id, status="FAILED")
