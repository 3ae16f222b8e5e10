"""hparams_search: Optuna searches as Hydra sweeps (conf/hparams_search/optuna.yaml selects
`hydra/sweeper=hparams_search`, the sweeper in hydra_plugins/tfx_hydra_sweeps).

The sweeper asks Optuna for trials, launches each as a Hydra job through whatever launcher the
command chose (in process, joblib, submitit, Slurm), and tells Optuna how it ended. Each job
reports its epochs to its live trial and stops when pruned. The study lives in a storage every
command can reach, so a search resumes after a crash and spreads over machines.

    optuna.py         hparams_search=optuna: its section (sampler, pruner, storage, study name, heartbeat),
                      and the Optuna sampler, pruner and storage it names
    space.py          hydra.sweeper.params and sweep overrides as Optuna distributions
    study.py          the study: opened or resumed (the same search), the trials it still needs, lost trials
    checks.py         everything checked before the first trial (and before the parent run exists)
    sweeper.py        OptunaSweeper: Hydra's Sweeper API; ask, launch a batch (or start the workers), tell
    worker.py         a worker job (hparams_search.workers=N): trials one after another until the study is complete
    ask_and_tell.py   the sweeper's side of a trial: asking the study for one, telling it how the trial's job
                      ended (or, for an interrupted batch, how its finished run ended)
    trial.py          a trial's life in its job: TrialJob (the run's job), the live trial, heartbeats, PrunedResult
    pruning.py        TrialPruning: the Keras callback the trial hands to training, which raises Pruned
    report.py         what the parent run gets: state counts, best and Pareto trials, plots, the best model

Optuna is imported inside the functions: Hydra imports every sweeper plugin even for `--help`.
"""

from tfx_hydra.sweeps.hparams_search.trial import PrunedResult, TrialJob, is_trial
from tfx_hydra.sweeps.hparams_search.worker import WorkerReport, is_worker, serve

__all__ = ["PrunedResult", "TrialJob", "WorkerReport", "is_trial", "is_worker", "serve"]
