"""What a sweep command is, read from Hydra's config in the launching process: its overrides and
the command that re-runs it, the keys it varies, how many jobs it plans, the metric its table
ranks by, and whether its launcher can run here. Plain functions of the config: no MLflow.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.checked import validate_section
from tfx_hydra.sweeps.hparams_search import checks, space


def primary_objective(config: DictConfig) -> tuple[str, str]:
    """The metric and direction the sweep's table ranks by: the first of a multi-objective search."""
    sweep = validate_section(config, "sweep")
    return sweep.metrics[0], sweep.directions[0]


def require_launcher_runs_here(config: DictConfig) -> None:
    """Slurm's launcher submits through `srun`/`sbatch`; off a cluster submitit fails deep in its
    executor with a traceback, after the sweep has begun. Said here, first, with the way out."""
    launcher = str(config.hydra.launcher.get("_target_", ""))
    if launcher.endswith("SlurmLauncher") and shutil.which("srun") is None:
        raise ConfigError("hydra/launcher=slurm submits every job to Slurm, but this machine has no Slurm "
                          "(`srun` is not on PATH).",
                          fix="run the sweep on the cluster's login node (where srun and sbatch are), or on this "
                          "machine use hydra/launcher=local_gpus (one job per GPU) or hydra/launcher=parallel "
                          "(local processes)")
    if launcher.endswith(".RayLauncher") and not ray_launcher_installed():
        raise ConfigError("hydra/launcher=ray runs every job as a Ray task, but Ray or Hydra's Ray launcher is not "
                          "installed here.",
                          fix='pip install "tfx_hydra[ray]" (ray[default,train] and hydra-ray-launcher)')
    if OmegaConf.select(config, "strategy.cluster", default=None) == "ray" and not launcher.endswith(".RayLauncher"):
        raise ConfigError("strategy.cluster=ray trains each job on Ray Train workers, which only hydra/launcher=ray "
                          f"starts; this sweep's launcher is {launcher.rsplit('.', 1)[-1]}.",
                          fix="add hydra/launcher=ray, or strategy.cluster=slurm under hydra/launcher=slurm")


def ray_launcher_installed() -> bool:
    """Ray and Hydra's Ray launcher importable (found, not imported: Ray takes seconds to import)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("ray", "hydra_plugins.hydra_ray_launcher"))


#  ------------------------------------------------------------

def sweep_tags(config: DictConfig, sweep_dir: str) -> dict[str, str]:
    """How the sweep was launched: its overrides (Hydra's own first: launcher, sweeper, hydra.*),
    launcher and sweeper, and where it writes. `command` re-runs the same sweep."""
    overrides = sweep_overrides(config)
    tags = {
        "sweep.overrides": " ".join(overrides),
        "sweep.hydra_overrides": " ".join(hydra_overrides(config)),
        "sweep.launcher": str(config.hydra.launcher.get("_target_", "")),
        "sweep.sweeper": str(config.hydra.sweeper.get("_target_", "")),
        "sweep.dir": sweep_dir,
        "sweep.metric": str(config.sweep.metric),
        "sweep.direction": str(config.sweep.direction),
        "command": " ".join(["python -m tfx_hydra -m", *(shlex.quote(o) for o in overrides)]),
    }
    params = config.hydra.sweeper.get("params")
    if params:
        tags["sweep.params"] = json.dumps(OmegaConf.to_container(params, resolve=False), sort_keys=True)
    return tags


def parent_params(config: DictConfig, search: checks.SearchPlan | None) -> dict[str, str]:
    """What the sweep itself is, as the parent run's params (the MLflow UI's Parameters table and
    columns): each searched key's values (`space.<key>`), and a search's sampler, pruner and
    n_trials as the command that made the parent asked for them."""
    if search is not None:
        params = {f"space.{key.lstrip('+')}": space.shown(d) for key, d in search.space.items()}
        settings = search.settings
        return params | {"sampler": settings.sampler, "pruner": settings.pruner, "n_trials": str(settings.n_trials),
                         "study": settings.study_name}
    return {f"space.{o.get_key_element().lstrip('+~')}": o.get_value_string() for o in sweeping_overrides(config)}


def parent_description(config: DictConfig, search: checks.SearchPlan | None, planned: int | None,
                       command: str) -> str:
    """The parent run's description (the MLflow UI's run page): what was swept, ranked how, and the
    command that runs it again."""
    metric, direction = primary_objective(config)
    keys = ", ".join(k.lstrip("+~") for k in (search.space if search is not None else swept_keys(config)))
    if search is not None:
        settings = search.settings
        what = (f"Optuna search ({settings.sampler} sampler, {settings.pruner} pruner) of study "
                f"`{settings.study_name}`: {settings.n_trials} trials over {keys}")
    else:
        what = f"Grid sweep of {planned if planned is not None else 'its'} jobs over {keys}"
    return (f"{what}, each a child run, ranked by {metric} ({direction}). "
            f"Run it again, or resume it, with `{command}`.")


def resume_command(command: str, sweep_dir: str) -> str:
    """The sweep's command pointed at its own sweep dir: finished jobs are skipped, the rest resume."""
    if "hydra.sweep.dir=" in command:
        return command
    return f"{command} hydra.sweep.dir={shlex.quote(sweep_dir)}"


