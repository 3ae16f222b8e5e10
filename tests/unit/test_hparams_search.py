"""The search's parts without training: the space in Hydra's grammar, the settings, the checks a
command passes before its first trial, and the study's bookkeeping on a real Optuna SQLite storage
(n_trials as the study's total, lost trials found by heartbeat, two commands asking at once)."""

from __future__ import annotations

import threading
import time

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from tests.helpers.fakes import RecordingTracker
from tests.unit.test_sweeps import composed_sweep
from tfx_hydra.errors import ConfigError, TrainingError
from tfx_hydra.sweeps.hparams_search import ask_and_tell, checks, space
from tfx_hydra.sweeps.hparams_search import study as studies
from tfx_hydra.sweeps.hparams_search.optuna import SearchSettings, open_storage, storage_url
from tfx_hydra.sweeps.hparams_search.sweeper import OptunaSweeper, Rounds
from tfx_hydra.sweeps.hparams_search.trial import LiveTrial
from tfx_hydra.sweeps.hparams_search.worker import WorkerReport


def test_the_space_reads_hydras_grammar_and_sweep_overrides_join_it():
    found, fixed = space.parse({"optimizer.learning_rate": "tag(log, interval(0.0001, 0.1))",
                                "model.units": "choice(64, 128)", "trainer.epochs": "range(2, 10, 2)"},
                               ["model=cnn", "model.dropout=interval(0.0,0.5)", "trainer.batch_size=32,64"])
    assert found == {
        "optimizer.learning_rate": FloatDistribution(0.0001, 0.1, log=True),
        "model.units": CategoricalDistribution([64, 128]),
        "trainer.epochs": IntDistribution(2, 8, step=2),  # Hydra's range stops before its end
        "model.dropout": FloatDistribution(0.0, 0.5),
        "trainer.batch_size": CategoricalDistribution([32, 64]),
    }
    assert fixed == ["model=cnn"]


@pytest.mark.parametrize("params, message", [
    ({"model.units": "range(10, 5)"}, r"model.units=range\(10, 5, 1\) is empty"),
    ({"model.dropout": "interval(0.5, 0.1)"}, r"model.dropout=interval\(0.5, 0.1\) is empty or inverted.*"
                                              r"\n  Fix: model.dropout: interval\(0.1, 0.5\)"),
    ({"optimizer.learning_rate": "tag(log, interval(0.0, 0.1))"}, "a log-scale interval must start above 0"),
    ({"model.units": "choice(64"}, r"hydra.sweeper.params: cannot read 'model.units=choice\(64'"),
])
def test_an_empty_inverted_or_unreadable_range_is_one_message(params, message):
    with pytest.raises(ConfigError, match=message):
        space.parse(params, [])


def test_a_changed_space_says_which_key_changed():
    before = space.as_json(space.parse({"a": "interval(0.0, 1.0)", "b": "choice(1, 2)"}, [])[0])
    after = space.as_json(space.parse({"a": "interval(0.0, 2.0)", "c": "choice(1, 2)"}, [])[0])
    assert space.changes(before, after) == [
        "c: added", "b: removed",
        "a: was interval(0.0, 1.0), now interval(0.0, 2.0)"]


@pytest.mark.parametrize("values, message", [
    ({"sampler": "grid"}, "hparams_search.sampler=grid is not one of: tpe, random, gp, cmaes, qmc, nsga2"),
    ({"pruner": "asha"}, "hparams_search.pruner=asha is not one of: median, percentile"),
    ({"n_trials": 0}, "hparams_search.n_trials=0 is out of range: expected a positive integer"),
    ({"workers": 0}, r"hparams_search.workers=0 is out of range: expected a positive integer.\n  Fix: "
                     r"hparams_search.workers=2 \(or null: trials in batches of n_jobs\)"),
    ({"max_failure_rate": 1.5}, r"hparams_search.max_failure_rate=1.5 is out of range: expected a number \[0, 1\]"),
    ({"grace_period": 5.0, "heartbeat_interval": 10.0}, "grace_period=5.0 must be longer than"),
    ({"study_name": "a/b"}, "is not a name a folder can take"),
])
def test_bad_settings_are_refused_with_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        SearchSettings(**values)


