"""job: whom a run works for, and what it hands back (`RunResult`).

`run(cfg, job)` calls the job's hooks at the steps where a caller may add something, and names no
sweep. A run of its own works for the user alone: `Job`, which adds nothing. A sweep's job
(sweeps/job.py: `SweepJob`) is its sweep parent's child run and is skipped when an earlier command
finished it; a search's trial (sweeps/hparams_search/trial.py: `TrialJob`) also reports each epoch to
its live trial, hands training its pruning callback and keeps plots and exports only while it leads.
The search is a client of the run, never a part of it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence


@dataclass
class RunResult:
    """What every run returns: the objective a sweeper optimises (`sweep.metric`'s value, or one per
    metric), the MLflow run it was tracked in, and, when a callback the job handed training ended it
    early, what the job made of that (a pruned trial's epochs and value)."""

    objective: float | list[float] | None
    run_id: str | None = None
    ended: Any = None


class Job:
    """A run on its own: every hook a no-op, and Hydra gets the objective."""

    shows_ui: bool = True      # the run's last line says how to browse it (a sweep says it once, at its end)
    plots_wait: bool = False   # the test split's plots drawn now, not kept for the search's end

    def finished(self, track, launch_dir: str, resume_key: str) -> RunResult | None:
        """A result recorded by an earlier command for this very job (then the run is skipped), or None."""
        return None

    def tracked_as(self) -> Any:
        """What tracking nests the run under (its `run_tags`, `name`, `resume_command`), or None."""
        return None

    @contextmanager
    def attending(self, cfg, settings, tracker) -> Iterator[None]:
        """Around the tracked run's steps: whatever the job keeps alive while the run trains."""
        yield

    def training_callbacks(self) -> Sequence:
        """Keras callbacks the job hands training, after the run's own."""
        return ()

    def ended_training(self, tracker, ending: Exception) -> RunResult:
        """A callback of the job's ended training early (a `trainer.backups.EndsTraining`): the result."""
        raise ending

    def keeps_artifacts(self, objective: float | list[float], tracker) -> bool:
        """Whether the run's plots and exports are worth their time."""
        return True

    def completed(self, tracker, history) -> None:
        """The run trained and was evaluated: what the job records of it."""

    def returned(self, result: RunResult) -> Any:
        """What Hydra's sweeper gets from this job: the objective (every sweeper optimises a number)."""
        return result.objective
