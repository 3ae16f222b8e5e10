"""sweeps/ray_train.py's pure parts: which jobs Ray Train trains, and how a lost worker is said (the rest runs on a
real Ray cluster in tests/e2e/test_ray.py)."""

from __future__ import annotations

from omegaconf import OmegaConf

from tfx_hydra.sweeps.ray_train import ray_train_workers, what_ended
from tfx_hydra.tracking.system import cluster_identity

# How Ray 2.60's TrainingFailedError says a worker process died (its message, cut to the lines that matter)
RAY_SAYS = """Training failed due to worker errors:
[Rank 1 Error Snippet]:
The actor died unexpectedly before finishing this task.
\tclass_name: RayTrainWorker
\tactor_id: c44a5074038caa6bcca6688301000000
\tpid: 26892
\tnamespace: bb150942-c776-4abf-978c-ff242f3ceead
\tip: 10.0.0.5
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker
unexpectedly exits with a connection error code 2. End of file."""


def test_only_a_multi_worker_job_on_the_ray_cluster_is_trained_by_ray_train():
    def job(**strategy):
        return OmegaConf.create({"strategy": strategy})

    assert ray_train_workers(job(_target_="tfx_hydra.strategy.multi_worker_strategy", cluster="ray", workers=3)) == 3
    assert ray_train_workers(job(_target_="tfx_hydra.strategy.multi_worker_strategy", cluster="slurm")) is None
    assert ray_train_workers(job(_target_="tfx_hydra.strategy.mirrored_strategy")) is None


def test_a_dead_worker_is_said_by_its_pid_and_node_and_another_failure_by_its_last_line():
    assert what_ended(RuntimeError(RAY_SAYS)) == "a Ray Train worker (pid 26892 on 10.0.0.5) died"
    failed = RuntimeError("Training failed due to worker errors:\n[Rank 0 Error Snippet]:\nTraceback (most recent "
                          "call last):\n  File \"x.py\", line 1, in f\nValueError: the data ran out")
    assert what_ended(failed) == "ValueError: the data ran out"


def test_a_cluster_start_is_told_from_another_by_its_workers_addresses(monkeypatch):
    """The chief's cluster_run.json is taken only by workers of the same start: Ray Train's workers listen on new
    ports each time, Slurm's steps have their own ids."""
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}')
    first = cluster_identity()
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["h:3", "h:4"]}, "task": {"type": "worker", "index": 1}}')
    assert first == "h:1,h:2" and cluster_identity() == "h:3,h:4"
    monkeypatch.delenv("TF_CONFIG")
    assert cluster_identity() is None  # one machine
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    assert cluster_identity() == "slurm 41.0"
