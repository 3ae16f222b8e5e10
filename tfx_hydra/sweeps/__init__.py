"""sweeps: everything about a multirun (`python -m tfx_hydra -m ...`), whatever sweeper or launcher
runs it. A sweep is one parent MLflow run with a child run per job.

    callback.py        SweepCallback, Hydra's hooks: the parent made before any job, each job told its place
    launch.py          what the sweep command is: its overrides, swept keys, planned jobs, launcher check
    parent.py          the parent run: its record in the sweep dir, reopening, closing, lost children,
                       and `children`, the one query for a parent's child runs
    summary.py         the table the sweep ends with, sweep_summary.csv and .png
    job.py             a job's side: which job this process runs, its objective, finished jobs skipped
    hparams_search/    `hparams_search=optuna`: the Optuna search as a Hydra sweeper (pruning, resumable
                       studies); Hydra finds the sweeper through hydra_plugins/tfx_hydra_sweeps

`run()` asks this package alone about sweeps. Its top-level imports stay light (no TensorFlow,
MLflow or Optuna): Hydra imports the callback and the sweeper for `--help` too.
"""

from tfx_hydra.sweeps.hparams_search import Pruned, PrunedResult, WorkerReport, reporting_trial
from tfx_hydra.sweeps.hparams_search import is_worker as is_search_worker
from tfx_hydra.sweeps.hparams_search import serve as serve_trials
from tfx_hydra.sweeps.job import (
                                  SweepJob,
                                  current_job,
                                  finished_objective,
                                  objective,
                                  record_objective,
                                  require_known_metric,
                                  require_multirun_for_search,
)

__all__ = ["Pruned", "PrunedResult", "SweepJob", "WorkerReport", "current_job", "finished_objective",
           "is_search_worker", "objective", "record_objective", "reporting_trial", "require_known_metric",
           "require_multirun_for_search", "serve_trials"]
