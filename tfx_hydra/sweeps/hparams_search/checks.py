"""What a search command is, checked whole before its first trial: the settings, the space, the
metrics against the pruner, the sampler and pruner by name, and the storage reached.

The sweep's Hydra callback runs these checks before it creates the parent run, so a bad value
leaves nothing behind in MLflow: one message, exit status 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import epoch_names
from tfx_hydra.settings.checked import validate_section
from tfx_hydra.settings.checks import require_made_folder
from tfx_hydra.settings.compose import keys_beside
from tfx_hydra.sweeps.hparams_search import space as search_space
from tfx_hydra.sweeps.hparams_search import study as studies
from tfx_hydra.sweeps.hparams_search.optuna import SearchSettings, is_url, max_epochs, open_storage, read, storage_url
from tfx_hydra.tracking import mask_uri

SWEEPER_TARGET = "hydra_plugins.tfx_hydra_sweeps.OptunaSweeper"
OWN_KEYS = ("hparams_search.study_name", "hparams_search.trial", "hparams_search.worker")  # set per job


NOT_COMPARED = ("hparams_search.", "hparams_search=", "export.", "export=")  # a trial's value does not hang on them


@dataclass
class SearchPlan:
    settings: SearchSettings
    space: dict[str, Any]    # key -> Optuna distribution
    fixed: list[str]         # the command's other overrides, given to every trial
    url: str                 # the study's storage
    directions: list[str]
    seed: int
    max_epochs: int
    register_as: str | None = None  # the best trial's model is registered once, not every trial's
    left_out: list[str] = field(default_factory=list)  # the preset's keys this command's model does not have

    @property
    def shown_storage(self) -> str:
        return mask_uri(self.url)

    @property
    def compared_overrides(self) -> list[str]:
        """The overrides a resumed study must share: those that change what a trial trains (not n_trials, the
        pruner or the storage, nor what is exported and registered, which a later command may change)."""
        return sorted(o for o in self.fixed if not o.lstrip("+~").startswith(NOT_COMPARED))

    def job_overrides(self, number: int, params: dict[str, Any]) -> list[str]:
        """One trial's job: the command's overrides, the trial's values, and where its trial lives."""
        passed = self.passed()
        # the storage is not passed resolved: the launcher prints every job's overrides, and a URL's
        # password belongs in an ${oc.env:...} the job resolves itself (or in PGPASSWORD)
        own = [f"hparams_search.trial={number}", f"hparams_search.study_name={self.settings.study_name}"]
        if self.register_as:
            own.append("export.register_as=null")
        return [*passed, *(search_space.override(k, v) for k, v in params.items()), *own]

    def worker_overrides(self, worker: str, index: int) -> list[str]:
        """One worker's job (worker.py): the command's overrides, which worker it is, and a folder of its
        own beside the trials' (its log: the trials it ran)."""
        return [*self.passed(), f"hparams_search.worker={worker}",
                f"hparams_search.study_name={self.settings.study_name}", f"hydra.sweep.subdir=worker_{index}"]

    def passed(self) -> list[str]:
        """The command's overrides every job gets: all but those set per job."""
        return [o for o in self.fixed if o.split("=", 1)[0].lstrip("+~") not in OWN_KEYS]


def is_search(config: DictConfig) -> bool:
    return str(config.hydra.sweeper.get("_target_", "")) == SWEEPER_TARGET