MULTIRUN_OVERRIDE = "hydra.mode=MULTIRUN"  # what Hydra adds for -m; the command says -m itself


def hydra_overrides(config: DictConfig) -> list[str]:
    """The overrides of Hydra's own config the user typed (hydra/launcher=..., hydra.launcher.*,
    hydra.sweeper.*, hydra.sweep.dir=...): Hydra keeps them apart from the task's."""
    return [o for o in config.hydra.overrides.get("hydra", []) if o != MULTIRUN_OVERRIDE]


def sweep_overrides(config: DictConfig) -> list[str]:
    """Every override of the sweep's command line: Hydra's own, then the task's."""
    return [*hydra_overrides(config), *config.hydra.overrides.task]


def sweeping_overrides(config: DictConfig) -> list:
    """The task overrides that sweep (`a=1,2`, `range(...)`, `choice(...)`), as Hydra's parser reads them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    return [o for o in parsed if o.is_sweep_override()]


def swept_keys(config: DictConfig) -> list[str]:
    """Config keys the sweep varies: comma/range/choice overrides and a sweeper's `params`."""
    keys = [o.get_key_element() for o in sweeping_overrides(config)]
    params = config.hydra.sweeper.get("params") or {}
    return keys + [str(k) for k in params if str(k) not in keys]


# The MLflow UI's run list cuts a name at ~30 characters: a key's last part, and these shorter still
SHORT_KEYS = {"learning_rate": "lr", "batch_size": "batch", "weight_decay": "wd"}


def job_name(num: int, overrides: list[str], keys: list[str], trial: bool = False,
             scientific: list[str] = ()) -> str:
    """'job 3: units 128, lr 1e-2' or, for a search, 'trial 7: lr 5.2e-4, units 512': what sets this job
    apart, short enough for the MLflow UI's run list (numbers rounded for display; the exact values are
    the run's params). The `scientific` keys' numbers are written as 1e-2 in every job of the sweep (its
    values reach below 0.01 or to 1e5: scientific_keys), so one table writes one key's numbers one way."""
    own = [o.split("=", 1) for o in overrides if "=" in o and o.split("=", 1)[0].lstrip("+~") in keys]
    label = f"{'trial' if trial else 'job'} {num}"
    shown = ", ".join(f"{short_key(key.lstrip('+~'))} {short_value(value, key.lstrip('+~') in scientific)}"
                      for key, value in own)
    return f"{label}: {shown}"[:200] if shown else label


def scientific_keys(config: DictConfig) -> list[str]:
    """The swept keys whose values (a grid's, a search space's bounds) reach below 0.01 or to 1e5: each job's
    name writes that key's numbers in one notation, 1e-3 and 1e-2 alike."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    parser = OverridesParser.create()
    params = [parser.parse_override(f"{k}={v}") for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    keys = []
    for override in [*sweeping_overrides(config), *params]:
        value = override.value()
        found = (value.list if isinstance(value, ChoiceSweep) else [value.start, value.end]
                 if isinstance(value, IntervalSweep) else [value.start, value.stop] if isinstance(value, RangeSweep)
                 else [])
        numbers = [float(v) for v in found if isinstance(v, float)]
        if any(v != 0 and not 1e-2 <= abs(v) < 1e5 for v in numbers):
            keys.append(override.get_key_element().lstrip("+~"))
    return keys


def short_key(key: str) -> str:
    """'optimizer.learning_rate' -> 'lr', 'model.units' -> 'units': the key's last part."""
    last = key.rsplit(".", 1)[-1]
    return SHORT_KEYS.get(last, last)


def short_value(text: str, scientific: bool = False) -> str:
    """A float with two significant digits ('0.0005180169728534583' -> '5.2e-4', '0.01', '0.12'; `scientific`:
    '1e-2', '1.2e-1' too), an integer and anything that is not a number as written ('512', 'cnn')."""
    try:
        number = float(text)
    except ValueError:
        return text
    if not any(mark in text.lower() for mark in (".", "e", "inf", "nan")):
        return text  # an integer
    if number != 0 and math.isfinite(number) and (scientific or not 1e-2 <= abs(number) < 1e5):
        mantissa, exponent = f"{number:.1e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{number:.2g}"


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep will launch: the grid's size for Hydra's basic sweeper (its `params`, as
    cv=kfold's folds, and the command line's, as it expands them), n_trials for
    Optuna's; None for a sweeper that does not say."""
    sweeper = str(config.hydra.sweeper.get("_target_", ""))
    if sweeper.endswith("BasicSweeper"):
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = [f"{key}={value}" for key, value in (config.hydra.sweeper.get("params") or {}).items()]
        try:  # the basic sweeper's own expansion of the grid (an internal helper: a count, never a failure)
            parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
            return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
        except Exception:  # noqa: BLE001
            return None
    trials = (config.get("hparams_search") or {}).get("n_trials") if checks.is_search(config) else None
    return int(trials) if isinstance(trials, int) else None


def in_multirun(config: DictConfig) -> bool:
    from hydra.types import RunMode

    return config.hydra.mode == RunMode.MULTIRUN


def sweep_name(sweep_dir: str) -> str:
    """'sweep 2026-11-30/23-01-02-123456' (the sweep dir under multirun/)."""
    parts = sweep_dir.rstrip(os.sep).split(os.sep)
    return "sweep " + "/".join(parts[-2:])
