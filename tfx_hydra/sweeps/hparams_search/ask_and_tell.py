"""Asking the study for a trial and telling it how the trial's job ended: the same two steps whether
the sweeper launches trials in batches (sweeper.py) or a worker runs them one after another
(worker.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from tfx_hydra.errors import ConfigError, TrainingError
from tfx_hydra.sweeps.hparams_search import study as studies

log = logging.getLogger(__name__)
WORKER = "tfx_hydra.worker"  # user attr: the worker running the trial (workers only): '<command>-<index>'
PROCESS = "tfx_hydra.process"  # user attr: where that worker runs, '<host>:<pid>' (the process to look at, or kill)


def ask(study, space: dict[str, Any], n_trials: int, worker: str | None = None):
    """A new trial (or a queued retry of a lost one) marked alive at once; None when two commands
    asked at the same instant and the study already holds n_trials (the later one is told FAIL).
    The heartbeat is written last: a trial without one was asked by a process killed before it could
    say whose the trial is (study.unclaimed)."""
    trial = study.ask(fixed_distributions=space)
    if worker is not None:
        trial.set_user_attr(WORKER, worker)
        trial.set_user_attr(PROCESS, f"{socket.gethostname()}:{os.getpid()}")
    trial.set_user_attr(studies.HEARTBEAT, time.time())  # its job's own heartbeats follow
    if studies.over_budget(study, trial, n_trials):
        return None
    return trial


@contextmanager
def held_while_launched(study, trials: list, interval: float) -> Iterator[None]:
    """Beat for a launched batch's trials whenever their jobs do not (trial.LiveTrial says when they do):
    a trial waiting for its job (the basic launcher runs a batch one job after another; a Slurm queue holds
    it), or whose job has ended while the rest of its batch runs, is not lost, and another command of the
    study must not run it again. A job lost while it runs stops beating, and is found lost as before."""
    stop = threading.Event()
    waiting = {trial.number: trial._trial_id for trial in trials}

    def beat() -> None:
        while waiting and not stop.wait(interval):
            for number, trial_id in list(waiting.items()):
                try:
                    now = study._storage.get_trial(trial_id)
                    if now.state.is_finished():
                        del waiting[number]
                    elif not now.user_attrs.get(studies.JOB_BEATS):
                        study._storage.set_trial_user_attr(trial_id, studies.HEARTBEAT, time.time())
                except Exception as err:  # noqa: BLE001 - a storage hiccup: the next beat retries
                    log.debug(f"heartbeat of launched trial {number}: {err}")

    beating = threading.Thread(target=beat, name="optuna-launched-trials", daemon=True)
    beating.start()
    try:
        yield
    finally:
        stop.set()
        beating.join(timeout=5)


def tell(study, trial, job_return) -> bool:
    """Tell Optuna how the trial's Hydra job ended: COMPLETE with its value(s), PRUNED, or FAIL.
    Returns whether it failed. A ConfigError is raised again: a mistake in the command, which
    every further trial would repeat."""
    from hydra.core.utils import JobStatus
    from optuna.trial import TrialState

    from tfx_hydra.sweeps.hparams_search.trial import PrunedResult

    value = job_return._return_value  # a failed job's is its exception (`.return_value` would raise it)
    failed = job_return.status != JobStatus.COMPLETED
    if failed and studies.given_up_elsewhere(study, trial):  # Optuna then refused the job's reports: not
        # the trial's failure, and not counted as one (its parameters run again as a new trial)
        log.warning(f"trial {trial.number}: another command gave it up as lost while it ran (its heartbeat came "
                    "late) and runs its parameters again; this run's result is not counted")
        return False
    try:
        if not failed and isinstance(value, PrunedResult):
            study.tell(trial, state=TrialState.PRUNED)
        elif not failed:
            study.tell(trial, value)
        else:
            study.tell(trial, state=TrialState.FAIL)
    except (ValueError, RuntimeError) as err:  # failed as lost by another command meanwhile
        log.warning(f"trial {trial.number}: Optuna kept its earlier state ({err})")
    if failed and isinstance(value, ConfigError):
        raise value
    return failed


def require_failure_rate(failed: int, ran: int, max_rate: float, ran_by: str) -> None:
    """Stop once more than `max_rate` of the trials `ran_by` ran (this command, one worker) failed: trials
    that keep failing (out of memory, a part of the space that cannot train) would fail on."""
    if failed and failed / ran > max_rate:
        raise TrainingError(f"{failed} of the {ran} trials {ran_by} ran failed, more than "
                            f"hparams_search.max_failure_rate={max_rate}: the search stops.",
                            fix="see the FAILED child runs' `error` tags; hparams_search.max_failure_rate=1.0 "
                            "goes on regardless")


def of_command(study, command: str) -> set[int]:
    """The trials this command's workers asked for."""
    return {t.number for t in study.get_trials(deepcopy=False)
            if str(t.user_attrs.get(WORKER, "")).startswith(f"{command}-")}


def tell_finished_runs(study, numbers: set[int], sweep_dir: str) -> set[int]:
    """Of an interrupted batch's trials (`numbers`), those whose run had already ended FINISHED -- the
    interrupt came while Hydra closed their job, before the launcher handed back their result -- told
    as their run recorded them: COMPLETE with its `objective`, or PRUNED. Returns their numbers; the
    others are failed and run again. A multi-objective search's are run again too: its run records
    the first objective alone."""
    from optuna.trial import TrialState

    from tfx_hydra import tracking
    from tfx_hydra.metrics import OBJECTIVE
    from tfx_hydra.sweeps.hparams_search.trial import STATE_TAG
    from tfx_hydra.sweeps.parent import TRIAL_TAG, children, read_parent_record

    record = read_parent_record(sweep_dir)
    if not numbers or record is None or len(study.directions) > 1:
        return set()
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    try:
        finished = children(tracking.client_for(record["uri"]), record["run_id"], status="FINISHED")
    except Exception as err:  # noqa: BLE001 - the store gone too: the trials run again, the interrupt goes on
        log.warning(f"could not read which interrupted trials had finished ({type(err).__name__}): they run again")
        return set()
    told = set()
    for run in finished:
        number, state = int(run.data.tags.get(TRIAL_TAG, -1)), run.data.tags.get(STATE_TAG)
        if number not in numbers & running:
            continue
        if state == "PRUNED":
            outcome = {"state": TrialState.PRUNED}
        elif state == "COMPLETE" and OBJECTIVE in run.data.metrics:
            outcome = {"values": run.data.metrics[OBJECTIVE]}
        else:
            continue
        try:
            study.tell(number, **outcome)
        except (ValueError, RuntimeError):  # told meanwhile by another command
            continue
        log.info(f"trial {number}: its run had ended ({state}) when the search was interrupted: told, not run again")
        told.add(number)
    return told
