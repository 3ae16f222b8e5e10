"""A sweep job's side: which job this process runs, what it returns to the sweeper, and whether an
earlier command of the same sweep already finished it.

The sweep's Hydra callback announces the job to its process as `TFX_HYDRA_SWEEP_JOB` (a JSON
environment variable, see callback.py), so `run()` never guesses whether it is in a sweep.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from omegaconf import DictConfig

from tfx_hydra.metrics import OBJECTIVE, end_of_run_names
from tfx_hydra.settings.errors import ConfigError
from tfx_hydra.settings.schemas import Settings, SweepConfig, TrackingConfig
from tfx_hydra.sweeps.hparams_search.trial import TRIAL_TAG
from tfx_hydra.sweeps.parent import JOB_NUM_TAG, PARENT_TAG, children

log = logging.getLogger(__name__)
JOB_ENV = "TFX_HYDRA_SWEEP_JOB"


@dataclass
class SweepJob:
    """What a run needs to know about the sweep it belongs to."""

    parent_run_id: str
    num: int
    name: str
    resume_command: str = ""  # the sweep's command with its sweep dir: what resumes it after an interrupt
    trial: bool = False       # a search's job: `num` is its trial's number

    def run_tags(self) -> dict[str, str]:
        """What nests the job's run under its sweep's parent in the MLflow UI, and numbers it (a search's
        trial by its trial, from the run's first moment: a run killed at once still says which it was)."""
        return {PARENT_TAG: self.parent_run_id, JOB_NUM_TAG: str(self.num)} | (
            {TRIAL_TAG: str(self.num)} if self.trial else {})


def current_job() -> SweepJob | None:
    """The sweep job this process runs, as the callback announced it; None outside a sweep."""
    raw = os.environ.get(JOB_ENV)
    return SweepJob(**json.loads(raw)) if raw else None


def announce_job(job: SweepJob | None) -> None:
    """Tell this process's run which sweep job it is (None: no longer in one)."""
    if job is None:
        os.environ.pop(JOB_ENV, None)
    else:
        os.environ[JOB_ENV] = json.dumps(job.__dict__)


def require_known_metric(settings: Settings) -> None:
    """sweep.metric must be something the run will report: found out after training, the run would be lost."""
    known = end_of_run_names(settings.trainer)
    for metric in settings.sweep.metrics:
        if metric not in known:
            raise ConfigError(f"sweep.metric={metric} is not a metric this run logs "
                              f"(trainer.metrics={list(settings.trainer.metrics)}).",
                              fix=f"one of: {', '.join(known)}; or add the metric to trainer.metrics")


def require_multirun_for_search(cfg: DictConfig) -> None:
    """A search preset without `-m` would train once, with the defaults, and search nothing: said before
    any work. A job of a search (its trial set), or a re-run of one, is not a search command."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():  # a Python caller's run(compose(...)): no command line to fix
        return
    hydra = HydraConfig.get()
    preset = hydra.runtime.choices.get("hparams_search")
    if preset and hydra.mode == RunMode.RUN and (cfg.get("hparams_search") or {}).get("trial") is None:
        raise ConfigError(f"hparams_search={preset} searches only in a multirun (-m): without it this command "
                          "would train once, with the defaults, and search nothing.",
                          fix="python -m tfx_hydra -m " + " ".join(hydra.overrides.task))


def objective(metrics: dict[str, float], sweep: SweepConfig) -> float | list[float]:
    """The value Hydra's sweepers optimise: `sweep.metric` from the finished run (a list of
    values, in sweep.metric's order, for a multi-objective search)."""
    missing = [m for m in sweep.metrics if m not in metrics]
    if missing:
        raise ConfigError(f"sweep.metric={missing[0]} is not a metric this run produced.",
                          fix=f"one of: {', '.join(sorted(metrics))}")
    values = [metrics[m] for m in sweep.metrics]
    return values[0] if isinstance(sweep.metric, str) else values


def record_objective(metrics: dict[str, float], sweep: SweepConfig, tracker) -> float | list[float]:
    """The objective (see `objective`), logged on the run as `objective`: what a re-run of the sweep
    reads back to skip this job, and what the sweep's table ranks."""
    value = objective(metrics, sweep)
    tracker.log_metrics({OBJECTIVE: value[0] if isinstance(value, list) else value})
    return value


def finished_objective(job: SweepJob | None, track: TrackingConfig, launch_dir: str, resume_key: str) -> float | None:
    """A re-run of an interrupted sweep does not run a job again that already finished: its
    recorded objective, or None when the job has still to run."""
    if job is None or not track.enabled:
        return None
    from tfx_hydra.tracking import connect

    client, experiment_id, _ = connect(track, launch_dir)
    finished = children(client, job.parent_run_id, status="FINISHED", tags={"resume.key": resume_key}, newest=1,
                        experiment_id=experiment_id)
    if not finished or OBJECTIVE not in finished[0].data.metrics:
        return None
    log.info(f"sweep job {job.num} already finished as MLflow run {finished[0].info.run_id}: skipped")
    return finished[0].data.metrics[OBJECTIVE]