def test_the_default_storage_is_an_sqlite_file_beside_mlflow_db(tmp_path):
    assert storage_url(SearchSettings(), str(tmp_path)) == f"sqlite:///{tmp_path}/optuna.db"
    assert storage_url(SearchSettings(storage="sqlite:///s.db"), str(tmp_path)) == f"sqlite:///{tmp_path}/s.db"
    assert storage_url(SearchSettings(storage="studies/j.log"), str(tmp_path)) == f"{tmp_path}/studies/j.log"
    assert storage_url(SearchSettings(storage="postgresql://u@h/db"), str(tmp_path)) == "postgresql://u@h/db"


def searched(tmp_path, *overrides):
    config = composed_sweep(["hparams_search=optuna", *overrides])
    config.hydra.runtime.cwd = str(tmp_path)
    return checks.plan(config, config.hydra.sweeper.params, list(config.hydra.overrides.task))


@pytest.mark.parametrize("name", ["optuna.db", "optuna.journal"])
def test_a_study_file_s_storage_is_opened_once_per_process_and_anew_once_the_file_is_replaced(name, tmp_path):
    """A search's trials in one process share the storage; a file moved aside and started again is a
    new file, and its study is written into it, not into the moved one (which the old storage holds)."""
    url = f"sqlite:///{tmp_path / name}" if name.endswith(".db") else str(tmp_path / name)
    optuna.create_study(storage=open_storage(url), study_name="first")
    kept = open_storage(url)
    assert open_storage(url) is kept
    (tmp_path / name).rename(tmp_path / f"moved-{name}")
    fresh = open_storage(url)
    assert fresh is not kept
    optuna.create_study(storage=fresh, study_name="second")
    assert open_storage(url) is not kept
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage(url))] == ["second"]
    moved = f"sqlite:///{tmp_path / f'moved-{name}'}" if name.endswith(".db") else str(tmp_path / f"moved-{name}")
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage(moved))] == ["first"]


def test_a_search_plan_names_its_study_after_model_and_data_and_gives_each_job_its_trial(tmp_path):
    plan = searched(tmp_path, "model=cnn", "export.register_as=best")
    assert plan.settings.study_name == "cnn-digits" and plan.url == f"sqlite:///{tmp_path}/optuna.db"
    job = plan.job_overrides(7, {"model.dense_units": 64, "optimizer.learning_rate": 0.001})
    assert job[-3:] == ["hparams_search.trial=7", "hparams_search.study_name=cnn-digits", "export.register_as=null"]
    assert "model.dense_units=64" in job and "optimizer.learning_rate=0.001" in job and "model=cnn" in job
    assert "hparams_search.trial=7" in job and "export.register_as=null" in job  # the best is registered once
    assert not [o for o in job if o.startswith("hparams_search.storage")]  # a URL's password is never printed


@pytest.mark.parametrize("model, size_key, left_out", [
    ("mlp", "model.units", ["model.dense_units", "model.blocks_per_stage"]),
    ("cnn", "model.dense_units", ["model.units", "model.blocks_per_stage"]),
    ("resnet_small", "model.blocks_per_stage", ["model.units", "model.dense_units"]),
])
def test_the_presets_space_fits_each_model_family(model, size_key, left_out, tmp_path):
    """hparams_search=optuna lists the size key of every built-in model family; a run searches its model's."""
    plan = searched(tmp_path, f"model={model}")
    assert list(plan.space) == ["optimizer.learning_rate", size_key, "model.dropout", "trainer.batch_size"]
    assert plan.left_out == left_out


def test_a_key_the_model_lacks_named_on_the_command_line_is_refused_before_the_study(tmp_path):
    with pytest.raises(ConfigError) as refused:
        searched(tmp_path, "model=cnn", "model.units=choice(8,16)")
    assert str(refused.value).startswith("ConfigError: model.units is not a key of model=cnn (its keys: name, ")
    assert "dense_units" in str(refused.value) and "the search cannot vary it" in str(refused.value)
    assert str(refused.value).endswith("Fix: 'model.dense_units=choice(...)' on the command line")
    assert not (tmp_path / "optuna.db").exists()  # no study was made


