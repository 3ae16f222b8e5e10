"""trial: a trial's life in its job: `TrialJob` (the run's job), the live Optuna trial it reports to.

The sweeper hands each job its trial by overrides (`hparams_search.trial`, `.study_name`; the
storage is the command's own setting), so this works under every launcher, in process or on another
machine: the job opens the study itself, rebuilds the pruner from config (Optuna does not store pruners), and makes a
live `optuna.trial.Trial` from the trial's number. A frozen trial's `should_prune()` is always
False; a live one asks the pruner. After each epoch the job reports `sweep.metric` and stops when
the pruner says so (pruning.py's callback, handed to training); a heartbeat thread tells every command of the
study that the job is alive.

The sweeper, not the job, tells Optuna how the trial ended: the job returns its objective, or a
`PrunedResult` when its pruner stopped it (`TrialJob.returned`).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from omegaconf import DictConfig

from tfx_hydra.job import RunResult
from tfx_hydra.metrics import epoch_names
from tfx_hydra.sweeps.job import SweepJob

log = logging.getLogger(__name__)
STATE_TAG, EPOCHS_TAG = "optuna.state", "epochs_trained"
SECONDS = "tfx_hydra.seconds"  # user attr: how long the trial's job took (the sweep's idle time is measured with it)


@dataclass
class PrunedResult:
    """What a pruned trial's job returns to the sweeper."""

    trial: int
    epochs: int
    value: float


class LiveTrial:
    """The trial this job runs, live in the study's storage."""

    def __init__(self, settings, metrics: list[str], per_epoch: list[str], max_epochs: int, launch_dir: str) -> None:
        import optuna

        from tfx_hydra.sweeps.hparams_search.optuna import open_storage, pruner, storage_url

        self.settings, self.started = settings, time.monotonic()
        self.metric, self.multi_objective, self.per_epoch = metrics[0], len(metrics) > 1, per_epoch
        self.study = optuna.load_study(study_name=settings.study_name,
                                       storage=open_storage(storage_url(settings, launch_dir)),
                                       pruner=pruner(settings, max_epochs))
        trial_id = self.study._storage.get_trial_id_from_study_id_trial_number(self.study._study_id,
                                                                              settings.trial)
        self.trial = optuna.trial.Trial(self.study, trial_id)
        self._stop = threading.Event()
        self._beating = threading.Thread(target=self._beat, name="optuna-heartbeat", daemon=True)

    @property
    def number(self) -> int:
        return self.settings.trial

    def training_callbacks(self) -> list:
        """What the trial hands training: TrialPruning, which reports each epoch (the dashboard's curves; the
        pruner's judgement). Nothing for a multi-objective search (Optuna takes no per-epoch reports there)
        and, with pruner=none, for a metric that is not logged per epoch."""
        if self.multi_objective or (self.settings.pruner == "none" and self.metric not in self.per_epoch):
            return []
        from tfx_hydra.sweeps.hparams_search.pruning import TrialPruning  # Keras: only once training

        return [TrialPruning(self.trial, self.metric)]

    def leads(self, objective: float | list[float], tracker) -> bool:
        """Whether this trial's plots and exports are worth their time (hparams_search.trial_artifacts=
        leading): it is at least as good as every trial completed so far, so the study's best trial
        always has them (it led when it ended). A trial behind is tagged with what it was behind.
        A multi-objective search keeps every trial's: any of them may end on the Pareto front."""
        from optuna.study import StudyDirection
        from optuna.trial import TrialState

        if self.settings.trial_artifacts == "all" or self.multi_objective:
            return True
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not done:
            return True
        maximize = self.study.direction == StudyDirection.MAXIMIZE
        best = (max if maximize else min)(done, key=lambda t: t.value)
        if (objective >= best.value) if maximize else (objective <= best.value):
            return True
        behind = f"behind trial {best.number}'s {self.metric} {best.value:.4g}"
        tracker.set_tags({"artifacts": f"skipped: {behind} (hparams_search.trial_artifacts=leading)"})
        log.info(f"trial {self.number}: {self.metric} {objective:.4g} is {behind}: no plots, no export "
                 "(hparams_search.trial_artifacts=all makes them for every trial)")
        return False

    @property
    def plots_wait(self) -> bool:
        """Whether a leading trial keeps its plots' inputs for the search's end (trial_artifacts=leading,
        one metric: the search draws its best trial's) rather than drawing them now."""
        return self.settings.trial_artifacts == "leading" and not self.multi_objective

    def completed(self, tracker, history) -> None:
        epochs = len(history.history.get("loss", [])) if history is not None else 0
        tracker.set_tags({STATE_TAG: "COMPLETE", EPOCHS_TAG: str(epochs)})
        self._record_seconds()

    def pruned(self, tracker, pruned) -> PrunedResult:
        """The run keeps the epochs it trained, says PRUNED, and exports nothing."""
        tracker.set_tags({STATE_TAG: "PRUNED", EPOCHS_TAG: str(pruned.epoch + 1)})
        self._record_seconds()
        log.info(f"trial {self.number} pruned after epoch {pruned.epoch + 1}: {self.metric} {pruned.value:.4f} "
                 f"is behind the other trials at that epoch ({self.settings.pruner} pruner); nothing exported")
        return PrunedResult(self.number, pruned.epoch + 1, pruned.value)

    def _record_seconds(self) -> None:
        self.trial.set_user_attr(SECONDS, time.monotonic() - self.started)

    def _beat(self) -> None:
        from tfx_hydra.sweeps.hparams_search.study import HEARTBEAT

        while not self._stop.is_set():
            try:
                self.trial.set_user_attr(HEARTBEAT, time.time())
            except Exception as err:  # noqa: BLE001 - a finished trial, a storage hiccup: the next beat retries
                log.debug(f"heartbeat of trial {self.number}: {err}")
            self._stop.wait(self.settings.heartbeat_interval)

    def __enter__(self) -> "LiveTrial":
        self._beating.start()  # its first beat at once; then the command that launched it stops beating for it
        self._say_the_job_beats(True)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._beating.join(timeout=5)
        self._say_the_job_beats(False)  # the command beats again until it tells the trial's end

    def _say_the_job_beats(self, beats: bool) -> None:
        from tfx_hydra.sweeps.hparams_search.study import JOB_BEATS

        try:
            self.trial.set_user_attr(JOB_BEATS, beats)
        except Exception as err:  # noqa: BLE001 - a trial told already (given up elsewhere): nobody beats for it
            log.debug(f"trial {self.number}: {err}")


