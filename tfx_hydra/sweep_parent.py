"""sweep_parent: a sweep's parent MLflow run as the launching process closes it.

When the sweep ends, the parent gets the jobs' count by status, the best objective
(`sweep.metric`, `sweep.direction`) with a tag naming the best child, and a table and plot
comparing the jobs (sweep_summary.txt/.csv/.png in the sweep dir, and as the parent's
artifacts). A child still RUNNING whose process is gone (a killed worker) is closed KILLED
first, so no job of a finished sweep stays RUNNING.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import Any

from tfx_hydra import tracking
from tfx_hydra.console import sweep_summary

PARENT_RUN_FILE = "mlflow_parent_run.json"  # in the sweep dir: the parent's id, for every job and the sweeper
OBJECTIVE_METRIC = "objective"  # the value run() returned to the sweeper (sweep.metric's final value)
SUMMARY_CSV = "sweep_summary.csv"
SUMMARY_PNG = "sweep_summary.png"
SUMMARY_TXT = "sweep_summary.txt"  # the table the sweep ends with, as the terminal showed it
# What Hydra's sweepers write in the sweep dir: the sweep's config, Optuna's best parameters.
SWEEP_RECORDS = ("multirun.yaml", "optimization_results.yaml")


def say(text: str) -> None:
    """A line of the launching process. It has no job log and no job logging (each job configures
    its own), so its few lines are printed as they are; the summary is also in sweep_summary.txt."""
    print(text, flush=True)


def read_parent_record(sweep_dir: str) -> dict[str, Any] | None:
    """The sweep's parent run as the launching process recorded it (None: tracking=none)."""
    try:
        with open(os.path.join(os.path.abspath(sweep_dir), PARENT_RUN_FILE), encoding="utf-8") as record:
            return json.load(record)
    except FileNotFoundError:
        return None  # tracking=none, or a launcher without our callback's start


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

    def close(self, status: str | None, note: str | None = None, jobs_done: bool = True) -> None:
        """End the parent with the jobs' counts. `jobs_done`: the launcher returned, so a child still
        RUNNING lost its process (a killed worker) and is closed KILLED here, counted as killed.
        status None: KILLED if a job was killed (or lost), else FAILED."""
        if self.closed:
            return
        self.closed = True
        lost = close_lost_children(self.client, self.run_id, jobs_done and not self.shared)
        jobs = summarize_jobs(self.client, self.run_id)
        counts = {state: sum(j["status"] == state for j in jobs) for state in ("FINISHED", "FAILED", "KILLED")}
        never_ran = max(0, self.planned - len(jobs)) if self.planned is not None else 0
        if status is None:
            status = "KILLED" if counts["KILLED"] else "FAILED"
        if lost:
            report_lost_jobs([j for j in jobs if j["run_id"] in lost], never_ran, self.resume)
        if status == "FINISHED" and jobs and counts["FINISHED"] == 0:
            status = "FAILED"
            note = note or "no job of the sweep finished"
        tags = {"sweep.jobs": len(jobs), "sweep.finished": counts["FINISHED"], "sweep.failed": counts["FAILED"],
                "sweep.killed": counts["KILLED"], "sweep.lost": len(lost), "sweep.never_ran": never_ran,
                "sweep.planned": self.planned if self.planned is not None else "unknown"}
        metrics = {"jobs": len(jobs), "jobs_finished": counts["FINISHED"], "jobs_failed": counts["FAILED"]}
        best = best_job(jobs, self.direction)
        if best is not None:
            tags |= {"sweep.best_run_id": best["run_id"], "sweep.best_run_name": best["name"]}
            metrics[f"best_{self.metric}"] = best["objective"]
        if note:
            tags["error"] = note
        tracking.send_batch(self.client, self.run_id, tags=tags.items(),
                            metrics=[(k, v, tracking.now_ms(), 0) for k, v in metrics.items()])
        summary = sweep_summary(jobs, counts, self.metric, self.direction, best, self.run_id, self.sweep_dir,
                                status, self.planned)
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

    def close_unfinished(self) -> None:
        """Exit hook: the sweep stopped before Hydra's end (a failed job under the basic sweeper, Ctrl-C)."""
        try:
            self.close(None, jobs_done=False,
                       note="the sweep ended with an error: Hydra's sweeper stops after the batch of jobs in which "
                       "one failed or was interrupted (see the FAILED/KILLED child runs); later batches did not run")
        except Exception as err:  # at exit, say what was lost rather than raise into nothing
            print(f"tfx_hydra: could not close the sweep's MLflow parent run {self.run_id}: {err}")


