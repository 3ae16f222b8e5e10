"""OptunaSweeper: Hydra's Sweeper API around an Optuna study, so every Hydra launcher runs its trials.

Each round: fail the trials whose process was lost (and enqueue their parameters again), ask
for as many trials as the study still needs (at most `n_jobs`), launch them as one batch
through the launcher, tell Optuna how each ended (COMPLETE with its value(s), PRUNED, FAIL).
Until the study holds `n_trials`: a re-run of the same command only adds the missing trials;
a second command on the same study shares the work.

Hydra's launcher API takes a batch and returns when all of its jobs have: a worker whose trial
ends early (pruned) waits for the batch's slowest. The time workers spend waiting is measured
(`sweep.idle_worker_seconds` on the parent run); two commands on one study do not wait for each other.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from tfx_hydra.console import library_lines_to
from tfx_hydra.errors import ConfigError, TrainingError
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
        say(f"tfx_hydra search: study '{plan.settings.study_name}' ({'new' if created else 'resumed'}) in "
            f"{plan.shown_storage}: {finished} of {plan.settings.n_trials} trials finished"
            + (f", {running} running or queued" if running else "")
            + f"; sampler {plan.settings.sampler}, pruner {plan.settings.pruner}. "
            f"See it: optuna-dashboard {plan.shown_storage}")
        total = plan.settings.n_trials
        if finished >= total and not running:
            say(f"tfx_hydra search: nothing to do: {finished} of {total} trials finished; raise "
                f"hparams_search.n_trials to run more (e.g. hparams_search.n_trials={finished + total})")
        elif plan.left_out:
            model = self.config.hydra.runtime.choices.get("model")
            say(f"tfx_hydra search: searching {', '.join(plan.space)}; left out of the preset's space, not keys of "
                f"model={model}: {', '.join(plan.left_out)}")
        rounds = Rounds(self, plan, study)
        try:
            rounds.run()
        except BaseException:  # Ctrl-C, SIGTERM, a failed batch: its trials are re-run by the next command
            studies.retry_lost_trials(study, grace_period=-1.0, own=set(), only=rounds.in_flight)
            raise
        with library_lines_to(os.path.join(sweep_dir, SWEEP_LOG), report.__name__, capture_warnings=True):
            report.finish(study, plan, sweep_dir, self.config, rounds.idle_seconds)
        return rounds.returns


class Rounds:
    """The ask-launch-tell loop of one command."""

    def __init__(self, sweeper: OptunaSweeper, plan, study) -> None:
        self.sweeper, self.plan, self.study = sweeper, plan, study
        self.settings = plan.settings
        self.own: set[int] = set()          # trials this command launched
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
            missing = self.settings.n_trials - len(studies.counted(self.study.get_trials(deepcopy=False)))
            queued = self.queued()
            if missing <= 0 and not queued:
                if studies.running_elsewhere(self.study, self.own) == 0:
                    return
                self.wait_for_others()
                continue
            trials = self.ask(min(self.settings.n_jobs, max(missing, 0) + len(queued)))
            if trials:
                self.launch(trials)

    def queued(self) -> list:
        """Enqueued retries of lost trials, waiting for a command to run them."""
        from optuna.trial import TrialState

        return self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))

    def ask(self, count: int) -> list:
        from tfx_hydra.sweeps.hparams_search import study as studies

        trials = []
        for _ in range(count):
            trial = self.study.ask(fixed_distributions=self.plan.space)
            trial.set_user_attr(studies.HEARTBEAT, time.time())  # its job's own heartbeats follow
            if studies.over_budget(self.study, trial, self.settings.n_trials):
                continue
            trials.append(trial)
        return trials

    def launch(self, trials: list) -> None:
        overrides = [self.plan.job_overrides(t.number, t.params) for t in trials]
        self.own.update(t.number for t in trials)
        self.in_flight = {t.number for t in trials}
        started = time.monotonic()
        returns = self.sweeper.launcher.launch(overrides, initial_job_idx=trials[0].number)
        wall = time.monotonic() - started
        for trial, job_return in zip(trials, returns):
            self.tell(trial, job_return)
        if len(trials) > 1:  # each worker waited from its own trial's end to the batch's
            ran = [self.study.trials[t.number].user_attrs.get(SECONDS, wall) for t in trials]
            self.idle_seconds += sum(max(0.0, wall - seconds) for seconds in ran)
        self.in_flight = set()
        self.returns.extend(returns)
        self.require_failure_rate()

    def tell(self, trial, job_return) -> None:
        from hydra.core.utils import JobStatus
        from optuna.trial import TrialState

        from tfx_hydra.sweeps.hparams_search.pruned import PrunedResult

        self.launched += 1
        value = job_return._return_value  # a failed job's is its exception (`.return_value` would raise it)
        try:
            if job_return.status == JobStatus.COMPLETED and isinstance(value, PrunedResult):
                self.study.tell(trial, state=TrialState.PRUNED)
            elif job_return.status == JobStatus.COMPLETED:
                self.study.tell(trial, value)
            else:
                self.failed += 1
                self.study.tell(trial, state=TrialState.FAIL)
        except (ValueError, RuntimeError) as err:  # failed as lost by another command meanwhile
            log.warning(f"trial {trial.number}: Optuna kept its earlier state ({err})")
        if job_return.status != JobStatus.COMPLETED and isinstance(value, ConfigError):
            raise value  # a mistake in the command: every further trial would repeat it

    def require_failure_rate(self) -> None:
        rate = self.failed / self.launched if self.launched else 0.0
        if self.failed and rate > self.settings.max_failure_rate:
            raise TrainingError(f"{self.failed} of the {self.launched} trials this command ran failed, more than "
                                f"hparams_search.max_failure_rate={self.settings.max_failure_rate}: the search stops.",
                                fix="see the FAILED child runs' `error` tags; hparams_search.max_failure_rate=1.0 "
                                "goes on regardless")

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
