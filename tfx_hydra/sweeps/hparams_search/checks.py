"""What a search command is, checked whole before its first trial: the settings, the space, the
metrics against the pruner, the sampler and pruner by name, and the storage reached.

The sweep's Hydra callback runs these checks before it creates the parent run, so a bad value
leaves nothing behind in MLflow: one message, exit status 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError
from tfx_hydra.metrics import epoch_names
from tfx_hydra.settings import validate_section
from tfx_hydra.sweeps.hparams_search import space as search_space
from tfx_hydra.sweeps.hparams_search import study as studies
from tfx_hydra.sweeps.hparams_search.settings import SearchSettings, is_url, max_epochs, read, storage_url
from tfx_hydra.tracking import mask_uri

SWEEPER_TARGET = "hydra_plugins.tfx_hydra_sweeps.OptunaSweeper"
OWN_KEYS = ("hparams_search.study_name", "hparams_search.trial")  # set per job


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

    @property
    def shown_storage(self) -> str:
        return mask_uri(self.url)

    @property
    def compared_overrides(self) -> list[str]:
        """The overrides a resumed study must share: those that change what a trial trains
        (not n_trials, the pruner or the storage, which a later command may change)."""
        return sorted(o for o in self.fixed if not o.lstrip("+~").startswith("hparams_search"))

    def job_overrides(self, number: int, params: dict[str, Any]) -> list[str]:
        """One trial's job: the command's overrides, the trial's values, and where its trial lives."""
        passed = [o for o in self.fixed if o.split("=", 1)[0].lstrip("+~") not in OWN_KEYS]
        # the storage is not passed resolved: the launcher prints every job's overrides, and a URL's
        # password belongs in an ${oc.env:...} the job resolves itself (or in PGPASSWORD)
        own = [f"hparams_search.trial={number}", f"hparams_search.study_name={self.settings.study_name}"]
        if self.register_as:
            own.append("export.register_as=null")
        return [*passed, *(search_space.override(k, v) for k, v in params.items()), *own]


def is_search(config: DictConfig) -> bool:
    return str(config.hydra.sweeper.get("_target_", "")) == SWEEPER_TARGET


def plan(config: DictConfig, params: dict[str, Any], arguments: list[str]) -> SearchPlan:
    """The search this command asks for, or the ConfigError that says what is wrong with it."""
    settings = read(config)
    sweep = validate_section(config, "sweep")
    space, fixed = search_space.parse(params, arguments)
    if not space:
        raise ConfigError("the search has nothing to search: hydra.sweeper.params is empty and no override sweeps.",
                          fix="hydra.sweeper.params.model.units='choice(64,128)' (or model.units=64,128)")
    trainer = validate_section(config, "trainer")
    if settings.pruner != "none":
        require_prunable(sweep.metrics, list(trainer.metrics))
    url = storage_url(settings, config.hydra.runtime.cwd)
    local_file = url[len("sqlite:///"):] if url.startswith("sqlite:///") else None if is_url(url) else url
    if local_file:  # an SQLite or journal file: its folder is made, as Hydra makes the sweep's
        os.makedirs(os.path.dirname(local_file), exist_ok=True)
    studies.sampler(settings.sampler, int(config.seed), len(sweep.metrics) > 1)
    studies.pruner(settings, max_epochs(trainer))
    register_as = (config.get("export") or {}).get("register_as")
    search = SearchPlan(settings, space, fixed, url, sweep.directions, int(config.seed), max_epochs(trainer),
                        register_as)
    existing = studies.existing_study(studies.storage(url), settings.study_name)  # an unreachable one fails here
    if existing is not None:  # a resumed study must be the same search, said before its parent run is touched
        studies.require_same_search(existing, settings.study_name, sweep.directions, space, search.compared_overrides)
    return search


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