def summarize_jobs(client, parent_run_id: str) -> list[dict[str, Any]]:
    """One row per child run: its job number, name, status, objective and error."""
    parent = client.get_run(parent_run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'", max_results=5000)
    rows = []
    for child in children:
        tags = child.data.tags
        rows.append({"job": int(tags.get("sweep.job_num", -1)), "name": child.info.run_name,
                     "run_id": child.info.run_id, "status": child.info.status,
                     "objective": child.data.metrics.get(OBJECTIVE_METRIC),
                     "error": tags.get("error", ""),
                     # an Optuna search's trials: PRUNED or COMPLETE, and how many epochs each trained
                     "state": tags.get("optuna.state", ""), "epochs": tags.get("epochs_trained", "")})
    return sorted(rows, key=lambda row: row["job"])


def report_lost_jobs(lost: list[dict[str, Any]], never_ran: int, resume: str) -> None:
    """One message for a sweep whose worker died: which jobs were lost, how many never ran, how to resume."""
    named = "; ".join(f"job {j['name']} (MLflow run {j['run_id']})" for j in lost)
    print(f"tfx_hydra: the sweep lost {len(lost)} job(s) whose process died without a word (a killed worker, e.g. "
          f"kill -9 or the out-of-memory killer): {named}. {never_ran} job(s) never ran. Their runs are closed "
          f"KILLED with their backups kept; resume the sweep (finished jobs are skipped) with: {resume}",
          file=sys.stderr, flush=True)


def close_lost_children(client, parent_run_id: str, jobs_done: bool) -> list[str]:
    """Children left RUNNING whose process is gone, or (jobs_done) any child still RUNNING: KILLED
    with a note, so no job of a finished sweep stays RUNNING and its backup still resumes."""
    parent = client.get_run(parent_run_id)
    running = client.search_runs([parent.info.experiment_id], max_results=5000, filter_string=(
        f"tags.`mlflow.parentRunId` = '{parent_run_id}' and attributes.status = 'RUNNING'"))
    closed = []
    for child in running:
        if jobs_done or tracking.process_is_gone(child.data.tags):
            tracking.close_lost_run(client, child, "lost: its sweep job's process ended without closing the run "
                                    "(a killed worker, e.g. kill -9 or the out-of-memory killer)")
            closed.append(child.info.run_id)
    return closed


def best_job(jobs: list[dict[str, Any]], direction: str) -> dict[str, Any] | None:
    scored = [j for j in jobs if j["status"] == "FINISHED" and j["objective"] is not None]
    if not scored:
        return None
    pick = max if direction == "maximize" else min
    return pick(scored, key=lambda j: j["objective"])


def write_summary(jobs: list[dict[str, Any]], folder: str, metric: str, best: dict[str, Any] | None) -> None:
    """sweep_summary.csv (one row per job) and sweep_summary.png (the objective per job, best in green)."""
    with open(os.path.join(folder, SUMMARY_CSV), "w", newline="", encoding="utf-8") as table:
        writer = csv.DictWriter(table, fieldnames=["job", "name", "run_id", "status", "objective", "error", "state",
                                                   "epochs"])
        writer.writeheader()
        writer.writerows(jobs)
    from tfx_hydra.plots import plot_sweep

    plot_sweep(jobs, metric, best["run_id"] if best else None, os.path.join(folder, SUMMARY_PNG))
