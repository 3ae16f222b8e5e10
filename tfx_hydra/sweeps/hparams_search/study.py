"""The study: opened (or resumed), checked to be the same search, how many trials it still needs.

A study is the search's lasting record, shared by every command that names it: a re-run of the
same command, or a second command on another machine, opens the same study and adds trials
until it holds `n_trials` of them. What counts towards that total: every trial but a failed one
that was retried (its retry counts) or one started past the total by two commands asking at the
same instant, or a second retry of one lost trial (both marked and told FAIL at once: over_budget).

A trial's job records a heartbeat (a user attribute with the time) every `heartbeat_interval`
seconds; before its job starts (the second of a batch the basic launcher runs one after another, a
Slurm job in the queue) and once it has ended (its batch still running), the command that launched
it beats for it (ask_and_tell.held_while_launched). A RUNNING trial whose heartbeat is older than
`grace_period` lost its process (kill -9, a preempted Slurm job): any command of the study fails it
and enqueues the same parameters once more. This works on every storage alike (SQLite, PostgreSQL,
a journal file), where Optuna's own heartbeat exists only for database storages.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tfx_hydra.errors import ConfigError
from tfx_hydra.sweeps.hparams_search import space as search_space
from tfx_hydra.sweeps.hparams_search.optuna import SearchSettings, open_storage, pruner, sampler

log = logging.getLogger(__name__)
HEARTBEAT = "tfx_hydra.heartbeat"        # user attr: the time of the trial's last heartbeat
RETRY_OF = "tfx_hydra.retry_of"          # user attr: the number of the lost trial this one re-runs
OVER_BUDGET = "tfx_hydra.over_budget"    # user attr: started past n_trials, told FAIL unrun
JOB_BEATS = "tfx_hydra.job_beats"        # user attr: True while the trial's job beats for it (else its sweeper)
REQUEUED = "tfx_hydra.requeued"          # user attr: failed as lost or interrupted, its parameters to run again
SPACE, COMMAND = "tfx_hydra.search_space", "tfx_hydra.fixed_overrides"  # study user attrs


def open_study(url: str, settings: SearchSettings, directions: list[str], space: dict[str, Any],
               fixed: list[str], seed: int, max_epochs: int):
    """Create the study, or load it when it exists (a re-run, a second command): (study, created).
    A loaded study must still be the same search (directions, space, fixed overrides). Its sampler
    is seeded with `seed` plus the trials it holds, so a resumed search goes on proposing new
    trials rather than the ones its first command began with."""
    import optuna

    backend = open_storage(url)
    made_pruner = pruner(settings, max_epochs)
    existing = existing_study(backend, settings.study_name)
    if existing is None:
        try:
            study = optuna.create_study(storage=backend, study_name=settings.study_name, directions=directions,
                                        sampler=sampler(settings.sampler, seed, len(directions) > 1),
                                        pruner=made_pruner)
            study.set_user_attr(SPACE, search_space.as_json(space))
            study.set_user_attr(COMMAND, sorted(fixed))
            return study, True
        except optuna.exceptions.DuplicatedStudyError:  # another command created it this instant
            existing = existing_study(backend, settings.study_name)
    require_same_search(existing, settings.study_name, directions, space, fixed)
    trials = len(existing.get_trials(deepcopy=False))
    return optuna.load_study(storage=backend, study_name=settings.study_name, pruner=made_pruner,
                             sampler=sampler(settings.sampler, seed + trials, len(directions) > 1)), False


def existing_study(backend, name: str):
    """The study named `name` in the storage, or None."""
    import optuna

    try:
        return optuna.load_study(storage=backend, study_name=name, sampler=optuna.samplers.RandomSampler(0))
    except KeyError:
        return None


def require_same_search(study, name: str, directions: list[str], space: dict[str, Any], fixed: list[str]) -> None:
    recorded_directions = [d.name.lower() for d in study.directions]
    fix = (f"repeat the study's search to continue it, or start another: hparams_search.study_name={name}-2")
    if recorded_directions != directions:
        raise ConfigError(f"study '{name}' {recorded_directions} optimises in directions {recorded_directions}, this "
                          f"command in {directions}.", fix=fix)
    waited = time.monotonic() + 10  # a study created this instant by another command: its attrs follow at once
    while SPACE not in study.user_attrs and time.monotonic() < waited:
        time.sleep(0.2)
    changed = search_space.changes(study.user_attrs.get(SPACE, {}), search_space.as_json(space))
    if changed:
        raise ConfigError(f"study '{name}' was started with another search space; what changed: "
                          f"{'; '.join(changed)}.", fix=fix)
    before = study.user_attrs.get(COMMAND, [])
    if sorted(before) != sorted(fixed):
        raise ConfigError(f"study '{name}' was started with the overrides [{' '.join(before)}]; this command has "
                          f"[{' '.join(sorted(fixed))}]: its trials would not be comparable.", fix=fix)


def counted(trials) -> list:
    """The trials that count towards n_trials (see the module's docstring)."""
    from optuna.trial import TrialState

    retried = {t.user_attrs.get(RETRY_OF) for t in trials} - {None}
    return [t for t in trials if not (t.state == TrialState.FAIL and (t.number in retried
                                                                      or t.user_attrs.get(OVER_BUDGET)))]


def over_budget(study, trial, n_trials: int) -> bool:
    """A trial asked for past the study's total (two commands asked at once), or a second retry of one
    lost trial (two commands found it lost at once: on SQLite both see it RUNNING and both fail it, so
    both queue its parameters): the later one yields, told FAIL with a mark, so the study still holds
    n_trials and runs each lost trial's parameters once more, not twice."""
    from optuna.trial import TrialState

    every = study.get_trials(deepcopy=False)
    lost = trial.user_attrs.get(RETRY_OF)
    if lost is not None:  # a retry takes its lost trial's place, unless an earlier retry of it took it
        if not any(t.user_attrs.get(RETRY_OF) == lost and t.number < trial.number for t in every):
            return False
    elif len([t for t in counted(every) if t.number < trial.number]) < n_trials:
        return False
    trial.set_user_attr(OVER_BUDGET, True)
    study.tell(trial, state=TrialState.FAIL)
    return True


def retry_lost_trials(study, grace_period: float, own: set[int], only: set[int] | None = None) -> list[int]:
    """RUNNING trials of other processes whose heartbeat stopped: failed, their parameters enqueued
    once more. Returns the numbers of the trials retried. (`only`: these trials, whatever their
    heartbeat: a command's own batch when it is interrupted.)"""
    from optuna.trial import TrialState

    retried = []
    now = time.time()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.number in own or (only is not None and trial.number not in only):
            continue
        beat = trial.user_attrs.get(HEARTBEAT, trial.datetime_start.timestamp() if trial.datetime_start else now)
        if now - beat <= grace_period:
            continue
        try:
            study._storage.set_trial_user_attr(trial._trial_id, REQUEUED, True)  # see requeue_missed
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, RuntimeError):  # another command failed it first, and retries it
            continue
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
        if only is None:  # an interrupted command says which trials run again once, in its closing line
            log.warning(f"trial {trial.number} lost its process (no heartbeat for {now - beat:.0f} s): it is FAIL, "
                        "and its parameters run again as a new trial")
        retried.append(trial.number)
    return retried


