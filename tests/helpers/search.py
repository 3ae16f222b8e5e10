"""What the end-to-end search tests share: a tiny search command, and the study, runs and pruned
trials read back from a launch dir.

The space always holds a learning rate that cannot learn in one epoch (1e-5) beside ones that
can, so the seeded pruner has trials to prune; which trials it prunes is the study's business,
what a pruned trial looks like (in Optuna, in MLflow, in the sweep table) is checked on every one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import optuna
import pytest
from hydra.experimental.callback import Callback
from optuna.trial import TrialState

from tests.helpers import cli_env, mlflow_client

TINY = ["trainer.epochs=3", "data.limit=300", "export=none", "export.mlflow_model=false",
        "trainer.backup=false", "trainer.tensorboard=false"]
SPACE = ["optimizer.learning_rate=choice(0.00001,0.003,0.01)", "model.units=choice(16,32)"]  # + the preset's
PRUNE_EARLY = ["hparams_search.pruner_args={n_startup_trials:1,n_warmup_steps:0}"]
# a beat a second, and a trial found lost after 10 s without one: a process importing TensorFlow holds
# Python's lock for a second or more (longer on a loaded machine), and none of its threads beats meanwhile
FAST_HEARTBEAT = ["hparams_search.heartbeat_interval=1", "hparams_search.grace_period=10"]


def search(n_trials: int, *extra: str) -> list[str]:
    pruning = [] if "hparams_search.pruner=none" in extra else PRUNE_EARLY
    return ["hparams_search=optuna", f"hparams_search.n_trials={n_trials}", *TINY, *SPACE, *pruning,
            *FAST_HEARTBEAT, *extra]


def study_of(launch: Path, name: str = "mlp-digits") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{launch / 'optuna.db'}")


def parent_and_children(launch: Path):
    client = mlflow_client(launch)
    runs = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [p.info.run_name for p in parents]
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags),
                      key=lambda r: int(r.data.tags["optuna.trial"]))
    return client, parents[0], children


def assert_pruned_trials_look_pruned(study, client, children, epochs: int = 3, metric: str = "val_accuracy",
                                     tested: str = "test_accuracy") -> int:
    """Every PRUNED trial: told PRUNED (not FAIL), its MLflow run FINISHED with the epochs it trained,
    tagged PRUNED, no objective, nothing exported. Returns how many there were."""
    by_trial = {int(c.data.tags["optuna.trial"]): c for c in children}
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    for trial in pruned:
        run = by_trial[trial.number]
        trained = int(run.data.tags["epochs_trained"])
        assert run.info.status == "FINISHED" and run.data.tags["optuna.state"] == "PRUNED"
        assert trained < epochs and trained == len(trial.intermediate_values)
        assert len(client.get_metric_history(run.info.run_id, f"epoch/{metric}")) == trained
        assert "objective" not in run.data.metrics and tested not in run.data.metrics
        assert not [a for a in client.list_artifacts(run.info.run_id) if a.path in ("export", "model")]
    for trial in study.trials:
        if trial.state == TrialState.COMPLETE:
            run = by_trial[trial.number]
            assert run.data.tags["optuna.state"] == "COMPLETE" and run.data.tags["epochs_trained"] == str(epochs)
            assert run.data.metrics["objective"] == pytest.approx(trial.value)
            assert len(trial.intermediate_values) == epochs
    return len(pruned)


def wait_for_running_trial(launch: Path, number: int, process: subprocess.Popen, timeout: float = 240,
                           with_run: bool = False, or_later: bool = False):
    """Trial `number` RUNNING in the study (`with_run`: and its job's MLflow run started). `or_later`: the
    first of trial `number` and the later ones found RUNNING -- a trial its pruner stops after one short
    epoch can begin and end between two looks, and a test that only needs some trial in flight must not
    wait for that one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.stdout.read()[-3000:]
        if (launch / "optuna.db").exists():
            try:
                trials = study_of(launch).get_trials(deepcopy=False)
            except Exception:  # noqa: BLE001 - the study (or its tables) is being created
                trials = []
            for trial in trials[number:] if or_later else trials[number:number + 1]:
                if trial.state == TrialState.RUNNING and (not with_run or trial_has_run(launch, trial.number)):
                    return trial
        time.sleep(0.3)
    raise AssertionError(f"trial {number}{' or a later one' if or_later else ''} never ran")


def trial_has_run(launch: Path, number: int) -> bool:
    client = mlflow_client(launch)
    experiment = client.get_experiment_by_name("tfx_hydra")
    return bool(experiment and client.search_runs([experiment.experiment_id],
                                                  filter_string=f"tags.`optuna.trial` = '{number}'"))


@contextmanager
def command_in_its_own_session(command: list[str], cwd: Path) -> Iterator[subprocess.Popen]:
    """`command` started as a terminal starts it (a process group of its own, stdout and stderr as one
    text stream), killed with its whole group if the test leaves it running."""
    process = subprocess.Popen(command, cwd=cwd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


class CtrlCAtFirstJobsEnd(Callback):
    """A Hydra callback (`+hydra.callbacks.ctrl_c._target_=tests.helpers.search.CtrlCAtFirstJobsEnd`) that
    sends this process a SIGINT, as a terminal's Ctrl-C would, the moment Hydra ends its first job: after
    the job's task returned, while Hydra still closes it. An interrupt planted at that instant, which a
    test cannot time from outside; the rest of the run is real."""

    def __init__(self) -> None:
        self.sent = False

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


class CtrlCAtFirstPrunedJobsEnd(CtrlCAtFirstJobsEnd):
    """The same Ctrl-C, at the end of the first job whose trial the pruner stopped."""

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if type(job_return.return_value).__name__ == "PrunedResult":
            super().on_job_end(config, job_return, **kwargs)
