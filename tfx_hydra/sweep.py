"""sweep: a multirun recorded as one parent MLflow run with one child run per job.

Hydra calls `SweepCallback` in the launching process (`on_multirun_start/end`) and in
every job's own process (`on_job_start/end`), whichever launcher runs the jobs:
in-process (basic), local processes (joblib, submitit_local) or Slurm nodes
(submitit_slurm). So the parent run is made once, before any job, and its id travels
to the jobs through a small file in the sweep directory: every launcher shares that
folder (Slurm jobs see it on the cluster's shared filesystem), and nothing depends on
the launcher pickling our state or forwarding our environment. In the job's process
the callback hands the id to the run as `TFX_HYDRA_SWEEP_JOB` (a JSON environment
variable, read by `current_job`), so the task function never guesses whether it is in a sweep.

When the sweep ends, the parent is closed with its summary (sweep_parent.py). Hydra's basic
sweeper raises after a batch with a failed job, so `on_multirun_end` never comes: an exit
hook then closes the parent as FAILED with the same summary, rather than leaving it RUNNING.

An Optuna search (hparams_search=optuna) is checked whole here, before its parent exists
(hparams_search/checks.py), and its parent is the study's: every command of one study, on
any machine, finds the same parent run by its `sweep.study` tag.

The store itself is created here too, before any job starts: two processes creating a
fresh SQLite store at once fail in its schema migration.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tfx_hydra import tracking
from tfx_hydra.errors import ConfigError
from tfx_hydra.hparams_search import checks
from tfx_hydra.metrics import end_of_run_names
from tfx_hydra.sweep_parent import OBJECTIVE_METRIC, PARENT_RUN_FILE, Parent, read_parent_record, say
from tfx_hydra.schemas import Settings, SweepConfig, TrackingConfig, validate_section

log = logging.getLogger(__name__)
JOB_ENV = "TFX_HYDRA_SWEEP_JOB"


@dataclass
class SweepJob:
    """What a run needs to know about the sweep it belongs to."""

    parent_run_id: str
    num: int
    name: str
    resume_command: str = ""  # the sweep's command with its sweep dir: what resumes it after an interrupt


def current_job() -> SweepJob | None:
    """The sweep job this process runs, as the callback announced it; None outside a sweep."""
    raw = os.environ.get(JOB_ENV)
    return SweepJob(**json.loads(raw)) if raw else None


# --- a job's side: its objective --------------------------------------------------------------

def require_known_metric(settings: Settings) -> None:
    """sweep.metric must be something the run will report: found out after training, the run would be lost."""
    known = end_of_run_names(settings.trainer)
    for metric in settings.sweep.metrics:
        if metric not in known:
            raise ConfigError(f"sweep.metric={metric} is not a metric this run logs "
                              f"(trainer.metrics={list(settings.trainer.metrics)}).",
                              fix=f"one of: {', '.join(known)}; or add the metric to trainer.metrics")


def objective(metrics: dict[str, float], sweep: SweepConfig) -> float | list[float]:
    """The value Hydra's sweepers optimise: `sweep.metric` from the finished run (a list of
    values, in sweep.metric's order, for a multi-objective search)."""
    missing = [m for m in sweep.metrics if m not in metrics]
    if missing:
        raise ConfigError(f"sweep.metric={missing[0]} is not a metric this run produced.",
                          fix=f"one of: {', '.join(sorted(metrics))}")
    values = [metrics[m] for m in sweep.metrics]
    return values[0] if isinstance(sweep.metric, str) else values


def finished_objective(job: SweepJob | None, track: TrackingConfig, launch_dir: str, resume_key: str) -> float | None:
    """A re-run of an interrupted sweep does not run a job again that already finished: its
    recorded objective, or None when the job has still to run."""
    if job is None:
        return None
    finished = tracking.finished_sweep_job(track, launch_dir, resume_key, job.parent_run_id)
    if finished is None or OBJECTIVE_METRIC not in finished.data.metrics:
        return None
    log.info(f"sweep job {job.num} already finished as MLflow run {finished.info.run_id}: skipped")
    return finished.data.metrics[OBJECTIVE_METRIC]


