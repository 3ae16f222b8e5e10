"""hydra/launcher=ray (conf/hydra/launcher/ray.yaml): every sweep job a Ray task, through Hydra's own Ray launcher
(hydra-ray-launcher; `pip install "tfx_hydra[ray]"`).

Kept from the plugin: each job is Hydra's `run_job` in a Ray worker (the plugin's `_run_job`), with the resources of
`hydra.launcher.ray.remote` (`num_cpus`, `num_gpus`: Ray gives a job its own GPUs through CUDA_VISIBLE_DEVICES, so no
two jobs share one), on the Ray that `ray.init(**hydra.launcher.ray.init)` reaches (`start_ray`): a local Ray started
for the sweep (`address: null`), the cluster this machine has joined (`auto`), a remote one (`ray://host:10001`).
Our callbacks run in each job as under any launcher: the job finds the sweep's parent run in the sweep folder, so the
workers must see that folder and the MLflow store (one machine, a shared filesystem, an MLflow server).

Wrapped where the plugin falls short:
- a job runs in the launching directory (Ray starts its workers elsewhere): relative paths mean what the user typed,
  as with every other launcher (`hydra.job.chdir=false`);
- a job's worker process is its own (`max_calls: 1` unless set): TensorFlow's runtime and memory go with the job, as
  with joblib's processes, rather than the next job inheriting them;
- the jobs see the launching process's PYTHONPATH and TFX_HYDRA_* settings (Ray's `runtime_env`), so the workers of
  a cluster started from another shell import the same code and settings;
- a local Ray started for the sweep is started once, whatever the batches, and stopped when the sweep ends
  (`stop_local_ray`, from our sweep callback; the plugin leaves it to the process's exit);
- Ctrl-C in the launching process cancels the jobs (Ray hands each a Ctrl-C: its run stops at a step, ends KILLED
  with its backup) and waits for them to close their runs, instead of leaving them training on the cluster;
- before any job starts, a cluster with nodes on other machines is checked to reach the store, the study and the
  jobs' paths (ray_reach.py);
- a multi-worker job (strategy=multi_worker strategy.cluster=ray) is trained by Ray Train's workers (ray_train.py);
- every job's lines reach the terminal (Ray folds lines alike from several workers into one), with Ray's prefix
  uncoloured when the output is not a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict

from tfx_hydra.errors import ConfigError
from tfx_hydra.sweeps.ray_reach import require_reachable
from tfx_hydra.sweeps.ray_train import ray_train_workers, train_on_workers

log = logging.getLogger(__name__)

LOCAL_RAY = False  # this process started a local Ray for its sweep (stop_local_ray stops it)
CANCELLED_JOBS_GRACE_S = 120  # how long cancelled jobs get to back up and close their runs KILLED


def run_job_in(launch_dir: str, hydra_context, job_config: DictConfig, task_function, singleton_state) -> Any:
    """The plugin's job (Hydra's `run_job` in the worker), run from the launching directory -- Ray starts its workers
    in its session folder, and the sweep folder, the store and the user's relative paths are the launching
    directory's -- with the run tagged by the Ray node it ran on (`process.ray_node`: nodes can share a host name)."""
    import ray

    from hydra_plugins.hydra_ray_launcher._launcher_util import _run_job
    from tfx_hydra.tracking.lost_runs import RAY_NODE_VARIABLE

    os.chdir(launch_dir)
    os.environ[RAY_NODE_VARIABLE] = ray.get_runtime_context().get_node_id()
    return _run_job(hydra_context, job_config, task_function, singleton_state)


class RayLauncher(Launcher):
    """Hydra's RayLauncher with the wrapping above. Its module is imported only when the sweep launches: Hydra
    imports every launcher class for `--help` too, and Ray may not be installed."""

    def __init__(self, ray: DictConfig) -> None:
        self.ray_cfg, self.config, self.hydra_context, self.task_function = ray, None, None, None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        print_every_line()
        import ray
        from hydra.core.singleton import Singleton
        from hydra.core.utils import configure_log, filter_overrides, setup_globals

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = os.path.abspath(str(self.config.hydra.sweep.dir))
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        global LOCAL_RAY
        LOCAL_RAY = start_ray(self.ray_cfg.init) or LOCAL_RAY
        remote = {"max_calls": 1, **(OmegaConf.to_container(self.ray_cfg.remote, resolve=True) or {})}
        job = ray.remote(**remote)(run_job_in)
        launch_dir, job_configs = str(self.config.hydra.runtime.cwd), []
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(job_config):
                job_config.hydra.job.id = f"ray_job_{number}"  # Ray's own task id is known only on the worker
                job_config.hydra.job.num = number
            job_configs.append(job_config)
        require_reachable(ray, job_configs, launch_dir)
        trained = ray.remote(num_cpus=0, max_retries=0)(train_on_workers)  # it waits for its Ray Train workers
        jobs = []
        for job_config in job_configs:
            state, workers = Singleton.get_state(), ray_train_workers(job_config)
            jobs.append(job.remote(launch_dir, self.hydra_context, job_config, self.task_function, state)
                        if workers is None else
                        trained.remote(run_job_in, launch_dir, sweep_dir, self.hydra_context, job_config,
                                       self.task_function, state, workers, remote))
        return collected(ray, jobs)


