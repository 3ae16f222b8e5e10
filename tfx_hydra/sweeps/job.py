"""A sweep job's side: which job this process runs (`SweepJob`, the run's `Job`), and whether an
earlier command of the same sweep already finished it.

The sweep's Hydra callback announces the job to its process as `TFX_HYDRA_SWEEP_JOB` (a JSON
environment variable, see callback.py), so a run never guesses whether it is in a sweep.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, fields

from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError
from tfx_hydra.job import Job, RunResult
from tfx_hydra.metrics import OBJECTIVE
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.sweeps.parent import JOB_NUM_TAG, PARENT_TAG, TRIAL_TAG, children

log = logging.getLogger(__name__)
JOB_ENV = "TFX_HYDRA_SWEEP_JOB"


@dataclass
class SweepJob(Job):
    """A job of a sweep: its run is a child of the sweep's parent, numbered, and skipped when an earlier
    command of the sweep finished it."""

    parent_run_id: str
    num: int
    name: str
    resume_command: str = ""  # the sweep's command with its sweep dir: what resumes it after an interrupt
    trial: bool = False       # a search's job: `num` is its trial's number

    shows_ui = False  # the sweep ends with its own line, once

    def run_tags(self) -> dict[str, str]:
        """What nests the job's run under its sweep's parent in the MLflow UI, and numbers it (a search's
        trial by its trial, from the run's first moment: a run killed at once still says which it was)."""
        return {PARENT_TAG: self.parent_run_id, JOB_NUM_TAG: str(self.num)} | (
            {TRIAL_TAG: str(self.num)} if self.trial else {})

    def tracked_as(self) -> "SweepJob":
        return self

    def finished(self, track: TrackingConfig, launch_dir: str, resume_key: str) -> RunResult | None:
        """A re-run of an interrupted sweep does not run a job again that already finished: its
        recorded objective, or None when the job has still to run."""
        if not track.enabled:
            return None
        from tfx_hydra.tracking import connect

        client, experiment_id, _ = connect(track, launch_dir)
        finished = children(client, self.parent_run_id, status="FINISHED", tags={"resume.key": resume_key},
                            newest=1, experiment_id=experiment_id)
        if not finished or OBJECTIVE not in finished[0].data.metrics:
            return None
        log.info(f"sweep job {self.num} already finished as MLflow run {finished[0].info.run_id}: skipped")
        return RunResult(finished[0].data.metrics[OBJECTIVE], finished[0].info.run_id)

    def announced(self) -> dict:
        """The fields the callback announces to the job's process (a TrialJob's live trial is not one)."""
        return {f.name: getattr(self, f.name) for f in fields(SweepJob)}


def current_job() -> SweepJob | None:
    """The sweep job this process runs, as the callback announced it; None outside a sweep."""
    raw = os.environ.get(JOB_ENV)
    return SweepJob(**json.loads(raw)) if raw else None


def announce_job(job: SweepJob | None) -> None:
    """Tell this process's run which sweep job it is (None: no longer in one)."""
    if job is None:
        os.environ.pop(JOB_ENV, None)
    else:
        os.environ[JOB_ENV] = json.dumps(job.announced())


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


