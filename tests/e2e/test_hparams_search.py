"""hparams_search=optuna end to end, in the command's own process (the basic launcher): a search
killed with -9 resumes in its study and parent; two commands share a study kept in a journal file.
Real Hydra multiruns of real (tiny) Keras trials, real Optuna storages, a real MLflow store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState
from PIL import Image

from tests.helpers import cli_env
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.search import (
    assert_pruned_trials_look_pruned,
    parent_and_children,
    search,
    study_of,
    wait_for_running_trial,
)

pytestmark = pytest.mark.slow


def test_a_search_prunes_survives_kill_9_and_resumes_in_its_study_and_parent(tmp_path):
    """Basic launcher: trials in the command's own process. The command is killed (-9) during a
    trial; the same command again finds that trial lost (no heartbeat), runs its parameters again,
    and completes the study to its n_trials, under the same parent run."""
    command = [sys.executable, "-m", "tfx_hydra", "-m", *search(5, "export.mlflow_model=true",
                                                                  "export.register_as=digits_best")]
    first = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        victim = wait_for_running_trial(tmp_path, number=2, process=first, with_run=True)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    again = run_cli_in_process(search(5, "export.mlflow_model=true", "export.register_as=digits_best"),
                               cwd=tmp_path, multirun=True)  # the same command again, in process: no kill now
    assert again.returncode == 0, again.stderr[-3000:]
    assert "study 'mlp-digits' (resumed)" in again.stdout, again.stdout[:3000]
    assert "2 of 5 trials finished, 1 running" in again.stdout
    assert "trial 2 lost its process" in again.stdout + again.stderr

    study = study_of(tmp_path)
    lost = study.trials[2]
    assert lost.state == TrialState.FAIL
    retry = [t for t in study.trials if t.user_attrs.get("tfx_hydra.retry_of") == 2]
    assert len(retry) == 1 and retry[0].params == victim.params  # the same parameters, once more
    counted = [t for t in study.trials if t.number != 2]
    assert len(counted) == 5 and {t.state for t in counted} <= {TrialState.COMPLETE, TrialState.PRUNED}

    client, parent, children = parent_and_children(tmp_path)
    assert {c.data.tags["optuna.trial"] for c in children} == {str(t.number) for t in study.trials}
    lost_run = next(c for c in children if c.data.tags["optuna.trial"] == "2")
    assert lost_run.info.status == "KILLED"  # closed by the next command: its process was gone
    assert_pruned_trials_look_pruned(study, client, children)
    assert parent.info.status == "FINISHED" and parent.data.tags["optuna.study"] == "mlp-digits"
    assert parent.data.tags["optuna.best_trial"] == str(study.best_trial.number)
    # the run page: the search's own params (its space as fitted to the MLP), Created by, a description
    assert parent.data.params == {
        "space.optimizer.learning_rate": "choice(1e-05, 0.003, 0.01)", "space.model.units": "choice(16, 32)",
        "space.model.dropout": "interval(0.0, 0.5)", "space.trainer.batch_size": "choice(32, 64, 128)",
        "sampler": "tpe", "pruner": "median", "n_trials": "5", "study": "mlp-digits"}
    assert parent.data.tags["mlflow.user"]
    assert parent.data.tags["mlflow.note.content"].startswith(
        "Optuna search (tpe sampler, median pruner) of study `mlp-digits`: 5 trials over optimizer.learning_rate, "
        "model.units, model.dropout, trainer.batch_size, each a child run, ranked by val_accuracy (maximize).")
    for child in children:  # named by its trial and values, rounded: 'trial 3: lr 3e-3, units 32, ...'
        trial = study.trials[int(child.data.tags["optuna.trial"])]
        assert child.info.run_name.startswith(f"trial {trial.number}: lr "), child.info.run_name
        assert f"units {trial.params['model.units']}" in child.info.run_name
    assert json.loads(parent.data.tags["optuna.best_params"]) == study.best_trial.params
    assert json.loads(parent.data.tags["optuna.states"]) == {
        s: sum(t.state.name == s for t in counted) for s in {t.state.name for t in counted}}
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"multirun.yaml", "optimization_results.yaml", "sweep_summary.txt"} <= artifacts
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "optuna")}
    assert {"optuna/optuna_optimization_history.png", "optuna/optuna_intermediate_values.png"} <= plots
    best_run = next(c for c in children if c.data.tags["optuna.trial"] == str(study.best_trial.number))
    assert parent.data.tags["sweep.registered_model"] == "digits_best/1"
    version = client.get_model_version("digits_best", "1")
    assert version.run_id == best_run.info.run_id  # the best trial's model, registered once
    assert not [c for c in children if "mlflow.registered_model" in c.data.tags]
    summary = (tmp_path / "multirun" / "mlp-digits" / "sweep_summary.txt").read_text()
    assert f"{len(children) - 1} finished" in summary and "1 killed" in summary
    with Image.open(tmp_path / "multirun" / "mlp-digits" / "sweep_summary.png") as image:  # the plot's bars
        drawn = image.text["Description"].splitlines()
    for child in children:
        line = next(line for line in drawn if line.startswith(f"{child.info.run_name}: "))
        if child.data.tags.get("optuna.state") == "PRUNED":  # its bar: what it last reported, not a blank FINISHED
            assert f": PRUNED, {child.data.metrics['epoch/val_accuracy']:.4g} (last reported)" in line, line
        else:
            assert ": PRUNED" not in line, line

    done = run_cli_in_process(search(5, "export.mlflow_model=true", "export.register_as=digits_best"), cwd=tmp_path,
                              multirun=True)  # once more: the study already holds its 5 trials
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tfx_hydra search: nothing to do: 5 of 5 trials finished; raise hparams_search.n_trials to run more " \
           "(e.g. hparams_search.n_trials=10)" in done.stdout, done.stdout[-3000:]
    assert len(study_of(tmp_path).trials) == len(study.trials)  # no trial was asked for


def test_two_commands_share_a_journal_file_study_and_its_parent_and_mark_its_pareto_front(tmp_path):
    """Two commands started at once on one study in a journal file (the storage for a cluster's shared
    filesystem), searching two metrics: each trial runs once, in one command or the other, under one
    parent; the Pareto-optimal trials are marked."""
    command = [sys.executable, "-m", "tfx_hydra", "-m", *search(
        4, "hparams_search.pruner=none", "hparams_search.storage=studies/journal.log",
        "sweep.metric=[val_accuracy,parameters]", "sweep.direction=[maximize,minimize]")]
    other = subprocess.Popen([*command, "hparams_search.n_jobs=3"], cwd=tmp_path, env=cli_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # one command in a process
    # of its own, three trials per batch: the basic launcher runs them one after another, so the last waits out two
    # whole jobs (TensorFlow's first import, their epochs: longer than the 10 s grace period) ...
    here = run_cli_in_process(command[4:], cwd=tmp_path, multirun=True)  # ... while the other, in this process,
    output = other.communicate(timeout=600)[0]  # looks for lost trials between its own: waiting is not lost
    assert (other.returncode, here.returncode) == (0, 0), output[-2000:] + here.stdout[-2000:] + here.stderr[-2000:]
    assert "lost its process" not in output + here.stdout + here.stderr
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="mlp-digits",
                              storage=JournalStorage(JournalFileBackend(str(tmp_path / "studies/journal.log"))))
    trials = [t for t in study.trials if not t.user_attrs.get("tfx_hydra.over_budget")]  # asked at one instant
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE and len(t.values) == 2 for t in trials)
    client, parent, children = parent_and_children(tmp_path)  # one parent for both
    assert sorted(int(c.data.tags["optuna.trial"]) for c in children) == sorted(t.number for t in trials)
    assert len({c.data.tags["process.pid"] for c in children}) == 2, "both commands ran trials"
    pareto = {str(t.number) for t in study.best_trials}
    assert set(parent.data.tags["optuna.pareto_trials"].split(",")) == pareto
    assert {c.data.tags["optuna.trial"] for c in children if c.data.tags.get("optuna.pareto") == "true"} == pareto
    for trial in trials:
        run = next(c for c in children if c.data.tags["optuna.trial"] == str(trial.number))
        assert trial.values == pytest.approx([run.data.metrics["val_accuracy"], run.data.metrics["parameters"]])