@pytest.mark.parametrize("overrides, message", [
    (["hparams_search.pruner=bogus"], "hparams_search.pruner=bogus is not one of"),
    (["sweep.metric=test_accuracy"], "sweep.metric=test_accuracy is not logged after each epoch"),
    (["sweep.metric=[val_accuracy,parameters]", "sweep.direction=[maximize,minimize]"],
     "Optuna prunes single-objective searches only"),
    (["sweep.metric=[val_accuracy,parameters]", "sweep.direction=maximize"],
     r"sweep.direction=maximize does not match sweep.metric=\['val_accuracy', 'parameters'\]"),
    (["hparams_search.pruner=none", "hparams_search.sampler=cmaes", "sweep.metric=[val_accuracy,parameters]",
      "sweep.direction=[maximize,minimize]"], "sampler=cmaes optimises one metric"),
    (["hparams_search.pruner_args={warmup:3}"], r"pruner_args=\{'warmup': 3\} do not fit pruner=median"),
    pytest.param(["hparams_search.storage=postgresql://u:pw@127.0.0.1:9/db"],
                 r"hparams_search.storage=postgresql://\*\*\*@127.0.0.1:9/db cannot be reached",
                 marks=pytest.mark.slow),  # heavy (a driver's connection attempt): the full suite's
])
def test_a_bad_search_fails_before_any_trial(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        searched(tmp_path, *overrides)


def test_a_resumed_study_must_be_the_same_search(tmp_path):
    plan = searched(tmp_path)
    studies.open_study(plan.url, plan.settings, plan.directions, plan.space, plan.compared_overrides, 0, 3)
    with pytest.raises(ConfigError, match=r"model.units: was choice\(.*\n  Fix: repeat the study's "
                                          r"search to continue it, or start another: hparams_search.study_name="):
        searched(tmp_path, "model.units=choice(8,16)")
    with pytest.raises(ConfigError, match=r"started with the overrides \[\]; this command has \[trainer.epochs=9\]"):
        searched(tmp_path, "trainer.epochs=9")
    assert searched(tmp_path, "hparams_search.n_trials=50").settings.n_trials == 50  # a larger total is fine
    # what is exported and registered does not change a trial's value: a later command may ask for it
    assert searched(tmp_path, "export.register_as=digits_best", "export=[savedmodel,onnx]").register_as == \
        "digits_best"


def new_study(tmp_path, name="s"):
    settings = SearchSettings(study_name=name, pruner="none")
    found, _ = space.parse({"x": "interval(0.0, 1.0)"}, [])
    study, created = studies.open_study(f"sqlite:///{tmp_path}/o.db", settings, ["maximize"], found, [], 0, 3)
    assert created
    return study, found


def test_n_trials_is_the_studys_total_and_a_retry_takes_its_lost_trials_place(tmp_path):
    study, found = new_study(tmp_path)
    for _ in range(2):
        trial = study.ask(found)
        study.tell(trial, 0.5)
    lost = study.ask(found)
    lost.set_user_attr(studies.HEARTBEAT, time.time() - 100)  # its process died 100 s ago
    assert studies.progress(study) == (2, 1)
    assert studies.retry_lost_trials(study, grace_period=30, own=set()) == [lost.number]
    assert studies.retry_lost_trials(study, grace_period=30, own=set()) == []  # failed once, retried once
    assert study.trials[lost.number].state == TrialState.FAIL
    retry = study.ask(found)  # the enqueued parameters come first
    assert retry.params == lost.params and retry.user_attrs[studies.RETRY_OF] == lost.number
    assert len(studies.counted(study.get_trials())) == 3  # the lost trial's place is its retry's


def test_a_lost_trial_two_commands_retried_at_once_runs_again_once(tmp_path):
    """Two commands finding one trial lost at the same instant both fail it and both queue its parameters
    (on SQLite each reads it RUNNING before the other's write). The race is planted -- a second retry
    queued as the other command's would be -- since its timing cannot be caused at will: the first retry
    runs, the second is told FAIL unrun with the over-budget mark, and the study still needs one trial."""
    from tfx_hydra.sweeps.hparams_search import ask_and_tell

    study, found = new_study(tmp_path)
    trial = study.ask(found)
    study.tell(trial, 0.5)
    lost = study.ask(found)
    lost.set_user_attr(studies.HEARTBEAT, time.time() - 100)
    assert studies.retry_lost_trials(study, grace_period=30, own=set()) == [lost.number]
    study.enqueue_trial(lost.params, user_attrs={studies.RETRY_OF: lost.number})  # the other command's retry
    assert studies.still_to_run(study, n_trials=3) == 2  # the two queued (the second stands for the missing one)

    retry = ask_and_tell.ask(study, found, n_trials=3)
    assert retry.params == lost.params and retry.user_attrs[studies.RETRY_OF] == lost.number
    assert ask_and_tell.ask(study, found, n_trials=3) is None  # the second retry yields
    second = study.trials[-1]
    assert second.state == TrialState.FAIL and second.user_attrs[studies.OVER_BUDGET]
    assert second.user_attrs[studies.RETRY_OF] == lost.number
    assert studies.still_to_run(study, n_trials=3) == 1  # the retry in flight counts, the yielded one not
    new = ask_and_tell.ask(study, found, n_trials=3)
    assert new is not None and studies.RETRY_OF not in new.user_attrs


def test_a_running_trial_with_a_fresh_heartbeat_is_left_to_its_command(tmp_path):
    study, found = new_study(tmp_path)
    alive = study.ask(found)
    alive.set_user_attr(studies.HEARTBEAT, time.time())
    assert studies.retry_lost_trials(study, grace_period=30, own=set()) == []
    assert studies.running_elsewhere(study, own=set()) == 1 and studies.running_elsewhere(study, {alive.number}) == 0


def test_two_commands_asking_at_once_do_not_overrun_the_total(tmp_path):
    study, found = new_study(tmp_path)
    first = study.ask(found)
    study.tell(first, 0.1)
    mine, theirs = study.ask(found), study.ask(found)  # both asked when one trial was missing
    assert not studies.over_budget(study, mine, n_trials=2)
    assert studies.over_budget(study, theirs, n_trials=2)  # the later one yields, told FAIL with a mark
    assert study.trials[theirs.number].state == TrialState.FAIL
    assert len(studies.counted(study.get_trials())) == 2


def test_the_sampler_of_a_resumed_study_proposes_new_trials(tmp_path):
    settings = SearchSettings(study_name="r", pruner="none", sampler="random")
    found, _ = space.parse({"x": "interval(0.0, 1.0)"}, [])
    url = f"sqlite:///{tmp_path}/o.db"
    study, _ = studies.open_study(url, settings, ["maximize"], found, [], 42, 3)
    first = study.ask(found)
    study.tell(first, 1.0)
    again, created = studies.open_study(url, settings, ["maximize"], found, [], 42, 3)
    assert not created and again.ask(found).params != first.params


@pytest.mark.parametrize("name", ["median", "percentile", "successive_halving", "hyperband", "none"])
def test_every_pruner_is_built_from_its_name(name):
    pruner = studies.pruner(SearchSettings(pruner=name), max_epochs=10)
    assert isinstance(pruner, optuna.pruners.BasePruner)


@pytest.mark.parametrize("direction, values, objective, leads", [
    ("maximize", [0.5, 0.9], 0.9, True),     # as good as the best so far: plots and exports
    ("maximize", [0.5, 0.9], 0.8, False),
    ("minimize", [0.3, 0.2], 0.1, True),
    ("minimize", [0.3, 0.2], 0.25, False),
    ("maximize", [], 0.1, True),             # the first trial to complete leads
])
def test_a_trial_behind_the_best_so_far_makes_no_plots_or_exports(direction, values, objective, leads):
    study = optuna.create_study(direction=direction)
    for value in values:
        study.add_trial(optuna.trial.create_trial(value=value))
    trial = LiveTrial.__new__(LiveTrial)  # the study and settings a job's live trial holds, without a storage
    trial.study, trial.settings, trial.metric, trial.multi_objective = study, SearchSettings(trial=len(values)), \
        "val_accuracy", False
    tracker = RecordingTracker()
    assert trial.leads(objective, tracker) is leads
    if leads:
        assert "artifacts" not in tracker.tags
    else:
        best = values.index(max(values) if direction == "maximize" else min(values))
        assert tracker.tags["artifacts"] == (f"skipped: behind trial {best}'s val_accuracy {values[best]:.4g} "
                                             "(hparams_search.trial_artifacts=leading)")
        trial.settings.trial_artifacts = "all"
        assert trial.leads(objective, tracker)  # every trial's, when asked


class WorkersThatFindNoStudy:
    """A launcher whose workers all return having run no trial -- what workers started in another launch
    directory do (they open another study). Faked: a real one would need a misconfigured cluster."""

    def __init__(self) -> None:
        self.batches: list[list[list[str]]] = []

    def launch(self, overrides, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        self.batches.append(overrides)
        returns = []
        for _ in overrides:
            job = JobReturn()
            job.status, job.return_value = JobStatus.COMPLETED, WorkerReport("c0-0", ended_at=time.time())
            returns.append(job)
        return returns


def two_worker_rounds(tmp_path, launcher) -> Rounds:
    """The sweeper's rounds of a 3-trial search with 2 workers, launching through `launcher` (a fake)."""
    plan = searched(tmp_path, "hparams_search.workers=2", "hydra/launcher=parallel", "hparams_search.n_trials=3")
    study, _ = studies.open_study(plan.url, plan.settings, plan.directions, plan.space, plan.compared_overrides,
                                  plan.seed, plan.max_epochs)
    sweeper = OptunaSweeper()
    sweeper.config = composed_sweep(["hparams_search=optuna", "hparams_search.workers=2", "hydra/launcher=parallel"])
    sweeper.launcher = launcher
    return Rounds(sweeper, plan, study)


def test_workers_that_run_no_trial_stop_the_search_with_a_message_rather_than_restart_for_ever(tmp_path):
    rounds = two_worker_rounds(tmp_path, WorkersThatFindNoStudy())
    sweeper = rounds.sweeper
    with pytest.raises(TrainingError, match=r"2 search workers were started 3 times and ran no trial, while study "
                                            r"'mlp-digits' in sqlite:///.*optuna.db still needs trials"):
        rounds.run()
    assert len(sweeper.launcher.batches) == 3
    names = [next(o for o in batch[i] if o.startswith("hparams_search.worker=")) for batch in sweeper.launcher.batches
             for i in range(2)]
    assert len(set(names)) == 6  # each batch's workers numbered on from the last: worker_0 .. worker_5
    assert [o for o in sweeper.launcher.batches[2][1] if o.startswith("hydra.sweep.subdir=")] == [
        "hydra.sweep.subdir=worker_5"]


class FailedJobError(Exception):
    """submitit's exception name for a job that never gave a result: what sbatch refusing a job raises."""


class LauncherThatCannotStartWorkers:
    """Raises at every launch as submitit does when sbatch refuses the jobs (tests/e2e/test_slurm.py causes
    it for real on a Slurm cluster; this fake keeps the rule checked where Slurm is not installed)."""

    def __init__(self) -> None:
        self.launches = 0

    def launch(self, overrides, initial_job_idx):
        self.launches += 1
        raise FailedJobError("sbatch: error: invalid partition specified: nope")


def test_workers_the_launcher_cannot_start_stop_the_search_with_its_reason_rather_than_retry_for_ever(tmp_path):
    rounds = two_worker_rounds(tmp_path, LauncherThatCannotStartWorkers())
    with pytest.raises(TrainingError, match=r"2 search workers were started 3 times and none of them asked for a "
                                            r"trial: the launcher says FailedJobError: sbatch: error: invalid "
                                            r"partition specified: nope"):
        rounds.run()
    assert rounds.sweeper.launcher.launches == 3


def test_a_trial_failed_as_interrupted_whose_retry_was_never_queued_is_queued_once():
    """The fault: a worker killed between telling its interrupted trial FAIL and queueing its retry (joblib
    kills its workers when the command is interrupted) -- planted by stopping retry_lost_trials' two writes
    after the first."""
    study = optuna.create_study(direction="maximize")
    distributions = {"x": FloatDistribution(0.0, 1.0)}
    interrupted, errored, elsewhere = (study.ask(distributions) for _ in range(3))
    for trial in (interrupted, elsewhere):
        study._storage.set_trial_user_attr(trial._trial_id, studies.REQUEUED, True)
    for trial in (interrupted, errored, elsewhere):
        study.tell(trial, state=TrialState.FAIL)  # ... and killed before enqueue_trial

    assert studies.requeue_missed(study, only={interrupted.number, errored.number}) == [interrupted.number]
    (queued,) = study.get_trials(states=(TrialState.WAITING,))
    assert queued.system_attrs["fixed_params"] == interrupted.params  # what the next ask of the study runs
    assert queued.user_attrs[studies.RETRY_OF] == interrupted.number
    assert studies.requeue_missed(study, only={interrupted.number, errored.number}) == []  # once


class WorkersKilledByTheirLauncher:
    """What the command's workers leave when Ctrl-C reaches it: joblib kills them (SIGKILL) as it stops. One
    was in the middle of asking for a trial -- planted as Optuna's ask alone, a trial with one parameter and
    none of ask_and_tell.ask's marks; one had claimed its trial. Meanwhile another command, alive, claims its own."""

    def __init__(self) -> None:
        self.killed_mid_ask = self.killed_in_trial = self.other_command_s = None

    def launch(self, overrides, initial_job_idx):
        study = self.rounds.study
        worker = next(o for o in overrides[0] if o.startswith("hparams_search.worker=")).split("=")[1]
        self.killed_in_trial = ask_and_tell.ask(study, self.rounds.plan.space, 3, worker).number
        self.killed_mid_ask = study.ask({"x": FloatDistribution(0.0, 1.0)}).number
        other = study.ask()
        threading.Timer(0.3, lambda: other.set_user_attr(studies.HEARTBEAT, time.time())).start()  # claimed late
        self.other_command_s = other.number
        raise KeyboardInterrupt


def test_an_interrupted_command_queues_again_the_trials_its_killed_workers_held_even_one_asked_unclaimed(tmp_path):
    launcher = WorkersKilledByTheirLauncher()
    rounds = launcher.rounds = two_worker_rounds(tmp_path, launcher)
    with pytest.raises(KeyboardInterrupt):
        rounds.run()
    rounds.retry_interrupted()  # what the sweeper does as the interrupt passes

    study = rounds.study
    by_number = {t.number: t for t in study.trials}
    assert by_number[launcher.killed_in_trial].state == TrialState.FAIL
    assert by_number[launcher.killed_mid_ask].state == TrialState.FAIL
    assert by_number[launcher.other_command_s].state == TrialState.RUNNING  # alive elsewhere: not ours to retry
    queued = {t.user_attrs[studies.RETRY_OF]: t for t in study.get_trials(states=(TrialState.WAITING,))}
    assert set(queued) == {launcher.killed_in_trial, launcher.killed_mid_ask}
    assert queued[launcher.killed_mid_ask].system_attrs["fixed_params"] == by_number[launcher.killed_mid_ask].params


@pytest.mark.parametrize("failed, ran, stops", [(0, 4, False), (1, 4, False), (2, 4, True), (1, 1, True)])
def test_a_search_stops_once_more_than_max_failure_rate_of_its_trials_failed(failed, ran, stops):
    if not stops:
        ask_and_tell.require_failure_rate(failed, ran, 0.25, "worker c1-0")
        return
    with pytest.raises(TrainingError, match=rf"{failed} of the {ran} trials worker c1-0 ran failed, more than "
                                            r"hparams_search.max_failure_rate=0.25: the search stops.\n  Fix: see the "
                                            r"FAILED child runs' `error` tags"):
        ask_and_tell.require_failure_rate(failed, ran, 0.25, "worker c1-0")


def test_a_trial_another_command_gave_up_as_lost_while_it_ran_is_not_counted_as_failed():
    """The fault, planted through the real mechanism: another command's retry_lost_trials gives the trial up
    while its job runs (grace period passed), so the job's next report raises Optuna's
    UpdateFinishedTrialError. Its command does not count that as a failed trial (on a loaded machine it
    stopped a worker at max_failure_rate)."""
    from hydra.core.utils import JobReturn, JobStatus
    from optuna.exceptions import UpdateFinishedTrialError

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    assert studies.retry_lost_trials(study, grace_period=-1.0, own=set()) == [trial.number]  # "another command"
    with pytest.raises(UpdateFinishedTrialError) as raised:
        trial.report(0.5, step=0)
    job = JobReturn()
    job.status, job.return_value = JobStatus.FAILED, raised.value
    assert ask_and_tell.tell(study, trial, job) is False
    assert study.trials[0].state == optuna.trial.TrialState.FAIL  # as the other command left it
    job.return_value = RuntimeError("out of memory")  # a trial that failed on its own still counts
    assert ask_and_tell.tell(study, study.ask(), job) is True


def test_a_trial_is_pruned_before_its_last_epoch_but_never_at_it():
    """A pruner that prunes everything (a threshold no accuracy reaches): the first epoch of three is pruned;
    the last epoch of a fit is only reported, so a trial that trained every epoch ends with its value."""
    from tfx_hydra.sweeps.hparams_search.pruning import Pruned, TrialPruning

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0))
    early = study.ask()
    callback = TrialPruning(early, "val_accuracy")
    callback.set_params({"epochs": 3})
    with pytest.raises(Pruned):
        callback.on_epoch_end(0, {"val_accuracy": 0.5})
    last = study.ask()
    callback = TrialPruning(last, "val_accuracy")
    callback.set_params({"epochs": 3})
    callback.on_epoch_end(2, {"val_accuracy": 0.75})  # the fit's last epoch: reported, not pruned
    assert study._storage.get_trial(last._trial_id).intermediate_values == {2: 0.75}
