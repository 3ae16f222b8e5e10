"""hydra/launcher=ray through the real CLI and the how-to's command, on a real two-node Ray cluster this module
starts on this machine (a head of 2 CPUs and a node of 1 joined to it: tests/helpers/ray_cluster.py), and on a local
Ray a sweep starts for itself: one MLflow parent per sweep, every job a child run that ran as a Ray task, on the
cluster's nodes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.helpers import mlflow_client, mlflow_runs, sweep_parent_and_children
from tests.helpers.ray_cluster import RAY, node_ids, ray_cluster, ray_env
from tests.helpers.search import (
    FAST_HEARTBEAT,
    SPACE,
    TINY,
    assert_pruned_trials_look_pruned,
    parent_and_children,
    study_of,
    trial_has_run,
    wait_for_running_trial,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_ray")]  # one cluster, its tests one after another

HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "ray.md"
TUTORIAL = Path(__file__).parents[2] / "docs" / "tutorials" / "ray.md"
PROCESS, RETRY_OF = "tfx_hydra.process", "tfx_hydra.retry_of"  # a trial's user attributes
FAST = ["trainer.epochs=1", "data.limit=200", "export=none", "export.mlflow_model=false", "trainer.tensorboard=false"]


@pytest.fixture(scope="module")  # stopped once this file's tests are done, not left idle for the whole suite
def cluster():
    """The tutorial's two-node cluster, started by its own `ray start` lines."""
    head, node = [line for line in page_lines(TUTORIAL) if line.startswith("ray start")]
    assert "--head --port=6379" in head and "--address=127.0.0.1:6379" in node
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as folder:  # short: Ray's sockets live under it
        yield from ray_cluster(Path(folder), head, node)


def page_lines(page: Path) -> list[str]:
    """The lines of a page's bash blocks, comments off."""
    return [line.split("  #")[0].strip() for block in page.read_text().split("```bash")[1:]
            for line in block.split("```", 1)[0].splitlines()]