def plan(config: DictConfig, params: dict[str, Any], arguments: list[str]) -> SearchPlan:
    """The search this command asks for, or the ConfigError that says what is wrong with it."""
    settings = read(config)
    sweep = validate_section(config, "sweep")
    require_no_folds(config)
    space, fixed = search_space.parse(params, arguments)
    if not space:
        raise ConfigError("the search has nothing to search: hydra.sweeper.params is empty and no override sweeps.",
                          fix="name what to vary on the command line: 'model.units=choice(64,128)'")
    space, left_out = fit_space(config, space, set(params or {}) - {o.split("=", 1)[0] for o in arguments})
    if not space:
        raise ConfigError(f"the search has nothing to search: none of its keys ({', '.join(left_out)}) is a key of "
                          "this command's config.", fix="name what to vary on the command line, e.g. "
                          "'model.dropout=interval(0.0,0.5)'")
    trainer = validate_section(config, "trainer")
    if settings.pruner != "none":
        require_prunable(sweep.metrics, list(trainer.metrics))
    url = storage_url(settings, config.hydra.runtime.cwd)
    local_file = url[len("sqlite:///"):] if url.startswith("sqlite:///") else None if is_url(url) else url
    if local_file:  # an SQLite or journal file: its folder is made, as Hydra makes the sweep's (or one error)
        require_made_folder("hparams_search.storage", settings.storage or url, os.path.dirname(local_file),
                            fix="hparams_search.storage=<a file in a folder you can write> (default: optuna.db here)")
    studies.sampler(settings.sampler, int(config.seed), len(sweep.metrics) > 1)
    studies.pruner(settings, max_epochs(trainer))
    register_as = (config.get("export") or {}).get("register_as")
    search = SearchPlan(settings, space, fixed, url, sweep.directions, int(config.seed), max_epochs(trainer),
                        register_as, left_out)
    existing = studies.existing_study(open_storage(url), settings.study_name)  # an unreachable one fails here
    if existing is not None:  # a resumed study must be the same search, said before its parent run is touched
        studies.require_same_search(existing, settings.study_name, sweep.directions, space, search.compared_overrides)
    return search


def require_no_folds(config: DictConfig) -> None:
    """A trial is one job: k folds per trial (their mean as its objective) is not something the search runs."""
    if (config.get("cv") or {}).get("name") == "kfold":
        raise ConfigError("cv=kfold cannot run inside hparams_search: a trial is one job, and its folds would be "
                          "searched over as if they were a hyperparameter.", fix="search without cv, then "
                          "cross-validate the best trial's config: python -m tfx_hydra -m cv=kfold <its overrides>")


def require_prunable(metrics: list[str], compiled: list[str]) -> None:
    """Pruning compares one metric epoch by epoch: it must be a single metric Keras logs per epoch."""
    if len(metrics) > 1:
        raise ConfigError(f"sweep.metric={metrics}: Optuna prunes single-objective searches only.",
                          fix="hparams_search.pruner=none for a multi-objective search")
    per_epoch = epoch_names(compiled)
    if metrics[0] not in per_epoch:
        raise ConfigError(f"sweep.metric={metrics[0]} is not logged after each epoch, so the pruner cannot compare "
                          f"trials by it (each epoch logs: {', '.join(per_epoch)}).",
                          fix="sweep.metric=val_accuracy (a per-epoch validation metric), or "
                          "hparams_search.pruner=none to search on it without pruning")


def fit_space(config: DictConfig, space: dict[str, Any], from_preset: set[str]) -> tuple[dict[str, Any], list[str]]:
    """(the space this command searches, the preset's keys left out of it). A search preset lists the
    keys of every built-in model family (the MLP's `model.units`, the CNN's `model.dense_units`, ...):
    those the composed model lacks are left out, and said. A key the command line names must exist:
    a misspelt or foreign key is a ConfigError here, before the study and the parent run exist."""
    searched, left_out = {}, []
    for key, distribution in space.items():
        if key.startswith("+") or OmegaConf.select(config, key, default=_ABSENT) is not _ABSENT:
            searched[key] = distribution
        elif key in from_preset:
            left_out.append(key)
        else:
            raise _not_a_key(config, key)
    return searched, left_out


_ABSENT = object()


def _not_a_key(config: DictConfig, key: str) -> ConfigError:
    parent, _, name = key.rpartition(".")
    keys, guess = keys_beside(config, key)
    keys = [k for k in keys if not k.startswith("_")]  # `_target_` is the model's builder, not a value to search
    group = parent.split(".")[0]
    choice = config.hydra.runtime.choices.get(group)
    where = f"{group}={choice}" if choice else f"'{parent or 'the config'}'"
    close = [g for g in guess if g in keys] or [k for k in keys if name in k]
    return ConfigError(f"{key} is not a key of {where}" + (f" (its keys: {', '.join(keys)})" if keys else "")
                       + ": the search cannot vary it.",
                       fix=f"'{parent}.{close[0]}=choice(...)' on the command line" if close else
                       "vary a key the config has (python -m tfx_hydra --cfg job lists them)")
