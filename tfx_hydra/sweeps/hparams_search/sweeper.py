"""OptunaSweeper: Hydra's Sweeper API around an Optuna study, so every Hydra launcher runs its trials.

In batches (the default): each round, fail the trials whose process was lost (and enqueue their
parameters again), ask for as many trials as the study still needs (at most `n_jobs`), launch them
as one batch through the launcher, tell Optuna how each ended (COMPLETE with its value(s), PRUNED,
FAIL). Hydra's launcher API takes a batch and returns when all of its jobs have: a worker whose
trial ends early (pruned) waits for the batch's slowest.

With workers (`hparams_search.workers=N`): one batch of N long-lived worker jobs, each running
trials one after another until the study is complete (worker.py): nobody waits for a batch.

Either way, until the study holds `n_trials`: a re-run of the same command only adds the missing
trials; a second command on the same study shares the work. The time workers spend with nothing
to run is measured (`sweep.idle_worker_seconds` on the parent run).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from tfx_hydra.console import library_lines_to
from tfx_hydra.errors import LOST_WORKER_ERRORS, TrainingError
from tfx_hydra.sweeps.hparams_search import ask_and_tell
from tfx_hydra.sweeps.hparams_search.trial import SECONDS
from tfx_hydra.sweeps.parent import SWEEP_LOG

log = logging.getLogger(__name__)


class OptunaSweeper(Sweeper):
    """`hydra/sweeper=hparams_search`: `params` is the search space (see space.py); the rest of the
    search's settings are the `hparams_search` section, which each job reads too."""

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = dict(params or {})
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[Any]:
        from tfx_hydra.sweeps.hparams_search import checks

        plan = checks.plan(self.config, self.params, arguments)
        sweep_dir = os.path.abspath(str(self.config.hydra.sweep.dir))
        os.makedirs(sweep_dir, exist_ok=True)
        OmegaConf.save(self.config, os.path.join(sweep_dir, "multirun.yaml"))
        # Optuna's own lines ("[I ...] A new study created in RDB ...", each trial's end) and the warnings
        # of its plots: the sweep's log, not the terminal, which shows the search's lines and its table
        with library_lines_to(os.path.join(sweep_dir, SWEEP_LOG), "optuna"):
            return self._search(plan, sweep_dir)

    def _search(self, plan, sweep_dir: str) -> list[Any]:
        from tfx_hydra.sweeps.hparams_search import report
        from tfx_hydra.sweeps.hparams_search import study as studies
        from tfx_hydra.sweeps.summary import say

        study, created = studies.open_study(plan.url, plan.settings, plan.directions, plan.space,
                                            plan.compared_overrides, plan.seed, plan.max_epochs)
        finished, running = studies.progress(study)
        rounds = Rounds(self, plan, study)
        say(f"tfx_hydra search: study '{plan.settings.study_name}' ({'new' if created else 'resumed'}) in "
            f"{plan.shown_storage}: {finished} of {plan.settings.n_trials} trials finished"
            + (f", {running} running or queued" if running else "")
            + f"; sampler {plan.settings.sampler}, pruner {plan.settings.pruner}"
            + (f", {rounds.workers} worker{'s' if rounds.workers > 1 else ''}" if rounds.workers else "") + ". "
            f"See it: optuna-dashboard {plan.shown_storage}")
        total = plan.settings.n_trials
        if finished >= total and not running:
            say(f"tfx_hydra search: nothing to do: {finished} of {total} trials finished; raise "
                f"hparams_search.n_trials to run more (e.g. hparams_search.n_trials={finished + total})")
        elif plan.left_out:
            model = self.config.hydra.runtime.choices.get("model")
            say(f"tfx_hydra search: searching {', '.join(plan.space)}; left out of the preset's space, not keys of "
                f"model={model}: {', '.join(plan.left_out)}")
        try:
            rounds.run()
        except BaseException as stopped:  # Ctrl-C, SIGTERM, a failed batch: its trials are re-run by the next command
            stopped.retried_trials = rounds.retry_interrupted()  # for the sweep's one closing line (parent.py)
            raise
        with library_lines_to(os.path.join(sweep_dir, SWEEP_LOG), report.__name__, capture_warnings=True):
            report.finish(study, plan, sweep_dir, self.config, rounds.idle_seconds)
        return rounds.returns