def sweep(launch: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m tfx_hydra -m ARGS` in its own process (a Ray driver keeps its connection for the process's life)."""
    return subprocess.run([sys.executable, "-m", "tfx_hydra", "-m", *args], cwd=launch, env=ray_env(),
                          capture_output=True, text=True, timeout=600)


def page_command(holding: str, page: Path = None) -> list[str]:
    """The how-to's (or `page`'s) `python -m tfx_hydra -m` command that holds `holding`: its arguments."""
    (command,) = [line for line in page_lines(page or HOW_TO) if line.startswith("python -m tfx_hydra -m")
                  and holding in line]
    return shlex.split(command)[4:]


def test_the_pages_sweep_on_a_two_node_ray_cluster_is_one_parent_with_a_child_per_job_run_on_its_nodes(
        tmp_path, cluster):
    """The how-to's cluster command (its address this cluster's, cut to one epoch on 200 examples), launched with
    RAY_AUTH_MODE=token as the page says."""
    assert "export RAY_AUTH_MODE=token" in HOW_TO.read_text() and ray_env()["RAY_AUTH_MODE"] == "token"
    args = [a.replace("HEAD:6379", cluster.address) for a in page_command("address=HEAD:6379 model=mlp,cnn")]
    tutorials = [a.replace("127.0.0.1:6379", cluster.address) for a in page_command("model=mlp,cnn", TUTORIAL)]
    assert tutorials == args  # the tutorial's grid sweep is the how-to's, on its local cluster
    done = sweep(tmp_path, *args, *FAST)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parent, children = sweep_parent_and_children(tmp_path)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.launcher"].endswith("RayLauncher")
    assert parent.data.tags["sweep.jobs"] == "4" and parent.data.tags["sweep.failed"] == "0"
    assert sorted((c.data.params["model.name"], c.data.params["optimizer.learning_rate"]) for c in children) == [
        ("cnn", "0.0003"), ("cnn", "0.001"), ("mlp", "0.0003"), ("mlp", "0.001")]
    assert {c.info.status for c in children} == {"FINISHED"}
    # each a Ray task: 4 jobs of 1 CPU on 2 + 1 CPUs, so both nodes ran some
    assert {c.data.tags["process.ray_node"] for c in children} == set(cluster.node_ids)
    assert len({c.data.tags["process.pid"] for c in children}) == 4  # a worker process per job (max_calls: 1)
    for child in children:  # its outputs in the sweep folder, as under every launcher
        assert Path(child.data.tags["outputs.dir"]).parent == Path(parent.data.tags["sweep.dir"])
    assert "tfx_hydra: sweep complete" in done.stdout and "\x1b[" not in done.stdout  # Ray's prefixes uncoloured

    # a Ray job reproduced from another folder, as the tutorial says: the same job, run here as a plain run into the
    # same store
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = next(c for c in children if c.data.params["model.name"] == "mlp")
    (reproduce,) = [line for line in page_lines(TUTORIAL) if line.startswith("tfx-hydra-reproduce")]
    command = [str(Path(sys.executable).parent / "tfx-hydra-reproduce"),
               *shlex.split(reproduce.replace("<a child run's id>", source.info.run_id))[1:]]
    again = subprocess.run([*command, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"], cwd=elsewhere,
                           env=ray_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    (copy,) = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("reproduced_from") == source.info.run_id]
    assert copy.info.status == "FINISHED" and "process.ray_node" not in copy.data.tags  # run here, not on Ray
    for key in ("model.name", "optimizer.learning_rate", "data.limit", "trainer.epochs"):
        assert copy.data.params[key] == source.data.params[key], key


# A user's callback that writes down the priority its job trains at.
NICENESS = """
import os
import keras

class Niceness(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        with open("niceness.txt", "w") as file:
            file.write(str(os.nice(0)))
"""


def test_a_sweep_without_an_address_starts_a_local_ray_and_stops_it(tmp_path, cluster):
    """The default: a Ray of its own for the sweep, gone when the sweep ends (the tests' cluster is untouched), its
    job at the launching process's priority (not Ray's niceness of 15 for its workers)."""
    (tmp_path / "niceness.py").write_text(NICENESS)
    env = {name: value for name, value in ray_env().items() if name != "RAY_worker_niceness"}  # Ray's own default
    done = subprocess.run([sys.executable, "-m", "tfx_hydra", "-m", "hydra/launcher=ray",
                           "hydra.launcher.ray.init.num_cpus=1", "optimizer.learning_rate=1e-3",
                           "trainer.callbacks=[{_target_: niceness.Niceness}]", *FAST], cwd=tmp_path,
                          env=env | {"PYTHONPATH": f"{tmp_path}:{env['PYTHONPATH']}"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parent, (child,) = sweep_parent_and_children(tmp_path)
    assert parent.info.status == child.info.status == "FINISHED"
    assert (tmp_path / "niceness.txt").read_text() == str(os.nice(0))  # the job ran in the launching folder too
    assert child.data.tags["process.ray_node"] not in cluster.node_ids
    status = subprocess.run([str(RAY), "status", "--address", cluster.address], env=ray_env(), capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0, status.stderr[-2000:]
    assert status.stdout.count("node_") == 2  # still the tests' two nodes, and nothing more


@pytest.mark.fresh_store
def test_the_ray_launcher_without_ray_installed_is_one_message_before_any_run(tmp_path, monkeypatch):
    """Preflight (no Ray import): the command says what to install, and no store or parent run is made."""
    from tests.helpers.in_process import run_cli_in_process
    from tfx_hydra.sweeps import launch

    monkeypatch.setattr(launch, "ray_launcher_installed", lambda: False)  # fault injection: Ray is installed here
    done = run_cli_in_process(["hydra/launcher=ray", "optimizer.learning_rate=1e-3,3e-4", *FAST], cwd=tmp_path,
                              multirun=True)
    assert done.returncode != 0
    assert 'pip install "tfx_hydra[ray]"' in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_a_cluster_asking_for_its_token_is_one_message_with_the_fix(tmp_path, cluster):
    """The how-to's command without RAY_AUTH_MODE=token: Ray's client sends no token, the cluster refuses it, and
    the sweep says so with the key and the fix -- no job started, no traceback."""
    args = [a.replace("HEAD:6379", cluster.address) for a in page_command("address=HEAD:6379 model=mlp,cnn")]
    env = {k: v for k, v in ray_env().items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-m", "tfx_hydra", "-m", *args, *FAST], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert f"ConfigError: hydra.launcher.ray.init.address={cluster.address}: Ray could not connect" in done.stderr
    assert "export RAY_AUTH_MODE=token" in done.stderr and "Traceback" not in done.stderr
    (parent,) = mlflow_runs(tmp_path)  # the sweep's parent, closed: no job ran
    assert parent.info.status == "FAILED" and parent.data.tags["sweep.jobs"] == "0"


# A user's callback (outside the package, imported by the Ray workers from the launching PYTHONPATH): epochs of a
# second at least, so a job started a few seconds after the other is still training when the Ctrl-C comes.
PACED = """
import time
import keras

class Paced(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(max(0.0, 1.0 - (time.monotonic() - self.began)))
"""


def test_ctrl_c_of_a_sweep_cancels_its_ray_jobs_each_killed_with_its_backup_and_its_line_resumes_them(
        tmp_path, cluster):
    """Ctrl-C in the launching process once both jobs train: Ray hands each job the interrupt, each run ends KILLED
    with its backup (not left training on the cluster), and the command the sweep prints resumes both runs to their
    last epoch."""
    (tmp_path / "paced.py").write_text(PACED)  # the user's callback: on PYTHONPATH here, handed to the Ray workers
    env = ray_env() | {"PYTHONPATH": f"{tmp_path}:{ray_env()['PYTHONPATH']}"}
    args = ["hydra/launcher=ray", f"hydra.launcher.ray.init.address={cluster.address}", "trainer.epochs=10",
            "optimizer.learning_rate=1e-3,3e-4", "trainer.callbacks=[{_target_: paced.Paced}]", *FAST[1:]]
    process = subprocess.Popen([sys.executable, "-m", "tfx_hydra", "-m", *args], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    training = set()
    for line in process.stdout:
        training |= set(re.findall(r"\[job (\d)\] epoch 2/10", line))
        if len(training) == 2:
            process.send_signal(signal.SIGINT)
            break
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "cancelling the sweep's Ray jobs" in out + err
    parent, children = sweep_parent_and_children(tmp_path)
    assert parent.info.status == "KILLED" and [c.info.status for c in children] == ["KILLED", "KILLED"]
    line = err.strip().splitlines()[-1]
    assert line.startswith("tfx_hydra: interrupted (SIGINT): the sweep stopped with 0 of 2 job(s) finished")
    resume = shlex.split(line.split("Resume it (finished jobs are skipped) with: ", 1)[1])
    assert resume[:4] == ["python", "-m", "tfx_hydra", "-m"]
    again = subprocess.run([sys.executable, *resume[1:]], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed_parent, resumed = sweep_parent_and_children(tmp_path)
    assert resumed_parent.info.run_id == parent.info.run_id and resumed_parent.info.status == "FINISHED"
    assert [r.info.run_id for r in resumed] == [c.info.run_id for c in children]  # the same runs, resumed
    assert [r.info.status for r in resumed] == ["FINISHED", "FINISHED"]
    for run in resumed:  # every epoch logged once: the interrupted ones, then the rest
        steps = [m.step for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/loss")]
        assert sorted(steps) == list(range(10))


MULTI_WORKER = ["data.limit=600", "trainer.batch_size=32", "trainer.steps_per_execution=1", *FAST[2:]]
WORKER_LINE = re.compile(r"^\(RayTrainWorker pid=(\d+)\) \[job 0\] (.*)$")


def worker_lines(out: str) -> dict[str, str]:
    """Each Ray Train worker's lines of the driver's output, by its pid (Ray prefixes each line with it)."""
    lines: dict[str, list[str]] = {}
    for line in out.splitlines():
        match = WORKER_LINE.match(line)
        if match:
            lines.setdefault(match[1], []).append(match[2])
    return {pid: "\n".join(said) for pid, said in lines.items()}


def test_the_pages_multi_worker_job_on_two_ray_train_workers_survives_a_killed_worker_and_ctrl_c(tmp_path, cluster):
    """The how-to's (and the tutorial's) multi-worker command on the cluster, its epochs paced: one job, two Ray Train
    workers (Ray sets TF_CONFIG), each a worker of one MultiWorkerMirroredStrategy. Worker 1's process killed with -9
    in epoch 3: Ray Train stops the chief, the run ends KILLED with its backup, the sweep says so in one line with the
    command that resumes; that command, stopped by Ctrl-C once training again, ends the run KILLED again; run once
    more it finishes the same run, every epoch logged once. Both workers end with the same weights; the chief alone
    records a run (a child of the sweep's parent), the other samples its machine into it."""
    page = [a.replace("HEAD:6379", cluster.address) for a in page_command("strategy.cluster=ray")]
    tutorials = [a.replace("127.0.0.1:6379", cluster.address) for a in page_command("strategy.cluster=ray", TUTORIAL)]
    assert tutorials == page and "strategy.workers=2" in page
    (tmp_path / "paced.py").write_text(PACED)
    env = ray_env() | {"PYTHONPATH": f"{tmp_path}:{ray_env()['PYTHONPATH']}"}
    args = [*page, "trainer.epochs=8", "trainer.callbacks=[{_target_: paced.Paced}]", *MULTI_WORKER]

    def launched(command: list[str], stop_at: str, stop) -> tuple[int, str]:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        out = []
        try:
            for line in process.stdout:
                out.append(line)
                if stop_at in line:
                    stop(process, "".join(out))
                    break
            out.append(process.communicate(timeout=300)[0])
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        return process.returncode, "".join(out)

    def kill_the_other_worker(process, out):
        (other,) = [pid for pid, said in worker_lines(out).items() if "not tracked" in said]
        os.kill(int(other), signal.SIGKILL)

    status, out = launched([sys.executable, "-m", "tfx_hydra", "-m", *args], "[job 0] epoch 2/8", kill_the_other_worker)
    assert status == 1, out[-3000:]
    (lost,) = [line for line in out.splitlines() if "RayTrainWorkerLost" in line]
    assert re.search(r"job 0: a Ray Train worker \(pid \d+ on [\d.]+\) died", lost) and "Traceback" not in out
    parent, (run,) = sweep_parent_and_children(tmp_path)
    assert run.info.status == "KILLED" and "lost: a Ray Train worker" in run.data.tags["error"]
    assert os.path.isdir(run.data.tags["resume.backup_dir"])  # kept for the resume
    resume = shlex.split(lost.split("Resume the sweep (finished jobs are skipped) with: ", 1)[1])
    assert resume[:4] == ["python", "-m", "tfx_hydra", "-m"]

    status, out = launched([sys.executable, *resume[1:]], "[job 0] epoch 5/8",
                           lambda process, out: process.send_signal(signal.SIGINT))
    assert status == 128 + signal.SIGINT, out[-3000:]
    assert "resuming MLflow run " + run.info.run_id in out
    (closing,) = [line for line in out.splitlines() if line.startswith("tfx_hydra: interrupted (SIGINT)")]
    assert sorted(shlex.split(closing.split("with: ", 1)[1])) == sorted(resume)  # the same sweep, the same folder
    _, (stopped,) = sweep_parent_and_children(tmp_path)
    assert stopped.info.run_id == run.info.run_id and stopped.info.status == "KILLED"

    again = subprocess.run([sys.executable, *resume[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed_parent, (resumed,) = sweep_parent_and_children(tmp_path)
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert resumed_parent.info.run_id == parent.info.run_id and resumed_parent.info.status == "FINISHED"
    steps = [m.step for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/loss")]
    assert sorted(steps) == list(range(8))  # every epoch once: before the kill, before the Ctrl-C, after
    assert not os.path.isdir(run.data.tags["resume.backup_dir"])  # FINISHED: its weights are in its artifacts
    assert len(mlflow_runs(tmp_path)) == 2  # the parent and the chief's run: none of worker 1
    assert resumed.data.tags["strategy"] == "CollectiveAllReduceStrategy"
    assert len(resumed.data.tags["strategy.workers"].split(", ")) == 2  # where each worker listened (Ray's TF_CONFIG)
    workers = worker_lines(again.stdout)
    assert len(workers) == 2, again.stdout[-3000:]
    for said in workers.values():
        assert "strategy: multi_worker, 2 replicas" in said and "epoch 8/8" in said, said[-3000:]
    fingerprints = {re.search(r"weights sha256\s+│ (\w+)", said)[1] for said in workers.values()}
    assert fingerprints == {resumed.data.tags["model.weights_sha256"]}  # one model, trained by both
    chief = workers[resumed.data.tags["process.pid"]]
    (other,) = [said for pid, said in workers.items() if pid != resumed.data.tags["process.pid"]]
    assert f"MLflow run {run.info.run_id}" in chief and "not tracked" in other
    for worker in ("worker_0", "worker_1"):  # every machine that trained, in the one run
        assert f"system/{worker}/cpu_utilization_percentage" in resumed.data.metrics, sorted(resumed.data.metrics)


def test_a_search_with_two_ray_workers_prunes_reruns_a_killed_workers_trial_and_resumes_after_ctrl_c(
        tmp_path, cluster):
    """The tutorial's search (its two workers Ray tasks on the cluster, trials pruned by epoch) with a study of 10
    tiny trials: one worker's process killed with -9 mid-trial -- Ray runs its task again, and the lost trial (its
    heartbeat stale) runs again -- then Ctrl-C of the driver: both workers stop, their runs KILLED and their trials
    queued; the command the driver prints resumes the study to its n_trials, under the same parent."""
    page = [a.replace("127.0.0.1:6379", cluster.address) for a in page_command("hparams_search", TUTORIAL)]
    assert "hparams_search.workers=2" in page and "hydra/launcher=ray" in page
    budget = ["hparams_search.n_trials=10", *TINY, *SPACE, *FAST_HEARTBEAT]  # tiny trials, a heartbeat a second
    args = [a for a in page if a.split("=")[0] not in {b.split("=")[0] for b in budget}] + budget
    process = subprocess.Popen([sys.executable, "-m", "tfx_hydra", "-m", *args], cwd=tmp_path, env=ray_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        victim = wait_for_running_trial(tmp_path, number=1, process=process, with_run=True)
        host, pid = victim.user_attrs[PROCESS].rsplit(":", 1)
        assert int(pid) != process.pid  # a Ray worker's process, not the driver
        os.kill(int(pid), signal.SIGKILL)
        retry = wait_for_retry(tmp_path, victim.number, process)
        process.send_signal(signal.SIGINT)  # Ctrl-C of the driver alone: Ray's workers are not in its group
        out, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 128 + signal.SIGINT, out[-3000:]
    stopped = study_of(tmp_path).trials
    assert not [t for t in stopped if t.state == TrialState.RUNNING], out[-3000:]
    interrupted = [t for t in stopped if t.state == TrialState.FAIL and t.number != victim.number]
    assert interrupted and "Traceback" not in out
    (closing,) = [line for line in out.splitlines() if line.startswith("tfx_hydra: interrupted (SIGINT)")]
    resume = shlex.split(closing.split("Resume it (finished jobs are skipped) with: ", 1)[1])
    assert resume[:4] == ["python", "-m", "tfx_hydra", "-m"] and "hydra/launcher=ray" in resume

    again = subprocess.run([sys.executable, *resume[1:]], cwd=tmp_path, env=ray_env(), capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    study = study_of(tmp_path)
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 10 and not [t for t in study.trials if t.state in (TrialState.RUNNING,
                                                                                TrialState.WAITING)]
    assert retry.params == victim.params  # the killed worker's trial, run again
    for trial in interrupted:  # each interrupted trial's parameters, run again by the resuming command
        assert any(t.user_attrs.get(RETRY_OF) == trial.number and t in finished for t in study.trials)
    client, parent, children = parent_and_children(tmp_path)  # one parent for both commands
    assert parent.info.status == "FINISHED"
    ran = {c.data.tags["optuna.trial"] for c in children}  # a trial asked as the Ctrl-C came has no run of its own
    assert {str(t.number) for t in finished} <= ran <= {str(t.number) for t in study.trials}
    assert len(children) == len(ran)  # one run per trial
    assert {c.info.status for c in children if c.data.tags["optuna.trial"] == str(victim.number)} == {"KILLED"}
    assert_pruned_trials_look_pruned(study, client, children) >= 1
    assert {c.data.tags["process.ray_node"] for c in children} <= set(cluster.node_ids)


def wait_for_retry(launch: Path, number: int, process: subprocess.Popen, timeout: float = 240):
    """The trial that runs trial `number`'s parameters again, once its run has started."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.stdout.read()[-3000:]
        for trial in study_of(launch).get_trials(deepcopy=False):
            if trial.user_attrs.get(RETRY_OF) == number and trial.state == TrialState.RUNNING \
                    and trial_has_run(launch, trial.number):
                return trial
        time.sleep(0.3)
    raise AssertionError(f"trial {number} was never run again")


def test_a_node_on_another_machine_without_the_store_or_the_data_is_one_message_before_any_job(tmp_path, cluster):
    """A third node joins at 127.0.0.2 -- an address none of this machine's interfaces has: to Ray and to the
    launcher, another machine -- in a mount namespace of its own where the data's folder is an empty tmpfs, as a
    machine without the shared filesystem sees it. The sweep with the default SQLite store and that data is refused
    before any job starts, naming the store, the data file the node lacks and the fixes; the launching folder,
    which the node sees, is not named."""
    private = tmp_path / "private"
    private.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here (util-linux)")
    allowed = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs {private}"],
                             capture_output=True, text=True)
    if allowed.returncode:  # a container without CAP_SYS_ADMIN: no mount namespace to play the other machine
        pytest.skip(f"unshare --mount cannot mount a tmpfs here: {allowed.stderr.strip()[:200]}")
    table = private / "rows.csv"
    table.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    join = (f"mount -t tmpfs tmpfs {private} && exec {RAY} start --block --address {cluster.address} "
            f"--node-ip-address 127.0.0.2 --num-cpus 1 --num-gpus 0 --disable-usage-stats")
    node = subprocess.Popen(["unshare", "--mount", "sh", "-c", join], env=ray_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_nodes(cluster, 3, node)
        done = sweep(tmp_path, "hydra/launcher=ray", f"hydra.launcher.ray.init.address={cluster.address}",
                     "data=csv", f"data.path={table}", "optimizer.learning_rate=1e-3,3e-4", *FAST)
    finally:
        node.terminate()  # `ray start --block` stops its node's processes
        node.wait(timeout=120)
    wait_for_nodes(cluster, 2)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = done.stderr
    assert "hydra/launcher=ray: the cluster has nodes on other machines (127.0.0.2)" in said, said[-3000:]
    assert f"tracking.uri: the MLflow store sqlite:///{tmp_path / 'mlflow.db'} is a file on this machine" in said
    assert f"{table} is not on the node at 127.0.0.2" in said and f"{tmp_path} is not on" not in said
    assert "tracking.uri=http://" in said and "a filesystem every node mounts" in said  # the fixes
    (parent,) = mlflow_runs(tmp_path)  # the sweep's parent, closed: no job ran
    assert parent.info.status == "FAILED" and parent.data.tags["sweep.jobs"] == "0"


def wait_for_nodes(cluster, count: int, process: subprocess.Popen | None = None, timeout: float = 120) -> None:
    """The cluster's live nodes are `count`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process is None or process.poll() is None, process.stderr.read()[-3000:]
        if len(node_ids(cluster.address, ray_env())) == count:
            return
        time.sleep(1)
    raise AssertionError(f"the cluster never had {count} live nodes")
