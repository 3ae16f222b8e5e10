"""sweeps: everything about a multirun (`python -m tfx_hydra -m ...`), whatever sweeper or launcher
runs it. A sweep is one parent MLflow run with a child run per job.

    callback.py        SweepCallback, Hydra's hooks: the parent made before any job, each job told its place
    launch.py          what the sweep command is: its overrides, swept keys, planned jobs, launcher check
    parent.py          the parent run: its record in the sweep dir, reopening, closing, lost children,
                       and `children`, the one query for a parent's child runs
    summary.py         the table the sweep ends with, sweep_summary.csv and .png
    job.py             SweepJob: which job this process runs (the run's Job), finished jobs skipped
    hparams_search/    `hparams_search=optuna`: the Optuna search as a Hydra sweeper (pruning, resumable
                       studies); Hydra finds the sweeper through hydra_plugins/tfx_hydra_sweeps

`run()` names no sweep: the entrypoint hands it the job (`run_as_job`), whose hooks add a sweep's or a
search's part (tfx_hydra/job.py). Its top-level imports stay light (no TensorFlow,
MLflow or Optuna): Hydra imports the callback and the sweeper for `--help` too.
"""

from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig

from tfx_hydra.job import Job, RunResult
from tfx_hydra.sweeps.hparams_search import PrunedResult, TrialJob, WorkerReport, is_trial
from tfx_hydra.sweeps.hparams_search import is_worker as is_search_worker
from tfx_hydra.sweeps.hparams_search import serve as serve_trials
from tfx_hydra.sweeps.job import SweepJob, current_job, require_multirun_for_search

__all__ = ["PrunedResult", "SweepJob", "TrialJob", "WorkerReport", "current_job", "job_of",
           "require_multirun_for_search", "run_as_job"]


def job_of(cfg: DictConfig) -> Job:
    """The job this process's run works for: a search's trial, a sweep's job (as the sweep's callback
    announced it), or nobody's but the user's."""
    announced = current_job()
    if announced is None:
        return Job()
    return TrialJob(**announced.announced()) if announced.trial and is_trial(cfg) else announced


def run_as_job(cfg: DictConfig, run: Callable[[DictConfig, Job], RunResult]) -> Any:
    """Hydra's task function's work: a search's worker job serves trials, each run as its own job; any other
    job runs once (a search preset without -m refused first). Returns what the job gives its sweeper (the
    objective; a pruned trial's PrunedResult; a worker's WorkerReport)."""
    if is_search_worker(cfg):
        return serve_trials(cfg, lambda trial: run_as_job(trial, run))
    require_multirun_for_search(cfg)
    job = job_of(cfg)
    return job.returned(run(cfg, job))
