"""hydra/launcher=slurm on a real Slurm: a one-node cluster on this machine (tests/slurm/cluster.sh: munge,
MariaDB, slurmdbd, slurmctld, slurmd), brought up once for these tests. Every job is a real Slurm job,
submitted by Hydra's submitit_slurm launcher, run by slurmd and found again in Slurm's accounting (sacct),
as on a university or company cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
from optuna.trial import TrialState

from tests.helpers import cli_env, mlflow_client, mlflow_runs, page_commands
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.search import assert_pruned_trials_look_pruned, command_in_its_own_session, search, study_of
from tests.helpers.slurm import REPO, slurm_cluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]  # one cluster, one test process

# What a one-node cluster of 2 CPUs and no GPU can give a job; the rest is conf/hydra/launcher/slurm.yaml's
SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_task=null",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]
FAST = ["trainer.epochs=2", "data.limit=300", "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"]


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    yield from slurm_cluster(tmp_path_factory.mktemp("slurm"))


@pytest.fixture
def on_slurm(slurm, monkeypatch):
    """This test's commands (sbatch, sacct, scancel, submitit's calls) talk to the test cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm


def slurm_jobs(slurm, sweep_dir: Path) -> dict[str, str]:
    """The Slurm jobs of one sweep (submitit keeps a folder per job id in the sweep dir): id -> state."""
    ids = {folder.name.split("_")[0] for folder in (sweep_dir / ".submitit").iterdir() if folder.is_dir()}
    return {row["JobID"]: row["State"] for row in slurm.sacct() if row["JobID"].split("_")[0] in ids}


def test_a_grid_sweep_runs_as_slurm_jobs_under_one_parent_and_a_failed_job_is_counted(on_slurm, tmp_path):
    """Two jobs as a Slurm job array: one trains, one has a loss Keras does not know. Both are Slurm jobs
    sacct knows; both runs nest under the sweep's one parent; the summary counts the failure and the job's
    error comes back as the job said it."""
    done = run_cli_in_process([*SLURM, "trainer.loss=sparse_categorical_crossentropy,no_such_loss", *FAST],
                              cwd=tmp_path, multirun=True)
    assert done.returncode == 1  # Hydra reports the failed job once all jobs of the array have run
    assert "ConfigError: trainer.loss: Keras does not know 'no_such_loss'." in done.stderr
    assert "Traceback" not in done.stderr and "Error executing job" not in done.stderr
    assert "jobs              │ 1 finished, 1 failed, 0 killed" in done.stdout
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = sorted((r for r in runs if r is not parent), key=lambda r: int(r.data.tags["sweep.job_num"]))
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert parent.data.tags["sweep.launcher"].endswith("submitit_launcher.SlurmLauncher")
    assert [c.info.status for c in children] == ["FINISHED", "FAILED"]
    assert parent.info.status == "FAILED" and parent.data.tags["sweep.failed"] == "1"
    sweep_dir = Path(parent.data.tags["sweep.dir"])
    jobs = slurm_jobs(on_slurm, sweep_dir)
    assert len(jobs) == 2 and all(state in ("COMPLETED", "FAILED") for state in jobs.values()), jobs
    hosts = {c.data.tags["process.host"] for c in children}
    assert hosts == {os.uname().nodename}  # run by slurmd on the cluster's node, not by this process
    assert all(c.data.tags["process.pid"] != str(os.getpid()) for c in children)
    for child in children:  # each job's log where the README says: <sweep dir>/<job>/tfx_hydra.log
        number = child.data.tags["sweep.job_num"]
        assert "run: MLflow run " + child.info.run_id in (sweep_dir / number / "tfx_hydra.log").read_text()
    assert list((sweep_dir / ".submitit").glob("*/*_log.out"))  # and Slurm's own, beside submitit's