def stop_local_ray() -> None:
    """The sweep has ended (Hydra's on_multirun_end): stop the local Ray it started. Not at each `launch`: a search
    launches a batch after batch, and a Ray started again for each costs seconds a batch (and counted against the
    workers' idle time). A sweep that fails or is interrupted leaves it to Ray's own stop at the process's exit."""
    global LOCAL_RAY
    if LOCAL_RAY:
        import ray

        ray.shutdown()
        LOCAL_RAY = False


def print_every_line() -> None:
    """How the driver prints the jobs' lines (read as Ray is imported): each job's own -- Ray folds lines alike from
    several workers into one, and every job's summary has the same borders -- with Ray's prefix uncoloured when the
    output is not a terminal. A value the user set wins."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def start_ray(init: DictConfig) -> bool:
    """`ray.init` with the sweep's settings and the jobs' environment; True when it started a local Ray (no
    address), which the sweep then stops."""
    import ray

    if ray.is_initialized():
        return False
    settings = OmegaConf.to_container(init, resolve=True) or {}
    settings.setdefault("object_store_memory", 78_643_200)  # the plugin's: jobs pass configs, not tensors
    runtime_env = dict(settings.pop("runtime_env", None) or {})
    runtime_env["env_vars"] = {**jobs_environment(), **(runtime_env.get("env_vars") or {})}
    if settings.get("address"):
        settings.pop("object_store_memory")  # a running cluster's own, not the driver's to set
    else:
        run_jobs_unniced()
    try:
        ray.init(runtime_env=runtime_env, **settings)
    except (ConnectionError, RuntimeError) as err:  # Ray's AuthenticationError is a RuntimeError
        raise unreachable(settings.get("address"), err) from None
    return not settings.get("address")


def run_jobs_unniced() -> None:
    """A local Ray runs its jobs at the launching process's priority, as the other launchers do: Ray's default niceness
    of 15 for its workers leaves a job a few per cent of a core beside any busy process of the machine (read by the
    Ray processes ray.init starts). A value the user set wins."""
    os.environ.setdefault("RAY_worker_niceness", "0")


def unreachable(address: str | None, err: Exception) -> ConfigError:
    """Ray's error on connecting, said with the key and the fixes. A cluster that asks for a token and gets none
    looks to the client like one that is not there, hence the token first when this process sends none."""
    sends_token = os.environ.get("RAY_AUTH_MODE") == "token"
    first_line = str(err).splitlines()[0] if str(err) else ""
    return ConfigError(f"hydra.launcher.ray.init.address={address}: Ray could not connect ({type(err).__name__}: "
                       f"{first_line}).",
                       fix=("" if sends_token else "if the cluster asks for its token (one `ray start --head` "
                            "started does), export RAY_AUTH_MODE=token where you launch (the token is read from "
                            "~/.ray/auth_token or RAY_AUTH_TOKEN); otherwise ")
                       + "start the cluster (`ray start --head` on its head node) and give its address (host:6379, "
                       "or ray://host:10001 from outside it), or hydra.launcher.ray.init.address=null for a local "
                       "Ray started for the sweep")


def jobs_environment() -> dict[str, str]:
    """What the jobs need of the launching process's environment: its PYTHONPATH (the user's code) and tfx_hydra's
    own settings."""
    return {name: value for name, value in os.environ.items()
            if name == "PYTHONPATH" or name.startswith("TFX_HYDRA_")}


def collected(ray, jobs: list) -> list:
    """Every job's JobReturn, in order. Ctrl-C here cancels the jobs (each gets Ctrl-C: its run ends KILLED with
    its backup) and waits for them to close their runs before the interrupt goes on."""
    try:
        return [ray.get(job) for job in jobs]
    except KeyboardInterrupt:
        log.warning("Ctrl-C: cancelling the sweep's Ray jobs (each closes its run KILLED with its backup)")
        for job in jobs:
            ray.cancel(job)
        ray.wait(jobs, num_returns=len(jobs), timeout=CANCELLED_JOBS_GRACE_S)
        raise
