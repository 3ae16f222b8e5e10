"""A search worker (`hparams_search.workers=N`): one long-lived job that runs trials one after
another against the shared study (ask, compose, train, tell) until the study holds n_trials.

Why: Hydra's launcher API is batch-synchronous, so a batch of trials waits for its slowest, and
with pruning the spread within a batch is the rule. A worker never waits for another's trial: it
asks for the next one as soon as its own ends. The sweeper starts N workers as one launcher batch
(local processes, one per GPU, Slurm jobs): the launcher does the process management.

Each trial is still a Hydra job of its own: its config is composed from the sweep's (multirun.yaml)
with the trial's overrides, exactly as a batch launcher composes it, and it runs through Hydra's
`run_job`, so it keeps its output folder, job log, callbacks (the child MLflow run under the
parent) and `[job N]` label. Heartbeats, pruning and lost-trial re-runs are the trial's, as in a
batch: a worker killed with -9 leaves its trial without heartbeats, and another worker (or a later
command) runs its parameters again once the grace period has passed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf, open_dict

from tfx_hydra.errors import ConfigError
from tfx_hydra.process import signals
from tfx_hydra.sweeps.hparams_search import ask_and_tell
from tfx_hydra.sweeps.hparams_search import study as studies

log = logging.getLogger(__name__)
SEED_STRIDE = 1009  # each worker's sampler gets its own seed: two workers would otherwise propose the same trials


@dataclass
class WorkerReport:
    """What a worker returns to the sweeper: its trials, and how long it had nothing to run."""

    worker: str
    trials: int = 0
    failed: int = 0
    waited_seconds: float = 0.0
    ended_at: float = 0.0  # time.time(): the sweeper counts the wait from here to its batch's end


def is_worker(cfg: DictConfig) -> bool:
    return (cfg.get("hparams_search") or {}).get("worker") is not None


def serve(cfg: DictConfig, task: Callable[[DictConfig], Any]) -> WorkerReport:
    """Run trials with `task` (run.run) until the study needs none: this job's whole work."""
    from hydra.core.hydra_config import HydraConfig

    from tfx_hydra.sweeps.hparams_search import checks

    own_hydra = HydraConfig.get()
    saved = os.path.join(str(own_hydra.sweep.dir), "multirun.yaml")  # the sweep's config, saved by the sweeper
    if not os.path.isfile(saved):  # the key typed by hand: there is no sweep to serve
        raise ConfigError(f"hparams_search.worker={cfg.hparams_search.worker} is set by the search for its own worker "
                          f"jobs, and there is no search here ({saved} does not exist).",
                          fix="drop hparams_search.worker; hparams_search.workers=N starts N workers")
    sweep = OmegaConf.load(saved)
    plan = checks.plan(sweep, sweep.hydra.sweeper.get("params") or {}, list(sweep.hydra.overrides.task))
    return Worker(plan, sweep, task, str(cfg.hparams_search.worker), own_hydra).run()


class Worker:
    def __init__(self, plan, sweep: DictConfig, task, name: str, own_hydra: DictConfig) -> None:
        from hydra._internal.callbacks import Callbacks  # the callbacks Hydra gives each job (ours: its MLflow run)
        from hydra.core.global_hydra import GlobalHydra
        from hydra.types import HydraContext

        self.plan, self.sweep, self.task, self.settings = plan, sweep, task, plan.settings
        self.report, self.own_hydra = WorkerReport(name), own_hydra
        self.loader = GlobalHydra.instance().config_loader()  # set up in this process by every launcher
        self.context = HydraContext(config_loader=self.loader, callbacks=Callbacks(sweep))
        self.study, _ = studies.open_study(plan.url, plan.settings, plan.directions, plan.space,
                                           plan.compared_overrides, plan.seed + SEED_STRIDE * (own_hydra.job.num + 1),
                                           plan.max_epochs)
        self.started = time.monotonic()

    def run(self) -> WorkerReport:
        """Trial after trial until the study needs none. Ctrl-C and SIGTERM wait while the study is being
        written to (asking, telling, retrying a lost trial), so an interrupt never leaves a trial RUNNING
        that nobody runs: the trial in hand is failed and queued again for the command that resumes."""
        previous = signals.interrupt_on_signals()
        try:
            while not self.timed_out() and self.next_round():
                pass
        finally:
            signals.restore_handlers(previous)
        self.report.ended_at = time.time()
        log.info(f"worker {self.report.worker}: {self.report.trials} trials, waited {self.report.waited_seconds:.1f} s")
        return self.report

    def next_round(self) -> bool:
        """Run the study's next trial, or wait for others' to end; False once the study is complete."""
        trial = None
        try:
            with signals.uninterrupted():
                studies.retry_lost_trials(self.study, self.settings.grace_period, own=set())
                if studies.still_to_run(self.study, self.settings.n_trials):
                    trial = ask_and_tell.ask(self.study, self.plan.space, self.settings.n_trials, self.report.worker)
                elif studies.running_elsewhere(self.study, own=set()) == 0:
                    return False
            if trial is None:
                self.wait()  # the last trials run elsewhere: one of them may be lost and come back queued
                return True
            with contextlib.ExitStack() as self.until_told:  # held from the trial's end (trial_task) to here
                job_return = self.run_trial(trial)
                with signals.uninterrupted():
                    self.report.trials += 1
                    self.report.failed += ask_and_tell.tell(self.study, trial, job_return)
        except BaseException:  # Ctrl-C, SIGTERM: the trial in hand is FAIL and queued again
            if trial is not None:
                studies.retry_lost_trials(self.study, grace_period=-1.0, own=set(), only={trial.number})
            raise
        self.require_failure_rate()
        return True

    def run_trial(self, trial):
        """The trial as a Hydra job of its own, composed as a batch launcher composes it; its JobReturn."""
        from hydra.core.utils import run_job

        config = self.loader.load_sweep_config(self.sweep, self.plan.job_overrides(trial.number, trial.params))
        with open_dict(config):  # numbered as a batch launcher numbers it: its folder, label and job id
            config.hydra.job.id = f"{config.hydra.job.name}_{trial.number}"
            config.hydra.job.num = trial.number
        try:
            return run_job(hydra_context=self.context, task_function=self.trial_task, config=config,
                           job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        finally:
            _log_to_own_folder(self.own_hydra)

    def trial_task(self, cfg: DictConfig) -> Any:
        """The trial's run; once it has returned, Ctrl-C and SIGTERM wait until the study is told its
        result. A run that ended FINISHED is then a COMPLETE trial, never one failed and run again because
        the interrupt came during Hydra's teardown of the job (its callbacks, its log)."""
        result = self.task(cfg)
        self.until_told.enter_context(signals.uninterrupted())
        return result

    def wait(self) -> None:
        pause = min(self.settings.heartbeat_interval, 1.0)
        time.sleep(pause)
        self.report.waited_seconds += pause

    def timed_out(self) -> bool:
        timeout = self.settings.timeout
        return timeout is not None and time.monotonic() - self.started > timeout

    def require_failure_rate(self) -> None:
        ask_and_tell.require_failure_rate(self.report.failed, self.report.trials, self.settings.max_failure_rate,
                                    f"worker {self.report.worker}")


def _log_to_own_folder(own_hydra) -> None:
    """Each trial's job pointed the log at its own folder (Hydra's run_job restores the worker's
    HydraConfig, not its log): the worker's last lines go to its own."""
    from hydra.core.utils import configure_log

    configure_log(own_hydra.job_logging, own_hydra.verbose)