class Rounds:
    """The ask-launch-tell loop of one command: trials in batches, or batches of workers."""

    def __init__(self, sweeper: OptunaSweeper, plan, study) -> None:
        self.sweeper, self.plan, self.study = sweeper, plan, study
        self.settings = plan.settings
        self.workers = workers_for(sweeper.config, plan.settings)  # None: trials in batches
        self.command = f"c{uuid.uuid4().hex[:8]}"  # this command's workers are named after it
        self.workers_started = 0
        self.idle_batches = 0               # worker batches in a row that ran no trial
        self.own: set[int] = set()          # trials this command launched (batches)
        self.in_flight: set[int] = set()    # those of the batch the launcher is running now
        self.returns: list[Any] = []
        self.launched = self.failed = 0
        self.idle_seconds = 0.0
        self.started = time.monotonic()
        self.waiting_said = False

    def run(self) -> None:
        from tfx_hydra.sweeps.hparams_search import study as studies

        while not self.timed_out():
            studies.retry_lost_trials(self.study, self.settings.grace_period, self.own)
            wanted = studies.still_to_run(self.study, self.settings.n_trials)
            if not wanted:
                if studies.running_elsewhere(self.study, self.own) == 0:
                    return
                self.wait_for_others()
                continue
            if self.workers:
                self.launch_workers(min(self.workers, wanted))
                continue
            trials = self.ask(min(self.settings.n_jobs, wanted))
            if trials:
                self.launch(trials)

    def ask(self, count: int) -> list:
        asked = [ask_and_tell.ask(self.study, self.plan.space, self.settings.n_trials) for _ in range(count)]
        return [trial for trial in asked if trial is not None]

    def launch(self, asked: list) -> None:
        overrides = [self.plan.job_overrides(t.number, t.params) for t in asked]
        self.own.update(t.number for t in asked)
        self.in_flight = {t.number for t in asked}
        started = time.monotonic()
        with ask_and_tell.held_while_launched(self.study, asked, self.settings.heartbeat_interval):
            returns = self.sweeper.launcher.launch(overrides, initial_job_idx=asked[0].number)
        wall = time.monotonic() - started
        for trial, job_return in zip(asked, returns):
            self.launched += 1
            self.failed += ask_and_tell.tell(self.study, trial, job_return)
        if len(asked) > 1:  # each worker waited from its own trial's end to the batch's
            ran = [self.study.trials[t.number].user_attrs.get(SECONDS, wall) for t in asked]
            self.idle_seconds += sum(max(0.0, wall - seconds) for seconds in ran)
        self.in_flight = set()
        self.returns.extend(returns)
        self.require_failure_rate()

    def launch_workers(self, count: int) -> None:
        """`count` workers as one batch; it returns when the study needs no more trials. A worker whose
        process died (kill -9, a node lost) leaves its trial to the others, who run it again once its
        heartbeat is `grace_period` old; this loop starts new workers while trials are missing."""
        from hydra.core.utils import JobStatus

        first, self.workers_started = self.workers_started, self.workers_started + count
        overrides = [self.plan.worker_overrides(f"{self.command}-{i}", i) for i in range(first, first + count)]
        asked_before = len(self.study.get_trials(deepcopy=False))
        try:
            returns = self.sweeper.launcher.launch(overrides, initial_job_idx=first)
        except Exception as err:  # noqa: BLE001 - only a lost process is the search's to survive
            if type(err).__name__ not in LOST_WORKER_ERRORS:
                raise
            # the workers never started (sbatch refused them, ...) rather than a started one lost its process
            self.count_idle_batch(len(self.study.get_trials(deepcopy=False)) == asked_before, TrainingError(
                f"{count} search workers were started 3 times and none of them asked for a trial: the launcher "
                f"says {type(err).__name__}: {str(err).strip()[:500]}",
                fix="run one job of the same launcher alone to see it fail (python -m tfx_hydra -m "
                "hydra/launcher=... with your launcher's settings)"))
            log.warning(f"a search worker's process was lost ({type(err).__name__}): its trial runs again once its "
                        f"heartbeat is {self.settings.grace_period:.0f} s old, and the search goes on")
            return
        ended, ran = time.time(), 0
        for job_return in returns:
            report = job_return._return_value
            if job_return.status != JobStatus.COMPLETED:
                raise report if isinstance(report, BaseException) else TrainingError("a search worker failed")
            ran += report.trials
            self.failed += report.failed
            self.idle_seconds += report.waited_seconds + max(0.0, ended - report.ended_at)
        self.launched += ran
        self.returns.extend(returns)
        self.count_idle_batch(ran == 0, TrainingError(
            f"{count} search workers were started 3 times and ran no trial, while study "
            f"'{self.settings.study_name}' in {self.plan.shown_storage} still needs trials: the workers do not see "
            "this study.", fix="start the search from the launch directory the workers share (Hydra's launcher runs "
            "them there), or give hparams_search.storage as an absolute URL"))

    def count_idle_batch(self, idle: bool, stop: TrainingError) -> None:
        """Three batches of workers in a row that got nothing done stop the search with `stop`, the
        reason, rather than start workers for ever."""
        self.idle_batches = self.idle_batches + 1 if idle else 0
        if self.idle_batches >= 3:
            raise stop from None  # the launcher's error is in the message

    def retry_interrupted(self) -> list[int]:
        """Ctrl-C, SIGTERM, a failed batch: this command's running trials are FAIL, their parameters
        queued for the command that resumes (a batch's trial whose run had already ended is told instead).
        Returns the numbers of the trials that run again."""
        from tfx_hydra.sweeps.hparams_search import study as studies

        if self.workers:
            only = ask_and_tell.of_command(self.study, self.command) | studies.unclaimed(self.study)
        else:  # a trial whose run ended as the interrupt came is told, not run again
            sweep_dir = os.path.abspath(str(self.sweeper.config.hydra.sweep.dir))
            only = self.in_flight - ask_and_tell.tell_finished_runs(self.study, self.in_flight, sweep_dir)
        studies.retry_lost_trials(self.study, grace_period=-1.0, own=set(), only=only)
        if self.workers:  # the launcher has stopped them: a worker killed mid-retry left its trial unqueued
            studies.requeue_missed(self.study, only)
        return studies.queued_again(self.study, only)  # by this process, or by a worker as its trial stopped

    def require_failure_rate(self) -> None:
        ask_and_tell.require_failure_rate(self.failed, self.launched, self.settings.max_failure_rate, "this command")

    def timed_out(self) -> bool:
        timeout = self.settings.timeout
        if timeout is not None and time.monotonic() - self.started > timeout:
            log.info(f"hparams_search.timeout={timeout} s reached: no new trial starts")
            return True
        return False

    def wait_for_others(self) -> None:
        """The study has its trials, but others are still running them: wait (re-running any
        that lose their process) so this command ends with the study complete."""
        from tfx_hydra.sweeps.summary import say

        if not self.waiting_said:
            say(f"tfx_hydra search: waiting for the trials other commands are running (a lost one is re-run after "
                f"{self.settings.grace_period:.0f} s without a heartbeat)")
            self.waiting_said = True
        time.sleep(min(self.settings.heartbeat_interval, 5.0))


def workers_for(config: DictConfig, settings) -> int | None:
    """How many workers this command starts (None: batches). Hydra's basic launcher runs one job at a
    time, in this process: one worker, which runs the trials one after another."""
    if settings.workers is None:
        return None
    if settings.workers > 1 and str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher"):
        log.warning(f"hparams_search.workers={settings.workers}: Hydra's basic launcher runs one job at a time, so one "
                    "worker runs the trials; hydra/launcher=parallel (or local_gpus, slurm) runs them side by side")
        return 1
    return settings.workers