class SweepCallback(Callback):
    """Hydra callback (conf/config.yaml: hydra.callbacks.mlflow_sweep)."""

    def __init__(self) -> None:
        self._parent: Parent | None = None

    # --- launching process ------------------------------------------------------------

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        search = None
        try:
            require_launcher_runs_here(config)  # before any record of a sweep that could not start
            if checks.is_search(config):  # an Optuna search: its settings, space and storage, checked whole
                search = checks.plan(config, config.hydra.sweeper.get("params") or {},
                                     list(config.hydra.overrides.task))
        except ConfigError as err:
            # Hydra turns a callback's exception into a warning and goes on to the launcher, which
            # then fails with a traceback; SystemExit passes through, so this message is all there is.
            raise SystemExit(str(err)) from None
        settings = validate_section(config, "tracking")  # a bad value: the same ConfigError a run gives
        if not settings.enabled:
            return
        launch_dir = config.hydra.runtime.cwd
        tracking.check_store_reachable(tracking.resolve_tracking_uri(settings, launch_dir), settings.connect_timeout)
        client, experiment_id, uri = tracking.connect(settings, launch_dir)
        tracking.close_lost_runs(client, [experiment_id])  # runs an earlier, killed command left RUNNING
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        os.makedirs(sweep_dir, exist_ok=True)
        run_id = _reopen_parent(client, sweep_dir)  # the same sweep dir re-run: the same parent
        tags = sweep_tags(config, sweep_dir)
        if search is not None:  # every command of one study, wherever it runs, shares one parent
            tags[STUDY_TAG] = f"{search.settings.study_name} in {search.shown_storage}"
            run_id = run_id or study_parent(client, experiment_id, tags[STUDY_TAG])
        if run_id is None:
            run = client.create_run(experiment_id, run_name=_sweep_name(sweep_dir), tags=tracking.mask_secrets(tags))
            run_id = run.info.run_id
            if search is not None:
                run_id = study_parent(client, experiment_id, tags[STUDY_TAG], made=run_id)
        resume = tracking.mask_text(resume_command(tags["command"], sweep_dir))
        # written whole, then moved in: a second command of the same study may be reading it
        partial = os.path.join(sweep_dir, f"{PARENT_RUN_FILE}.{os.getpid()}")
        with open(partial, "w", encoding="utf-8") as record:
            json.dump({"run_id": run_id, "uri": uri, "swept_keys": swept_keys(config), "resume_command": resume},
                      record)
        os.replace(partial, os.path.join(sweep_dir, PARENT_RUN_FILE))
        self._parent = Parent(client, run_id, sweep_dir, *primary_objective(config), planned=planned_jobs(config),
                              resume=resume, ui=tracking.ui_command(uri, launch_dir), shared=search is not None)
        atexit.register(self._parent.close_unfinished)
        planned = self._parent.planned
        say(f"tfx_hydra sweep: {planned if planned is not None else 'its'} jobs under MLflow parent run {run_id}; "
            f"each job's log: {os.path.join(sweep_dir, '<job>', 'tfx_hydra.log')}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._parent is not None:
            atexit.unregister(self._parent.close_unfinished)
            self._parent.close("FINISHED")

    # --- each job's process -------------------------------------------------------------

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        record = read_parent_record(str(config.hydra.sweep.dir)) if _in_multirun(config) else None
        if record is None:
            return
        trial = (config.get("hparams_search") or {}).get("trial")  # a search's job: named by its trial
        num = int(config.hydra.job.num) if trial is None else int(trial)
        overrides = list(config.hydra.overrides.task)
        os.environ[JOB_ENV] = json.dumps({"parent_run_id": record["run_id"], "num": num,
                                          "name": job_name(num, overrides, record["swept_keys"]),
                                          "resume_command": record.get("resume_command", "")})

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        job = current_job()
        os.environ.pop(JOB_ENV, None)
        if job is None or job_return.status.name != "FAILED":
            return
        record = read_parent_record(str(config.hydra.sweep.dir))
        _record_failure_without_run(record["uri"], job, config, job_return)


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


# --- what the parent records ------------------------------------------------------------

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


def swept_keys(config: DictConfig) -> list[str]:
    """Config keys the sweep varies: comma/range/choice overrides and a sweeper's `params`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    keys = [o.get_key_element() for o in parsed if o.is_sweep_override()]
    params = config.hydra.sweeper.get("params") or {}
    return keys + [str(k) for k in params if str(k) not in keys]


def job_name(num: int, overrides: list[str], keys: list[str]) -> str:
    """'3: model.units=128 optimizer.learning_rate=0.01' — what sets this job apart."""
    own = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in keys]
    return f"{num}: {' '.join(own)}"[:200] if own else f"job {num}"


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep will launch: the grid's size for Hydra's basic sweeper, n_trials for
    Optuna's; None for a sweeper that does not say."""
    sweeper = str(config.hydra.sweeper.get("_target_", ""))
    if sweeper.endswith("BasicSweeper"):
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        try:  # the basic sweeper's own expansion of the grid (an internal helper: a count, never a failure)
            parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
            return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
        except Exception:  # noqa: BLE001
            return None
    trials = (config.get("hparams_search") or {}).get("n_trials") if checks.is_search(config) else None
    return int(trials) if isinstance(trials, int) else None


# --- helpers --------------------------------------------------------------------------------

def _in_multirun(config: DictConfig) -> bool:
    from hydra.types import RunMode

    return config.hydra.mode == RunMode.MULTIRUN


def _sweep_name(sweep_dir: str) -> str:
    """'sweep 2026-11-30/23-01-02-123456' (the sweep dir under multirun/)."""
    parts = sweep_dir.rstrip(os.sep).split(os.sep)
    return "sweep " + "/".join(parts[-2:])


STUDY_TAG = "sweep.study"  # an Optuna search's parent: "<study name> in <storage>"


def study_parent(client, experiment_id: str, study: str, made: str | None = None) -> str | None:
    """The parent run of an Optuna study's commands: the earliest one tagged with the study. Two
    commands starting at once may each make one (`made`); both then take the earliest, and the
    later one's run is deleted, so the study keeps one parent."""
    runs = client.search_runs([experiment_id], max_results=50, order_by=["attributes.start_time ASC"],
                              filter_string=f"tags.`{STUDY_TAG}` = '{study}'")
    runs = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    if not runs:
        return made
    first = min(runs, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
    if made is not None and made != first:
        client.delete_run(made)
    if made is None:
        client.update_run(first, status="RUNNING")
    return first


def _reopen_parent(client, sweep_dir: str) -> str | None:
    """Re-running a sweep into the same sweep dir continues its parent run."""
    record = read_parent_record(sweep_dir)
    if record is None:
        return None
    try:
        client.update_run(record["run_id"], status="RUNNING")
    except Exception:  # noqa: BLE001 - a parent from another store or deleted: start a new one
        return None
    return record["run_id"]


def _record_failure_without_run(uri: str, job: SweepJob, config: DictConfig, job_return: Any) -> None:
    """A job that failed before its run started (a bad value for one job) still shows under the
    parent, FAILED with its error, so the sweep's count of failures is complete."""
    client = tracking.client_for(uri)
    parent = client.get_run(job.parent_run_id)
    existing = client.search_runs([parent.info.experiment_id], max_results=1, filter_string=(
        f"tags.`mlflow.parentRunId` = '{job.parent_run_id}' and tags.`sweep.job_num` = '{job.num}'"))
    if existing:
        return
    # A failed JobReturn holds its exception; asking for `.return_value` would raise it and print Hydra's line
    error: Any = job_return._return_value if isinstance(job_return._return_value, BaseException) else "failed"
    run = client.create_run(parent.info.experiment_id, run_name=job.name, tags=tracking.mask_secrets({
        "mlflow.parentRunId": job.parent_run_id, "sweep.job_num": str(job.num),
        "hydra.overrides": " ".join(config.hydra.overrides.task),
        "error": tracking.describe_error(error) if isinstance(error, BaseException) else str(error)}))
    client.set_terminated(run.info.run_id, status="FAILED")