def given_up_elsewhere(study, trial) -> bool:
    """Whether another command failed this trial as lost while it ran (its heartbeat came later than
    grace_period, on a loaded machine) and queued its parameters again (retry_lost_trials)."""
    from optuna.trial import TrialState

    now = study._storage.get_trial(trial._trial_id)
    return now.state == TrialState.FAIL and bool(now.user_attrs.get(REQUEUED))


def requeue_missed(study, only: set[int]) -> list[int]:
    """Trials of `only` failed as lost or interrupted whose retry was never queued: a process killed
    between the two writes (joblib kills its workers when the command is interrupted). Their parameters
    are queued now; returns their numbers. Only for trials whose processes are known to be gone."""
    from optuna.trial import TrialState

    every = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get(RETRY_OF) for t in every}
    missed = [t for t in every if t.number in only and t.state == TrialState.FAIL and t.user_attrs.get(REQUEUED)
              and t.number not in retried]
    for trial in missed:
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
    return [t.number for t in missed]


def queued_again(study, among: set[int]) -> list[int]:
    """The trials of `among` whose parameters wait to run again (a WAITING trial is their retry)."""
    from optuna.trial import TrialState

    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return sorted({t.user_attrs.get(RETRY_OF) for t in waiting} & set(among))


def unclaimed(study, settle: float = 2.0) -> set[int]:
    """RUNNING trials nobody claimed: asked by a worker killed (joblib kills its workers when the command
    is interrupted) before it wrote the trial's heartbeat, the last of trials.ask's writes. A live asker
    writes it within milliseconds, so only the trials still without one `settle` seconds later count."""
    from optuna.trial import TrialState

    def without_heartbeat() -> set[int]:
        return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if HEARTBEAT not in t.user_attrs}

    if not (first := without_heartbeat()):
        return set()
    time.sleep(settle)
    return first & without_heartbeat()


def running_elsewhere(study, own: set[int]) -> int:
    """Trials another command is running (or has queued) now."""
    from optuna.trial import TrialState

    return len([t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
                if t.number not in own])


def still_to_run(study, n_trials: int) -> int:
    """Trials the study still needs run: those missing from n_trials, and the queued retries of lost ones."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    return max(n_trials - len(counted(trials)), 0) + sum(t.state == TrialState.WAITING for t in trials)


def progress(study) -> tuple[int, int]:
    """(trials finished, trials running or queued) of those that count towards n_trials."""
    from optuna.trial import TrialState

    trials = counted(study.get_trials(deepcopy=False))
    running = sum(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)
    return len(trials) - running, running


def state_counts(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in counted(study.get_trials(deepcopy=False)):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts
