"""optuna: `hparams_search=optuna` (conf/hparams_search/optuna.yaml): its section, checked before any trial,
and the Optuna objects it names: the sampler, the pruner and the study's storage.

Sampler and pruner are named, not instantiated from `_target_`s: the job rebuilds the same pruner
from these names in its own process (Optuna does not store pruners), and a name is what a user
types (`hparams_search.pruner=hyperband`). Optuna is imported inside the functions that build its
objects: the names are checked in the launching process before the study is opened. The storage (an
SQLite file, a database server or a journal file) is opened with the error a user can act on, and
kept open for the trials that follow in the same process.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.checks import require_choice, require_positive, require_range, require_sqlite_file
from tfx_hydra.tracking import mask_uri

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


def sampler(name: str, seed: int, multi_objective: bool):
    """Optuna's sampler by name, seeded by the run's `seed` (the same seed proposes the same trials)."""
    import warnings

    import optuna

    # TPE's multivariate and constant_liar options, GP, QMC: "experimental" in Optuna since 2.x-3.x
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    samplers = {
        # constant_liar: trials running side by side (n_jobs, two commands) are not proposed twice
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed),
        "qmc": lambda: optuna.samplers.QMCSampler(seed=seed),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed),
    }
    if multi_objective and name in ("gp", "cmaes"):
        raise ConfigError(f"hparams_search.sampler={name} optimises one metric; sweep.metric lists several.",
                          fix="hparams_search.sampler=tpe (or nsga2) for a multi-objective search")
    needs = {"gp": "torch", "cmaes": "cmaes"}  # imported by Optuna only once it samples: asked for here
    try:
        if name in needs:
            importlib.import_module(needs[name])
        return samplers[name]()
    except ImportError as err:
        package = needs.get(name, str(err))
        raise ConfigError(f"hparams_search.sampler={name} needs {package}, which is not installed.",
                          fix=f"pip install {package}, or hparams_search.sampler=tpe") from None


def pruner(settings: SearchSettings, max_epochs: int):
    """The pruner by name and its arguments (hparams_search.pruner_args). Pruners are not stored
    with the study, so each job builds the same one again from these settings."""
    import optuna

    pruners = {
        "median": optuna.pruners.MedianPruner,
        "percentile": lambda **kw: optuna.pruners.PercentilePruner(**({"percentile": 25.0} | kw)),
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": lambda **kw: optuna.pruners.HyperbandPruner(**({"min_resource": 1, "max_resource": max_epochs}
                                                                     | kw)),
        "none": optuna.pruners.NopPruner,
    }
    try:
        return pruners[settings.pruner](**dict(settings.pruner_args or {}))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"hparams_search.pruner_args={dict(settings.pruner_args or {})} do not fit "
                          f"pruner={settings.pruner}: {err}",
                          fix="see optuna.pruners in Optuna's documentation for its arguments") from None


def open_storage(url: str):
    """The Optuna storage behind `url`: a database (RDB) or a journal file; unreachable ones fail
    here, with the URL (password masked) and the way out. A file's (SQLite, journal) is opened once
    per process and file: a search's trials in one process (the basic launcher, a worker) share it,
    where opening an RDB storage afresh reads Optuna's schema migrations each time (~20 ms a trial).
    A file replaced or removed since (its inode changed) is opened anew, so nothing is written into a
    file that is gone. A database server's is opened each time: it may have restarted in between."""
    path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else None if is_url(url) else url
    if url.startswith("sqlite:///"):
        require_sqlite_file("hparams_search.storage", path, "Optuna study", ("studies", "trials"))
    if path is None:  # a database server's
        return _open_storage(url)
    try:
        found = os.stat(path)
    except OSError:  # created now: opened anew until the file exists
        return _open_storage(url)
    return _opened_storage(url, (found.st_dev, found.st_ino))


@functools.lru_cache(maxsize=4)
def _opened_storage(url: str, file: tuple[int, int]):
    """`url`'s storage, for the file `file` (device, inode) names."""
    return _open_storage(url)


def _open_storage(url: str):
    """`url`'s storage, opened (an error is not cached: the next call tries again)."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        if not is_url(url):
            return JournalStorage(JournalFileBackend(url))
        engine_kwargs = {"connect_args": {"connect_timeout": 5}} if url.startswith("postgresql") else {}
        for attempt in range(5):
            try:
                return RDBStorage(url, engine_kwargs=engine_kwargs)
            except Exception as err:  # noqa: BLE001
                # two commands creating a fresh database's tables at once: the later one's schema
                # migration collides with the first's (alembic_version); once they exist, it opens
                if attempt == 4 or not any(s in str(err) for s in ("alembic_version", "already exists", "locked")):
                    raise
                time.sleep(0.5 + attempt)
    except (ImportError, ModuleNotFoundError) as err:
        raise ConfigError(f"hparams_search.storage={mask_uri(url)} needs a database driver that is not installed: "
                          f"{err}.", fix="pip install 'psycopg[binary]' (PostgreSQL: SQLAlchemy 2.1 drives it "
                          "by default) or pymysql (MySQL)") from None
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's and the driver's errors, said as one line
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise ConfigError(f"hparams_search.storage={mask_uri(url)} cannot be reached: {reason}",
                          fix="start the database (or correct the URL), or drop hparams_search.storage to keep the "
                          "study in an SQLite file in the launch directory") from None
