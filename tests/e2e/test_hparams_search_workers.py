"""hparams_search.workers=N end to end: long-lived workers, each running trials one after another
against the shared study (no batch waits for its slowest trial), under the basic, joblib and
submitit_local launchers; a worker killed with -9 (its trial re-run, the other worker goes on) while a
second command joins the study; Ctrl-C of the command and its resume by two joblib workers. Real Hydra multiruns of real
(tiny) Keras trials, a real Optuna storage and a real MLflow store.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from optuna.trial import TrialState

from tests.helpers import mlflow_runs
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.search import (
    assert_pruned_trials_look_pruned,
    command_in_its_own_session,
    parent_and_children,
    search,
    study_of,
    wait_for_running_trial,
)
from tfx_hydra.process.long_lived import custom_gradients

pytestmark = pytest.mark.slow
WORKER, PROCESS, RETRY_OF = "tfx_hydra.worker", "tfx_hydra.process", "tfx_hydra.retry_of"
SWEEP = ("multirun", "mlp-digits")


def counted(study) -> list:
    """The trials that count towards n_trials: all but a lost one that was run again, and one asked for
    past the total by two commands at the same instant (told FAIL unrun, marked)."""
    retried = {t.user_attrs.get(RETRY_OF) for t in study.trials}
    return [t for t in study.trials if t.number not in retried and not t.user_attrs.get("tfx_hydra.over_budget")]


def test_one_worker_in_process_runs_each_trial_as_a_job_of_its_own(tmp_path):
    """The basic launcher hosts one worker (workers=2 is said and brought down to 1): every trial is
    still a Hydra job with its folder, log and child run, pruned against the trials before it, and the
    best trial's model is registered once."""
    gradients_before = custom_gradients()
    done = run_cli_in_process(search(4, "hparams_search.workers=2", "export.mlflow_model=true",
                                     "export.register_as=digits_best"), cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert custom_gradients() <= gradients_before  # no trial left its traced graphs to TensorFlow's registry
    shown = done.stdout + done.stderr
    assert "hparams_search.workers=2: Hydra's basic launcher runs one job at a time, so one worker runs the " \
           "trials" in shown, shown[-3000:]
    assert "sampler tpe, pruner median, 1 worker." in done.stdout

    study = study_of(tmp_path)
    assert len(study.trials) == 4 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    (worker,) = {t.user_attrs[WORKER] for t in study.trials}
    assert worker.endswith("-0") and all(t.user_attrs[PROCESS].endswith(f":{os.getpid()}") for t in study.trials)
    client, parent, children = parent_and_children(tmp_path)
    assert len(children) == 4 and parent.info.status == "FINISHED"
    assert_pruned_trials_look_pruned(study, client, children)  # each trial reported its epochs to the study
    sweep = tmp_path.joinpath(*SWEEP)
    for child in children:  # each trial's own job: folder, overrides, log
        number = child.data.tags["optuna.trial"]
        assert child.data.params["paths.output_dir"] == str(sweep / f"trial_{number}")
        assert f"hparams_search.trial={number}" in (sweep / f"trial_{number}" / ".hydra" / "overrides.yaml").read_text()
        assert "hparams_search.worker=" not in (sweep / f"trial_{number}" / ".hydra" / "overrides.yaml").read_text()
        assert "epoch 1/3" in (sweep / f"trial_{number}" / "tfx_hydra.log").read_text()
    worker_log = (sweep / "worker_0" / "tfx_hydra.log").read_text()
    assert f"worker {worker}: 4 trials" in worker_log
    assert not list(sweep.glob("trial_None"))
    best = next(c for c in children if c.data.tags["optuna.trial"] == str(study.best_trial.number))
    assert client.get_model_version("digits_best", "1").run_id == best.info.run_id
    for child in children:  # trial_artifacts=leading: exports only for a trial as good as the best before it,
        trial = study.trials[int(child.data.tags["optuna.trial"])]  # plots for the best, drawn at the end
        if trial.state != TrialState.COMPLETE:
            continue
        before = [t.value for t in study.trials[:trial.number] if t.state == TrialState.COMPLETE]
        plots = {a.path for a in client.list_artifacts(child.info.run_id, "plots")}
        model = bool(child.outputs.model_outputs)  # the MLflow model it logged (export.mlflow_model=true)
        pending = sweep / f"trial_{trial.number}" / "plots" / "pending_plots.npz"
        assert not pending.exists()  # drawn or dropped when the search ended
        if trial.number == study.best_trial.number:
            assert {"plots/training_curves.png", "plots/confusion_matrix.png"} <= plots, plots
            assert child.data.tags["plots"] == "drawn at the search's end: the best trial"
        elif not before or trial.value >= max(before):
            assert model and not plots, trial.number
            assert child.data.tags["plots"] == f"skipped: trial {study.best_trial.number} ended the search best"
        else:
            assert not plots and not model, trial.number
            assert child.data.tags["artifacts"].startswith("skipped: behind trial "), child.data.tags
    assert "sweep.idle_worker_seconds" in parent.data.metrics


def test_a_killed_worker_s_trial_runs_again_while_the_other_worker_and_a_second_command_go_on(tmp_path):
    """submitit_local (hydra/launcher=local_gpus): two worker processes. One is killed with -9 during its
    trial; the other goes on, and a second command (one worker, in process) joins the study meanwhile.
    The lost trial's parameters run again once its heartbeat is old; the study ends with its n_trials,
    every trial a child of the study's one parent, the lost one's run KILLED."""
    command = [sys.executable, "-m", "tfx_hydra", "-m", "hydra/launcher=local_gpus",
               "hydra.launcher.gpus_per_node=0", *search(6, "hparams_search.workers=2")]
    with command_in_its_own_session(command, tmp_path) as first:
        victim = wait_for_running_trial(tmp_path, number=1, process=first, with_run=True)
        host, pid = victim.user_attrs[PROCESS].rsplit(":", 1)
        assert int(pid) != first.pid  # a worker's process, not the command's
        os.kill(int(pid), signal.SIGKILL)
        killed_at = time.time()
        joined = run_cli_in_process(search(6, "hparams_search.workers=1"), cwd=tmp_path, multirun=True)
        out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert "a search worker's process was lost (UncompletedJobError)" in out, out[-3000:]
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert "study 'mlp-digits' (resumed)" in joined.stdout

    study = study_of(tmp_path)
    lost = study.trials[victim.number]
    assert lost.state == TrialState.FAIL
    retry = lost  # its retry; on a loaded machine a retry's heartbeat may lag past the grace period, and it
    while retry.state == TrialState.FAIL:  # is given up and queued again in turn: the chain ends in a finished one
        (retry,) = [t for t in study.trials if t.user_attrs.get(RETRY_OF) == retry.number  # (a second retry,
                    and not t.user_attrs.get("tfx_hydra.over_budget")]  # queued by two finding it lost at once, yields)
    assert retry.number != victim.number and retry.params == victim.params
    assert retry.state in (TrialState.COMPLETE, TrialState.PRUNED)
    finished = counted(study)
    assert len(finished) == 6 and {t.state for t in finished} <= {TrialState.COMPLETE, TrialState.PRUNED}, [
        (t.number, t.state.name, t.user_attrs) for t in study.trials]
    first_command = victim.user_attrs[WORKER].rsplit("-", 1)[0]
    survivor = {t.user_attrs[WORKER] for t in study.trials if t.user_attrs[WORKER].startswith(first_command)}
    survivor -= {victim.user_attrs[WORKER]}
    assert any(t.user_attrs[WORKER] in survivor and t.datetime_start.timestamp() > killed_at for t in study.trials)
    assert any(not t.user_attrs[WORKER].startswith(first_command) for t in study.trials)  # the second command's

    client, parent, children = parent_and_children(tmp_path)  # one parent for both commands
    ran = [t for t in study.trials if not t.user_attrs.get("tfx_hydra.over_budget")]  # those run, by either command
    assert {c.data.tags["optuna.trial"] for c in children} == {str(t.number) for t in ran}
    lost_run = next(c for c in children if c.data.tags["optuna.trial"] == str(victim.number))
    assert lost_run.info.status == "KILLED"
    assert parent.info.status == "FINISHED"


def test_a_ctrl_c_while_hydra_closes_a_trials_job_leaves_the_trial_complete_not_run_again(tmp_path):
    """The window the joblib Ctrl-C test once hit: the trial's run had ended FINISHED, Hydra was still
    closing its job, and the worker failed the trial and queued its parameters to run again. Now the
    interrupt waits until the study is told: the trial is COMPLETE (or PRUNED), its run FINISHED, nothing
    queued, and the command still stops with 130 and its resume line."""
    planted = "+hydra.callbacks.ctrl_c._target_=tests.helpers.search.CtrlCAtFirstJobsEnd"
    done = run_cli_in_process(search(3, "hparams_search.workers=1", planted), cwd=tmp_path, multirun=True)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "tfx_hydra: interrupted" in done.stderr, done.stderr[-3000:]
    study = study_of(tmp_path)
    assert [(t.number, t.state) for t in study.trials if t.state not in (TrialState.COMPLETE, TrialState.PRUNED)] == []
    assert [t.number for t in study.trials] == [0]  # the worker stopped once trial 0 was told
    _, parent, children = parent_and_children(tmp_path)
    assert [(c.data.tags["optuna.trial"], c.info.status) for c in children] == [("0", "FINISHED")]


def test_a_ctrl_c_while_hydra_closes_a_batchs_job_tells_the_trial_as_its_run_ended(tmp_path):
    """The same window without workers: the basic launcher's batch is cut by the interrupt before it hands
    back the finished job's result, so the search reads the trial's FINISHED run instead and tells the
    study its objective (or PRUNED); only trials still training are failed and run again."""
    planted = "+hydra.callbacks.ctrl_c._target_=tests.helpers.search.CtrlCAtFirstJobsEnd"
    # Python's own Ctrl-C handler, as a command started from a terminal has it (a shell's `cmd &` ignores SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        done = run_cli_in_process(search(3, planted), cwd=tmp_path, multirun=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "tfx_hydra: interrupted" in done.stderr, done.stderr[-3000:]
    study = study_of(tmp_path)
    (first,) = study.trials  # nothing queued again
    _, parent, children = parent_and_children(tmp_path)
    (run,) = children
    assert (run.data.tags["optuna.trial"], run.info.status, first.state) == ("0", "FINISHED", TrialState.COMPLETE)
    assert first.value == run.data.metrics["objective"] == pytest.approx(run.data.metrics["val_accuracy"])


def test_a_ctrl_c_while_hydra_closes_a_pruned_trials_job_tells_it_pruned(tmp_path):
    """The same window at the end of a trial the pruner stopped: PRUNED, as its run says, not run again."""
    planted = "+hydra.callbacks.ctrl_c._target_=tests.helpers.search.CtrlCAtFirstPrunedJobsEnd"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in the test above
    try:
        done = run_cli_in_process(search(8, planted), cwd=tmp_path, multirun=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.returncode == 130, done.stderr[-3000:]
    study = study_of(tmp_path)
    *before, last = study.trials  # the interrupted batch's trial is the last asked for, nothing queued after it
    assert last.state == TrialState.PRUNED and not any(t.user_attrs.get(RETRY_OF) is not None for t in study.trials)
    _, parent, children = parent_and_children(tmp_path)
    (run,) = [c for c in children if c.data.tags["optuna.trial"] == str(last.number)]
    assert (run.info.status, run.data.tags["optuna.state"]) == ("FINISHED", "PRUNED")


def args_space(study) -> set[str]:
    """The space's keys, as the trials that ran whole hold them."""
    return set().union(*(t.params.keys() for t in study.trials if t.state == TrialState.COMPLETE))


def test_ctrl_c_stops_every_worker_and_two_joblib_workers_resume_their_trials_without_a_batch(tmp_path, capfd):
    """hydra/launcher=parallel, two workers. Ctrl-C on the terminal reaches the command and its workers
    (one process group): the exit status is 130 with the command that resumes, the trials in flight are
    FAIL and queued, their runs KILLED. The same command again: two worker processes, each asking for
    its next trial as soon as its own ends, run the queued parameters and the rest of the study; every
    trial is one child run, labelled by its job on the shared terminal."""
    args = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2", *search(8, "hparams_search.workers=2")]
    command = [sys.executable, "-m", "tfx_hydra", "-m", *args]
    with command_in_its_own_session(command, tmp_path) as first:
        wait_for_running_trial(tmp_path, number=2, process=first, with_run=True, or_later=True)
        os.killpg(first.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, _ = first.communicate(timeout=120)
    assert first.returncode == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    stopped = study_of(tmp_path).trials  # as the interrupted command left them
    interrupted = [t for t in stopped if t.state == TrialState.FAIL]
    assert interrupted and not [t for t in stopped if t.state == TrialState.RUNNING]
    # one account of what happened, with which trials run again and the command that resumes; nothing that
    # contradicts it ("nothing to resume", a worker "lost", a trial's line of its own)
    (closing,) = [line for line in out.splitlines() if line.startswith("tfx_hydra: interrupted (SIGINT)")]
    numbers = ", ".join(str(t.number) for t in sorted(interrupted, key=lambda t: t.number))
    assert f"trial{'s' if len(interrupted) > 1 else ''} {numbers} interrupted (KILLED) and run again first" in closing
    assert "Resume it (finished jobs are skipped) with: python -m tfx_hydra -m hydra/launcher=parallel" in closing
    for contradiction in ("before a run started", "nothing to resume", "the sweep lost", "died without a word",
                          "it is FAIL, and its parameters run again"):
        assert contradiction not in out, out[-3000:]
    assert {t.user_attrs.get(RETRY_OF) for t in stopped if t.state == TrialState.WAITING} == {
        t.number for t in interrupted}  # each queued again, once
    capfd.readouterr()

    again = run_cli_in_process(args, cwd=tmp_path, multirun=True)
    assert again.returncode == 0, again.stderr[-3000:]
    shown = again.stdout + again.stderr + "".join(capfd.readouterr())
    study = study_of(tmp_path)
    finished = counted(study)
    assert len(finished) == 8 and {t.state for t in finished} <= {TrialState.COMPLETE, TrialState.PRUNED}
    for trial in interrupted:
        (retry,) = [t for t in study.trials if t.user_attrs.get(RETRY_OF) == trial.number]
        # its parameters run again; a worker the launcher killed while Optuna was still writing them (the
        # trial then has no worker and no heartbeat: study.unclaimed) left some unwritten, which the sampler draws
        assert trial.params.items() <= retry.params.items() and retry.params.keys() == args_space(study)
    ran_before = {t.number for t in stopped if t.state != TrialState.WAITING}
    resumed = [t for t in counted(study) if t.number not in ran_before]  # the trials the resuming command ran
    workers = {t.user_attrs[WORKER] for t in resumed}
    assert len(workers) == 2 and {w[-2:] for w in workers} == {"-0", "-1"}, workers
    assert len({t.user_attrs[PROCESS] for t in resumed}) == 2  # two processes, neither of them this one
    assert not any(t.user_attrs[PROCESS].endswith(f":{os.getpid()}") for t in resumed)
    for trial in resumed:
        assert f"[job {trial.number}] " in shown, shown[-3000:]  # its lines, labelled by its trial's job

    client, parent, children = parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED" and "error" not in parent.data.tags  # the interruption's, gone
    by_trial = {int(c.data.tags["optuna.trial"]): c for c in children}
    # stopped mid-training: KILLED (a trial asked for the instant Ctrl-C came may have no run yet: it is
    # queued again all the same)
    ended = {t.number: (by_trial[t.number].info.status, by_trial[t.number].data.tags.get("error"))
             for t in interrupted if t.number in by_trial}
    assert {status for status, _ in ended.values()} <= {"KILLED"}, ended
    assert {c.info.status for c in children} <= {"FINISHED", "KILLED"}, {  # none left RUNNING
        c.info.run_name: (c.info.status, c.data.tags.get("error")) for c in children}
    assert {t.number for t in finished} <= set(by_trial)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.launcher"].endswith("JoblibLauncher")
    assert_pruned_trials_look_pruned(study, client, children)
    idle = parent.data.metrics["sweep.idle_worker_seconds"]
    busy = sum(t.user_attrs["tfx_hydra.seconds"] for t in resumed)
    assert 0.0 <= idle < busy / 2, (idle, busy)  # only the end: one worker finishing while the other trains


def test_the_worker_key_typed_by_hand_is_refused_with_one_message(tmp_path):
    """hparams_search.worker is the search's own, set on its worker jobs: outside a search there is nothing to
    serve, said before any work, with no traceback and no run."""
    done = run_cli_in_process(["hparams_search=optuna", "hparams_search.worker=c1-0"], cwd=tmp_path)
    assert done.returncode == 1
    assert "ConfigError: hparams_search.worker=c1-0 is set by the search for its own worker jobs, and there is " \
           "no search here" in done.stderr, done.stderr[-2000:]
    assert "Fix: drop hparams_search.worker; hparams_search.workers=N starts N workers" in done.stderr
    assert "Traceback" not in done.stderr and mlflow_runs(tmp_path) == []
