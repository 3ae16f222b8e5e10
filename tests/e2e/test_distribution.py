"""Distribution and resume, for real on CPU: MirroredStrategy over 2 logical CPUs, MultiWorkerMirroredStrategy
over 2 local worker processes, and a run killed with SIGKILL that the same command resumes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_env, compose, free_ports, mlflow_client, mlflow_runs, wait_for_backup_of_epoch
from tests.helpers.in_process import run_cli_in_process
from tfx_hydra.run import run

pytestmark = pytest.mark.slow


def test_mirrored_over_two_logical_cpus_logs_two_replicas_and_converges(tmp_path, two_logical_cpus):
    cfg = compose(["strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:1]", "trainer.epochs=6",
                   "trainer.batch_size=64", "trainer.scale_lr_with_replicas=true", "export=none"],
                  launch_dir=tmp_path)
    objective = run(cfg).objective
    (record,) = mlflow_runs(tmp_path)
    tags = record.data.tags
    assert (tags["strategy"], tags["strategy.replicas"]) == ("MirroredStrategy", "2")
    assert (tags["batch.global"], tags["batch.per_replica"]) == ("64", "32")
    assert float(tags["optimizer.learning_rate"]) == pytest.approx(0.002)  # 0.001 x 2 replicas
    assert objective == record.data.metrics["val_accuracy"] > 0.85


def worker_command(extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "tfx_hydra", "strategy=multi_worker", "trainer.epochs=2", "data.limit=600",
            "trainer.batch_size=32", *extra]


def test_two_worker_processes_train_identical_weights_and_only_the_chief_tracks(tmp_path):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    workers = []
    for index in range(2):
        env = cli_env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(subprocess.Popen(worker_command([]), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True))
    outputs = [worker.communicate(timeout=400)[0] for worker in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
        assert "tfx_hydra strategy: multi_worker, 2 replicas" in output
    fingerprints = [re.search(r"weights sha256\s+│ (\w+)", output).group(1) for output in outputs]
    assert fingerprints[0] == fingerprints[1]
    (run,) = mlflow_runs(tmp_path)  # the chief's, and no other
    assert run.info.status == "FINISHED"
    assert run.data.tags["model.weights_sha256"] == fingerprints[0]
    assert run.data.tags["strategy.replicas"] == "2" and run.data.tags["steps_per_execution"] == "1"
    assert run.data.tags["strategy.workers"] == ", ".join(cluster["worker"])  # where each task listened
    assert "not the chief worker" in outputs[1]
    assert len(list(tmp_path.glob("outputs/*/*/export/mlp/1/saved_model.pb"))) == 1  # the chief's export only


RESUME = ["data=synthetic", "data.num_examples=12000", "data.input_shape=[16]", "trainer.epochs=5",
          "trainer.batch_size=32", "trainer.steps_per_execution=1", "export=none"]


def test_a_killed_run_resumes_from_its_last_epoch_in_the_same_mlflow_run(tmp_path):
    command = [sys.executable, "-m", "tfx_hydra", *RESUME]
    first = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    for line in first.stdout:
        if line.startswith("epoch 2/5"):
            break
    # Kill once epoch 2's backup is completely written (its metadata is saved after the weights),
    # i.e. early in epoch 3: a fixed sleep raced the backup write on a loaded machine.
    (output_dir,) = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    wait_for_backup_of_epoch(output_dir / "backup", 2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    # the epochs the backup holds: 2, or 3 on a machine so loaded that epoch 3 ended before the kill
    backed_up = json.loads((output_dir / "backup" / "training_metadata.json").read_text())["epoch"]
    (crashed,) = mlflow_runs(tmp_path)
    assert crashed.info.status == "RUNNING"  # SIGKILL leaves no chance to end it
    backup = Path(crashed.data.tags["resume.backup_dir"])
    assert backup.is_dir()

    second = run_cli_in_process(RESUME, cwd=tmp_path)  # the same command again (in process: no kill this time)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming MLflow run {crashed.info.run_id}" in second.stdout
    shown = [line.split()[1] for line in second.stdout.splitlines() if line.startswith("epoch ")]
    assert shown[0] == f"{backed_up + 1}/5" and shown[-1] == "5/5"  # starts after the last backed-up epoch
    (resumed,) = mlflow_runs(tmp_path)
    assert resumed.info.run_id == crashed.info.run_id and resumed.info.status == "FINISHED"
    history = mlflow_client(tmp_path).get_metric_history(resumed.info.run_id, "epoch/val_accuracy")
    assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]  # five epochs, each once
    assert not backup.exists()  # removed after success

    uninterrupted = run_cli_in_process(RESUME, cwd=tmp_path)
    assert uninterrupted.returncode == 0
    fresh = next(r for r in mlflow_runs(tmp_path) if r.info.run_id != resumed.info.run_id)
    assert abs(fresh.data.metrics["val_accuracy"] - resumed.data.metrics["val_accuracy"]) < 0.03