@dataclass
class TrialJob(SweepJob):
    """A search's job: the run reports each epoch to its live trial (heartbeating while it trains), hands
    training the pruning callback, ends PRUNED when the pruner stops it, and keeps plots and exports only
    while it leads the study."""

    live: LiveTrial | None = field(default=None, init=False, repr=False)

    @contextmanager
    def attending(self, cfg: DictConfig, settings, tracker) -> Iterator[None]:
        from tfx_hydra.sweeps.hparams_search.optuna import max_epochs, read

        trainer = settings.trainer  # the run's validated Settings
        with LiveTrial(read(cfg), settings.sweep.metrics, epoch_names(list(trainer.metrics)), max_epochs(trainer),
                       cfg.paths.launch_dir) as self.live:
            tracker.set_tags({"optuna.study": self.live.settings.study_name})  # its trial: tagged by run_tags
            yield

    @property
    def plots_wait(self) -> bool:
        return self.live is not None and self.live.plots_wait

    def training_callbacks(self) -> list:
        return self.live.training_callbacks()

    def ended_training(self, tracker, ending: Exception) -> RunResult:
        from tfx_hydra.sweeps.hparams_search.pruning import Pruned

        if not isinstance(ending, Pruned):
            raise ending
        return RunResult(None, tracker.run_id, ended=self.live.pruned(tracker, ending))

    def keeps_artifacts(self, objective, tracker) -> bool:
        return self.live.leads(objective, tracker)

    def completed(self, tracker, history) -> None:
        self.live.completed(tracker, history)

    def returned(self, result: RunResult):
        """A pruned trial's `PrunedResult` (the sweeper tells Optuna PRUNED), else the objective."""
        return result.ended if result.ended is not None else result.objective


def is_trial(cfg: DictConfig) -> bool:
    """A job of an Optuna search's trial (a re-run of its recorded config outside the sweep is not)."""
    return (cfg.get("hparams_search") or {}).get("trial") is not None
