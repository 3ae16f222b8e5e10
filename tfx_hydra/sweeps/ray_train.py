"""ray_train: a multi-worker job (`strategy=multi_worker strategy.cluster=ray`) under hydra/launcher=ray, trained by
Ray Train's workers.

The Ray launcher hands such a job to `train_on_workers` rather than running it as one task: a Ray task that holds no
CPU (it only waits) runs Ray Train's TensorflowTrainer with `strategy.workers` workers, each with the CPUs and GPUs of
`hydra.launcher.ray.remote`, each running the job as every Ray job runs (Hydra's run_job from the launching folder,
ray_launcher.run_job_in). Ray Train sets TF_CONFIG on every worker, so MultiWorkerMirroredStrategy finds the others;
worker 0 is the chief: it records the job's MLflow run and exports, the others train and sample their machines into
its run (tracking/system.py). The job's result is the chief's.

A worker that dies (kill -9, the out-of-memory killer, its node lost) ends the job: Ray Train stops the other workers
(`FailureConfig(max_failures=0)`: a group started again by Ray would train the job from its start beside a run that
does not know it) and ends their processes, so the chief's run, left RUNNING, is closed KILLED here with what
happened. Its backup (the last epoch) is kept: the same command resumes the job in the same run. Ctrl-C of the sweep
cancels this task, which stops Ray Train the same way. Ray Train runs each worker's training on a thread of its own,
where no signal arrives: a multi-worker job stops at its last epoch's backup, not at the step in flight.
"""

from __future__ import annotations

import logging
import os
import re
import time
from functools import partial
from typing import Any, Callable

from omegaconf import DictConfig

from tfx_hydra.sweeps.parent import read_parent_record

log = logging.getLogger(__name__)
LOST_NOTE = "lost: a Ray Train worker of this multi-worker job ended ({error}); Ray stopped the others"


class RayTrainWorkerLost(RuntimeError):
    """A multi-worker job's end when one of its Ray Train workers died: the sweep says it as one line, like a lost
    joblib or Slurm worker (errors.LOST_WORKER_ERRORS), not with Hydra's traceback."""


def ray_train_workers(job_config: DictConfig) -> int | None:
    """How many Ray Train workers train this job (strategy=multi_worker with strategy.cluster=ray), else None."""
    from tfx_hydra.strategy.multi_worker import is_multi_worker

    strategy = job_config.get("strategy") or {}
    if is_multi_worker(strategy.get("_target_")) and strategy.get("cluster") == "ray":
        return int(strategy.get("workers", 2))
    return None


def train_on_workers(run_job: Callable, launch_dir: str, sweep_dir: str, hydra_context, job_config: DictConfig,
                     task_function, singleton_state, workers: int, remote: dict[str, Any]) -> Any:
    """The job trained by `workers` Ray Train workers, each asking for `remote`'s CPUs and GPUs and running
    `run_job` (the launcher's job, with the job's arguments): the chief's JobReturn, or a failed one when a worker was
    lost (its run closed KILLED). `sweep_dir` as the launcher resolved it (Hydra's resolvers are not registered in
    this task)."""
    from hydra.core.utils import JobReturn, JobStatus
    from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.tensorflow import TensorflowTrainer

    cpus, gpus = float(remote.get("num_cpus") or 0), float(remote.get("num_gpus") or 0)
    trainer = TensorflowTrainer(
        partial(train_as_a_worker, run_job, launch_dir, hydra_context, job_config, task_function, singleton_state),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0,
                                     resources_per_worker={"CPU": cpus, **({"GPU": gpus} if gpus else {})}),
        run_config=RunConfig(name=f"job_{job_config.hydra.job.num}", storage_path=os.path.join(sweep_dir, ".ray_train"),
                             failure_config=FailureConfig(max_failures=0)))
    num, started_ms = job_config.hydra.job.num, int(time.time() * 1000)
    try:
        return trainer.fit().return_value
    except KeyboardInterrupt:
        close_the_chiefs_run(sweep_dir, num, "interrupted (SIGINT)", started_ms)
        raise
    except TrainingFailedError as err:
        said = what_ended(err)
        closed = close_the_chiefs_run(sweep_dir, num, LOST_NOTE.format(error=said), started_ms)
        record = read_parent_record(sweep_dir) or {}
        lost = RayTrainWorkerLost(
            f"job {num}: {said}; Ray Train stopped its other workers"
            + (f" and its MLflow run {', '.join(closed)} is KILLED with its last epoch's backup kept" if closed else "")
            + f". Resume the sweep (finished jobs are skipped) with: {record.get('resume_command') or 'its command'}")
        return JobReturn(overrides=list(job_config.hydra.overrides.task), cfg=job_config, hydra_cfg=job_config,
                         working_dir=launch_dir, status=JobStatus.FAILED, _return_value=lost)


def train_as_a_worker(run_job: Callable, launch_dir: str, hydra_context, job_config: DictConfig, task_function,
                      singleton_state) -> Any:
    """One Ray Train worker's part: the job, as every Ray job runs. Ray Train also sets TF_USE_LEGACY_KERAS=1 for
    its own tf.keras examples; tfx_hydra trains with Keras 3, so it is taken off before TensorFlow is imported.
    (Every argument is bound: Ray Train hands a train function that takes one more its `train_loop_config`.)"""
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
    return run_job(launch_dir, hydra_context, job_config, task_function, singleton_state)


def close_the_chiefs_run(sweep_dir: str, num: int, note: str, since_ms: int) -> list[str]:
    """Job `num`'s run, left RUNNING by a chief that Ray ended, or ended FAILED since `since_ms` by a chief whose
    collectives broke when its peer died (it can see that before Ray ends it): KILLED with `note`, its backup kept, so
    the same command resumes it. Its id, if any was closed (with tracking=none there is none)."""
    from tfx_hydra import tracking
    from tfx_hydra.sweeps.parent import JOB_NUM_TAG, children

    record = read_parent_record(sweep_dir)
    if record is None:
        return []
    client = tracking.client_for(record["uri"])
    runs = [run for run in children(client, record["run_id"], tags={JOB_NUM_TAG: str(num)})
            if run.info.status == "RUNNING" or (run.info.status == "FAILED" and (run.info.end_time or 0) >= since_ms)]
    for run in runs:
        failed = run.data.tags.get("error") if run.info.status == "FAILED" else None
        tracking.close_lost_run(client, run, note + (f" (the chief then failed: {failed[:300]})" if failed else ""))
    return [run.info.run_id for run in runs]


def what_ended(err: BaseException) -> str:
    """Ray Train's error said short: 'a Ray Train worker (pid 26892 on 10.0.0.5) died' for a worker process that
    ended, else the error's last line that says something (its message holds a traceback per worker)."""
    text = str(err)
    pid, ip = re.search(r"\bpid: (\d+)", text), re.search(r"\bip: ([\w.:-]+)", text)
    if "worker process has died" in text or "actor died" in text.lower():
        return f"a Ray Train worker{f' (pid {pid[1]} on {ip[1]})' if pid and ip else ''} died"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Traceback", "File ", "[Rank", "Training failed"))]
    return (useful or lines or [type(err).__name__])[-1][:300]

