"""The `hparams_search` section (conf/hparams_search/optuna.yaml), checked before any trial.

Sampler and pruner are named, not instantiated from `_target_`s: the job rebuilds the same pruner
from these names in its own process (Optuna does not store pruners), and a name is what a user
types (`hparams_search.pruner=hyperband`). Nothing here imports Optuna: the names are checked
in the launching process before the study is opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig

from tfx_hydra.settings.checks import require_choice, require_positive, require_range
from tfx_hydra.settings.errors import ConfigError

SAMPLERS = ("tpe", "random", "gp", "cmaes", "qmc", "nsga2")
PRUNERS = ("median", "percentile", "successive_halving", "hyperband", "none")
DEFAULT_STORAGE_FILE = "optuna.db"  # in the launch directory, next to MLflow's mlflow.db


@dataclass
class SearchSettings:
    n_trials: int = 20                 # the study's total: a re-run of the command runs only the trials missing
    timeout: Optional[float] = None    # seconds after which this command starts no new trial
    n_jobs: int = 1                    # trials launched at once (one launcher batch)
    workers: Optional[int] = None      # long-lived workers, each running trials one after another (null: batches)
    sampler: str = "tpe"
    pruner: str = "median"
    pruner_args: Optional[dict] = None
    storage: Optional[str] = None      # None: sqlite:///<launch dir>/optuna.db
    study_name: str = "tfx_hydra"
    max_failure_rate: float = 0.25
    heartbeat_interval: float = 10.0   # seconds between a running trial's heartbeats
    grace_period: float = 60.0         # a RUNNING trial silent this long lost its process
    trial_artifacts: str = "leading"   # leading: exports while a trial leads, plots for the best (at the end); all
    trial: Optional[int] = None        # set by the sweeper for each job
    worker: Optional[str] = None       # set by the sweeper for each worker job: '<command>-<index>'

    def __post_init__(self) -> None:
        require_choice("hparams_search.sampler", self.sampler, SAMPLERS)
        require_choice("hparams_search.pruner", self.pruner, PRUNERS)
        require_choice("hparams_search.trial_artifacts", self.trial_artifacts, ("leading", "all"))
        require_positive("hparams_search.n_trials", self.n_trials, 20)
        require_positive("hparams_search.n_jobs", self.n_jobs, 2)
        if self.workers is not None:
            require_positive("hparams_search.workers", self.workers, "2 (or null: trials in batches of n_jobs)")
        require_range("hparams_search.max_failure_rate", self.max_failure_rate, 0.0, 1.0, 0.25)
        if self.timeout is not None:
            require_positive("hparams_search.timeout", self.timeout, "3600 (or null: no limit)", integer=False,
                             unit="seconds")
        if self.heartbeat_interval <= 0 or self.grace_period <= self.heartbeat_interval:
            raise ConfigError(f"hparams_search.grace_period={self.grace_period} must be longer than "
                              f"hparams_search.heartbeat_interval={self.heartbeat_interval} (both positive seconds): "
                              "a trial is declared lost after a grace period without a heartbeat.",
                              fix="hparams_search.heartbeat_interval=10 hparams_search.grace_period=60")
        if not self.study_name or any(c in self.study_name for c in "/\\ "):
            raise ConfigError(f"hparams_search.study_name={self.study_name!r} is not a name a folder can take "
                              "(it names the sweep's folder too).", fix="hparams_search.study_name=mlp-digits")


def read(config: DictConfig) -> SearchSettings:
    """The hparams_search section as SearchSettings (defaults when the sweeper was chosen directly
    with hydra/sweeper=hparams_search and the section is absent)."""
    from omegaconf import OmegaConf

    from tfx_hydra.settings.checked import validate_section

    if config.get("hparams_search") is None:
        return SearchSettings()
    # resolved where it stands: study_name's default reads the launching process's hydra node
    resolved = OmegaConf.to_container(config.hparams_search, resolve=True)
    return validate_section(OmegaConf.create({"hparams_search": resolved}), "hparams_search", SearchSettings)


def storage_url(settings: SearchSettings, launch_dir: str) -> str:
    """Where the study lives: an SQLAlchemy URL as given, a journal file (a path, relative to the
    launch dir), or by default an SQLite file in the launch dir beside mlflow.db."""
    storage = settings.storage
    if storage is None:
        return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), DEFAULT_STORAGE_FILE)}"
    if is_url(storage):
        if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////"):
            return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), storage[len('sqlite:///'):])}"
        return storage
    return os.path.join(os.path.abspath(launch_dir), os.path.expanduser(storage))


def is_url(storage: str) -> bool:
    """An SQLAlchemy URL (sqlite:///, postgresql://, mysql://, ...); anything else is a journal file."""
    return "://" in storage


def max_epochs(trainer) -> int:
    """The most epochs a trial trains (both phases): the hyperband pruner's max_resource."""
    return trainer.epochs + trainer.finetune_epochs