def test_a_search_s_workers_are_slurm_jobs_that_run_and_prune_trials(on_slurm, tmp_path):
    """hparams_search.workers=2 under Slurm: two Slurm jobs, each running trials one after another against
    the shared study (on the launch dir every node sees), its pruner stopping hopeless ones."""
    done = run_cli_in_process([*SLURM, *search(4, "hparams_search.workers=2")], cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    study = study_of(tmp_path)
    assert len(study.trials) == 4 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    processes = {t.user_attrs["tfx_hydra.process"] for t in study.trials}
    assert not any(p.endswith(f":{os.getpid()}") for p in processes)  # the Slurm jobs ran them
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = [r for r in runs if r is not parent]
    assert sorted(int(c.data.tags["optuna.trial"]) for c in children) == [0, 1, 2, 3]
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.launcher"].endswith("SlurmLauncher")
    assert_pruned_trials_look_pruned(study, mlflow_client(tmp_path), children)
    jobs = slurm_jobs(on_slurm, Path(parent.data.tags["sweep.dir"]))
    assert sorted(jobs.values()) == ["COMPLETED", "COMPLETED"], jobs  # the two workers, as Slurm saw them


def test_the_search_on_slurm_example_runs_its_readmes_search_as_slurm_workers(on_slurm, tmp_path):
    """examples/search_on_slurm, copied out as a user would: its README's command, with this cluster's resources
    and a shorter study, runs the project's own model's trials in a worker that is a Slurm job."""
    project = tmp_path / "search_on_slurm"
    shutil.copytree(REPO / "examples" / "search_on_slurm", project, ignore=shutil.ignore_patterns("__pycache__"))
    command = "tfx-hydra -m experiment=tuned hparams_search=on_slurm"
    assert command in (project / "README.md").read_text()  # the command the example's README and its tutorial give
    assert command in page_commands(REPO / "docs" / "tutorials" / "slurm.md")
    done = run_cli_in_process([*command.split()[2:], *SLURM, "hparams_search.n_trials=2", "hparams_search.workers=1",
                               "trainer.epochs=2", "data.limit=300", "export=none", "export.mlflow_model=false"],
                              cwd=project, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    study = study_of(project, "gated-digits")
    assert len(study.trials) == 2 and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert {"model.units", "model.dropout", "optimizer.learning_rate"} <= set(study.trials[0].params)
    runs = mlflow_runs(project)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.launcher"].endswith("SlurmLauncher")
    assert {r.data.params["model._target_"] for r in runs if r is not parent} == {"tuned.models.gated"}
    assert list(slurm_jobs(on_slurm, Path(parent.data.tags["sweep.dir"])).values()) == ["COMPLETED"]


def test_search_workers_slurm_refuses_stop_the_search_with_sbatch_s_reason(on_slurm, tmp_path):
    """A partition the cluster does not have: sbatch refuses every worker job. The search says sbatch's
    words after three tries, instead of submitting workers for ever."""
    done = run_cli_in_process([*SLURM, "hydra.launcher.partition=no_such_partition",
                               *search(4, "hparams_search.workers=2")], cwd=tmp_path, multirun=True)
    assert done.returncode == 1
    assert "2 search workers were started 3 times and none of them asked for a trial: the launcher says " \
           "FailedJobError: " in done.stderr, done.stderr[-3000:]
    assert "invalid partition" in done.stderr.lower() and "Traceback" not in done.stderr
    runs = mlflow_runs(tmp_path)
    assert [r.info.status for r in runs] == ["FAILED"]  # the parent, closed with the reason; no trial ran


def wait_for_job(slurm, job: str, timeout: float = 600) -> str:
    """The state Slurm's accounting gives the job once it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = {row["JobID"]: row["State"] for row in slurm.sacct()}.get(job, "PENDING")
        if state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {job} still {state} after {timeout:.0f} s")


def two_free_ports() -> int:
    """A port p with p + 1 also free: SlurmClusterResolver gives the tasks on a node consecutive ports."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        try:
            with socket.socket() as next_one:
                next_one.bind(("127.0.0.1", base + 1))
            return base
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def test_multi_worker_training_under_srun_trains_identical_weights_and_only_the_chief_tracks(on_slurm, tmp_path):
    """examples/multi_worker.sbatch, as a user submits it: two Slurm tasks, each a worker of one
    MultiWorkerMirroredStrategy (SlurmClusterResolver reads the allocation). Both end with the same weights;
    only task 0 tracks, and its run says where each task listened."""
    base = two_free_ports()
    submitted = subprocess.run(["sbatch", "--parsable", "--cpus-per-task=1", "--mem=2G", f"--chdir={tmp_path}",
                                f"--output={tmp_path}/slurm-%j.out", str(REPO / "examples" / "multi_worker.sbatch"),
                                f"strategy.slurm_port_base={base}", "trainer.epochs=2", "data.limit=600",
                                "trainer.batch_size=32", "export=none", "export.mlflow_model=false"],
                               env=cli_env(), capture_output=True, text=True, timeout=60, check=True)
    job = submitted.stdout.strip().split(";")[0]
    state = wait_for_job(on_slurm, job)  # polled here: sbatch --wait checks seldom, seconds after the job ends
    shown = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", state + "\n" + shown[-4000:]
    tasks = {task: "\n".join(line.split(": ", 1)[1] for line in shown.splitlines() if line.startswith(f"{task}: "))
             for task in ("0", "1")}  # srun --label: each line starts with its task's number
    for said in tasks.values():
        assert "strategy: multi_worker, 2 replicas" in said, said[-3000:]
    fingerprints = [re.search(r"weights sha256\s+│ (\w+)", tasks[task]).group(1) for task in ("0", "1")]
    assert fingerprints[0] == fingerprints[1]
    assert "not the chief worker" in tasks["1"]
    (run,) = mlflow_runs(tmp_path)  # task 0's, and no other
    assert run.info.status == "FINISHED" and run.data.tags["model.weights_sha256"] == fingerprints[0]
    host = socket.gethostname()
    assert run.data.tags["strategy.workers"] == f"{host}:{base}, {host}:{base + 1}"


def test_tfrecord_multi_worker_trains_as_one_slurm_job_of_two_tasks_each_reading_its_own_files(on_slurm, tmp_path):
    """experiment=tfrecord_multi_worker as its header says to run it: a sweep of one job through the Slurm
    launcher, one Slurm job of two tasks (one node here, so tasks_per_node=2), each a worker of one
    MultiWorkerMirroredStrategy over tiny TFRecords in two files, sharded by file (data.shard_policy=file:
    TensorFlow refuses to start if it cannot give each worker its files). Both tasks end with the same
    weights; the chief alone tracks, its run under the sweep's parent with both tasks' addresses."""
    from tfx_hydra.data.to_tfrecord import main as to_tfrecord

    records = tmp_path / "tfr"
    assert to_tfrecord([str(records), "--shards", "2", "data=digits"]) == 0
    base = two_free_ports()
    done = run_cli_in_process(
        [*SLURM, "experiment=tfrecord_multi_worker", "hydra.launcher.nodes=1", "hydra.launcher.tasks_per_node=2",
         f"strategy.slurm_port_base={base}", f"data.train_files={records}/train-*.tfrecord",
         f"data.validation_files={records}/validation-*.tfrecord", f"data.test_files={records}/test-*.tfrecord",
         "data.input_shape=[8,8]", "data.num_classes=10", "data.raw_scale=0.0625", "trainer.epochs=2",
         "trainer.batch_size=32", "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"],
        cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    (run,) = [r for r in runs if r is not parent]  # the chief's: task 1 tracks nothing
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.data.tags["strategy"] == "CollectiveAllReduceStrategy" and run.data.params["data.shard_policy"] == "file"
    host = socket.gethostname()
    assert run.data.tags["strategy.workers"] == f"{host}:{base}, {host}:{base + 1}"
    sweep_dir = Path(parent.data.tags["sweep.dir"])
    (job,) = slurm_jobs(on_slurm, sweep_dir).items()
    assert job[1] == "COMPLETED", job
    tasks = [(sweep_dir / ".submitit" / job[0] / f"{job[0]}_{task}_log.out").read_text() for task in (0, 1)]
    for said in tasks:
        assert "strategy: multi_worker, 2 replicas" in said, said[-3000:]
    fingerprints = [re.search(r"weights sha256\s+│ (\w+)", said).group(1) for said in tasks]
    assert fingerprints == [run.data.tags["model.weights_sha256"]] * 2
    assert "not the chief worker" in tasks[1]

def test_a_job_cancelled_with_scancel_is_named_with_the_command_that_resumes_it_from_its_backup(on_slurm, tmp_path):
    """A grid of two Slurm jobs; the long one is cancelled with scancel mid-training (Slurm sends SIGTERM,
    then SIGKILL). The sweep ends saying what it lost and the command that resumes; that command, run
    again, skips the finished job and resumes the cancelled one from its last backup in the same MLflow run."""
    sweep_dir = tmp_path / "sweep"
    args = [*SLURM, f"hydra.sweep.dir={sweep_dir}", "trainer.epochs=2,25", "data=synthetic", "data.num_examples=6000",
            "data.input_shape=[16,16]", "trainer.steps_per_execution=1", "export=none", "export.mlflow_model=false",
            "trainer.tensorboard=false"]
    with command_in_its_own_session([sys.executable, "-m", "tfx_hydra", "-m", *args], tmp_path) as sweep:
        deadline = time.monotonic() + 240
        while not (training := [r for r in (mlflow_runs(tmp_path) if (tmp_path / "mlflow.db").exists() else [])
                                if r.data.params.get("trainer.epochs") == "25" and r.info.status == "RUNNING"
                                and r.data.metrics.get("epoch/loss") is not None]):
            assert sweep.poll() is None and time.monotonic() < deadline, "the long job did not start training"
            time.sleep(0.5)
        (victim,) = training
        array = {f.name.split("_")[0] for f in (sweep_dir / ".submitit").iterdir() if f.is_dir() and "_" in f.name}
        (array_id,) = array
        job = f"{array_id}_{victim.data.tags['sweep.job_num']}"
        subprocess.run(["scancel", job], env=cli_env(), check=True, timeout=30)
        out, _ = sweep.communicate(timeout=300)
    assert sweep.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert f"tfx_hydra: 1 job(s) of the sweep were stopped by SIGTERM (Slurm's scancel, a pre-emption or time " \
           f"limit, or a kill): {victim.info.run_name} (MLflow run {victim.info.run_id})" in out, out[-3000:]
    assert "resume the sweep (finished jobs are skipped) with: python -m tfx_hydra -m hydra/launcher=slurm" in out
    assert wait_for_job(on_slurm, job).startswith("CANCELLED")
    (cancelled,) = [r for r in mlflow_runs(tmp_path) if r.info.run_id == victim.info.run_id]
    assert cancelled.info.status == "KILLED"  # nothing left RUNNING
    (parent,) = [r for r in mlflow_runs(tmp_path) if "sweep.dir" in r.data.tags]
    assert (parent.data.tags["sweep.finished"], parent.data.tags["sweep.killed"]) == ("1", "1")  # counted

    again = run_cli_in_process(args, cwd=tmp_path, multirun=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished" in (sweep_dir / "0" / "tfx_hydra.log").read_text()  # the job said it, and skipped
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 3  # the parent and the two jobs' runs: none new
    resumed = next(r for r in runs if r.info.run_id == victim.info.run_id)  # the same run, not a new one
    assert resumed.info.status == "FINISHED"
    parent = next(r for r in runs if r.info.run_id == parent.info.run_id)  # the same parent, counted again
    assert (parent.info.status, parent.data.tags["sweep.finished"], parent.data.tags["sweep.killed"]) == \
        ("FINISHED", "2", "0")
    steps = [m.step for m in mlflow_client(tmp_path).get_metric_history(victim.info.run_id, "epoch/loss")]
    assert sorted(steps) == list(range(25))  # every epoch logged once, across the cancel


@contextmanager
def meanwhile(action: Callable[[], None]) -> Iterator[None]:
    """`action` in a thread of its own while the block runs a command in this one (the test's hand on the
    cluster while the sweep waits for its jobs); an error it raised is raised once the block is done."""
    failed: list[BaseException] = []

    def act() -> None:
        try:
            action()
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread below
            failed.append(err)

    thread = threading.Thread(target=act, name="slurm-hand", daemon=True)
    thread.start()
    yield
    thread.join(timeout=300)
    if failed:
        raise failed[0]


def wait_for_training(launch: Path, count: int, timeout: float = 240) -> list:
    """The `count` runs training by now: RUNNING with an epoch logged (and so backed up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = mlflow_runs(launch) if (launch / "mlflow.db").exists() else []
        training = [r for r in runs if r.info.status == "RUNNING" and "sweep.dir" not in r.data.tags
                    and r.data.metrics.get("epoch/loss") is not None]
        if len(training) >= count:
            return training
        time.sleep(0.5)
    raise AssertionError(f"{count} run(s) were not training after {timeout:.0f} s")


def slurm_job_of(sweep_dir: Path, job_num: str) -> str:
    """The Slurm id of a sweep's job, from submitit's folder of it: an array's id and the job's number in it,
    or a lone job's own id (a batch of one job is no array)."""
    folders = [f.name for f in (sweep_dir / ".submitit").iterdir() if f.is_dir()]
    if len(folders) == 1 and "_" not in folders[0]:
        return folders[0]
    (array,) = {name.split("_")[0] for name in folders if "_" in name}
    return f"{array}_{job_num}"


def let_start_again_now(job: str, timeout: float = 60) -> None:
    """Once Slurm has `job` back in its queue, let it start almost at once, as the cluster's admin may: Slurm
    holds a requeued job about two minutes (its begin time) before it may start again. Not in the same second:
    slurmd refuses a launch whose credential is from the second the job's last one was revoked in ("Killing
    non-startable batch JobId=12: Job credential revoked" in slurmctld.log, 0.1 s after the requeue, in a
    full run of the suite), so the job may start 2 s from now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=cli_env(), capture_output=True,
                               text=True, timeout=30).stdout.strip()
        if state == "PENDING":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"], env=cli_env(), check=True,
                           timeout=30)
            return
        time.sleep(0.2)
    raise AssertionError(f"Slurm job {job} was not back in the queue after {timeout:.0f} s")


def attempts_of(slurm, job: str) -> list[str]:
    """Each time Slurm ran `job`, oldest first: REQUEUED for the ones it took back."""
    return [row["State"] for row in slurm.sacct(attempts=True) if row["JobID"] == job]


def test_a_requeued_or_time_limited_job_resumes_its_own_run_from_its_backup_and_the_sweep_goes_on(on_slurm,
                                                                                                    tmp_path):
    """Two jobs of a grid, each taken back mid-training the two ways Slurm takes a job back. Job 0 is
    requeued (`scontrol requeue`, what a pre-emption with PreemptMode=REQUEUE does: SIGTERM, then the job
    starts again). Job 1 gets the time-limit warning `signal_delay_s` has Slurm send (SIGUSR2, sent here
    with scancel as submitit's own tests send it): its run ends KILLED, then submitit checkpoints and requeues
    it. Each job comes back as the same Slurm job, resumes its MLflow run from its last epoch's backup, logs
    every epoch once and finishes; the sweep, which never stopped waiting, ends with both finished."""
    sweep_dir = tmp_path / "sweep"
    epochs = 20  # ~0.25 s each: both jobs are still training when the test has seen an epoch of each
    args = [*SLURM, f"hydra.sweep.dir={sweep_dir}", "seed=1,2", f"trainer.epochs={epochs}", "data=synthetic",
            "data.num_examples=6000", "data.input_shape=[16,16]", "trainer.steps_per_execution=1", "export=none",
            "export.mlflow_model=false", "trainer.tensorboard=false"]
    victims = {}

    def take_both_back() -> None:
        for run in wait_for_training(tmp_path, 2):
            victims[run.data.tags["sweep.job_num"]] = run
        requeued, warned = slurm_job_of(sweep_dir, "0"), slurm_job_of(sweep_dir, "1")
        subprocess.run(["scontrol", "requeue", requeued], env=cli_env(), check=True, timeout=30)
        subprocess.run(["scancel", "--signal=USR2", warned], env=cli_env(), check=True, timeout=30)
        for job in (requeued, warned):
            let_start_again_now(job)

    with meanwhile(take_both_back):
        done = run_cli_in_process(args, cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "jobs              │ 2 finished, 0 failed, 0 killed" in done.stdout
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 3  # the parent and the two jobs' runs: none new
    client = mlflow_client(tmp_path)
    for num, signal_name in (("0", "SIGTERM"), ("1", "SIGUSR2")):
        run = next(r for r in runs if r.info.run_id == victims[num].info.run_id)  # the same run, taken up again
        assert run.info.status == "FINISHED" and "error" not in run.data.tags
        assert run.data.tags["resume.interrupted_by"] == f"interrupted ({signal_name})"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "epoch/loss")]
        assert sorted(steps) == list(range(epochs))  # every epoch logged once, across the interruption
        log = (sweep_dir / num / "tfx_hydra.log").read_text()  # both attempts of the job write to it
        assert f"resuming MLflow run {run.info.run_id} from its backup" in log
        assert attempts_of(on_slurm, slurm_job_of(sweep_dir, num)) == ["REQUEUED", "COMPLETED"]
    warned = slurm_job_of(sweep_dir, "1")
    submitit_said = "".join(p.read_text() for p in (sweep_dir / ".submitit" / warned).glob("*_log.*"))
    assert "Caught signal SIGUSR2" in submitit_said and f"Requeued job {warned}" in submitit_said  # by submitit


def test_a_search_trial_whose_worker_is_pre_empted_runs_again_when_slurm_restarts_the_worker(on_slurm, tmp_path):
    """A search's one worker job is requeued by Slurm mid-trial (a pre-emption). The worker fails the trial in
    hand and queues its parameters again before it goes; Slurm starts the same job again, and the worker runs
    the queued trial: the study ends with its trials complete, the pre-empted one failed and re-run."""
    args = [*SLURM, *search(2, "hparams_search.workers=1", "hparams_search.pruner=none"), "trainer.epochs=16",
            "data.limit=null", "trainer.batch_size=choice(8)", "trainer.steps_per_execution=1"]  # a trial of seconds
    victims = []

    def pre_empt_the_worker() -> None:
        victims.extend(wait_for_training(tmp_path, 1))
        sweep_dir = Path(next(r for r in mlflow_runs(tmp_path) if "sweep.dir" in r.data.tags).data.tags["sweep.dir"])
        victims.append(slurm_job_of(sweep_dir, "0"))
        subprocess.run(["scontrol", "requeue", victims[-1]], env=cli_env(), check=True, timeout=30)
        let_start_again_now(victims[-1])

    with meanwhile(pre_empt_the_worker):
        done = run_cli_in_process(args, cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run, job = victims
    trial = int(run.data.tags["optuna.trial"])
    study = study_of(tmp_path)
    lost = study.trials[trial]
    assert lost.state == TrialState.FAIL and lost.user_attrs["tfx_hydra.requeued"]
    (retry,) = [t for t in study.trials if t.user_attrs.get("tfx_hydra.retry_of") == trial]
    assert retry.state == TrialState.COMPLETE and retry.params == lost.params
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 2
    killed = next(r for r in mlflow_runs(tmp_path) if r.info.run_id == run.info.run_id)
    assert killed.info.status == "KILLED" and killed.data.tags["error"] == "interrupted (SIGTERM)"
    assert attempts_of(on_slurm, job) == ["REQUEUED", "COMPLETED"]
