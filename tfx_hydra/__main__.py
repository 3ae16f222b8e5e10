"""`python -m tfx_hydra [overrides]` and the `tfx-hydra` console script.

Only Hydra and our light modules are imported here: `--help` and `--cfg job` never
load TensorFlow or MLflow. User mistakes (tfx_hydra.errors) are Hydra
CompactHydraExceptions: `main` prints their message without a traceback and exits 1
(HYDRA_FULL_ERROR=1 still shows every traceback). Hydra's own composition errors (an unknown
option or key) are said the same way, with the closest option as the fix.
"""

import gc
import os
import sys
from typing import Any

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from tfx_hydra.console import held_job_error_line, native_lines_to_log, quiet_libraries
from tfx_hydra.errors import LOST_WORKER_ERRORS  # a lost sweep job: the sweep's own report names it and the resume
from tfx_hydra.process.signals import Interrupted, keep_interrupts_from_finalizers, requeue_if_warned
from tfx_hydra.settings.compose import composition_error


@hydra.main(version_base="1.3", config_path="pkg://tfx_hydra.conf", config_name="config")
def hydra_main(cfg: DictConfig) -> Any:
    """One job, wherever a launcher runs it: run as the job it is (alone, a sweep's, a search's trial or
    worker), returning the sweeper its objective. A Slurm job warned of its time limit or a pre-emption
    ends its run KILLED with its backup, then submitit requeues it: the requeued job resumes that run."""
    from tfx_hydra import sweeps
    from tfx_hydra.run import run

    try:
        return sweeps.run_as_job(cfg, run)
    except Interrupted as interrupt:
        requeue_if_warned(interrupt)
        raise




def main() -> None:
    """The command: Hydra's app, and an interrupt (Ctrl-C, or the SIGTERM Slurm sends at a time
    limit) ended the way shells expect: one line saying what happened and how to resume, and
    the status 128 + the signal's number (130, 143), not a traceback. A sweep worker that died
    is reported by the sweep (its parent run's close) rather than with the launcher's traceback."""
    if sys.argv[1:2] in (["--version"], ["-V"]):  # before Hydra: nothing to compose
        from tfx_hydra import __version__

        print(f"tfx_hydra {__version__}")
        sys.exit(0)
    if sys.argv[1:2] == ["init"]:  # `tfx-hydra init PATH`: a new project, not a run
        from tfx_hydra.new_project import main as init

        sys.exit(init(sys.argv[2:]))
    if sys.argv[1:2] == ["promote"]:  # `tfx-hydra promote RUN_ID --label stable`: a label moved, not a run
        from tfx_hydra.promote import main as promote

        sys.exit(promote(sys.argv[2:]))
    quiet_libraries()
    keep_interrupts_from_finalizers()  # a Ctrl-C landing in a library's cleanup: the line below, not a traceback
    full_errors = os.environ.get("HYDRA_FULL_ERROR") == "1"  # the user asked for every traceback
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra hands errors to us instead of printing them
    if sys.argv[0].endswith("__main__.py"):  # `python -m`: Hydra's help names the command by argv[0]
        sys.argv[0] = "tfx-hydra"
    try:
        with held_job_error_line() as job_error_line:
            hydra_main()
        # the run's tf.data iterators freed here, not at exit: the lines TensorFlow writes as they end (an
        # autotune loop's "Optimization loop failed: CANCELLED", root_dataset.cc) go to the log, not under the summary
        with native_lines_to_log():
            gc.collect()
    except KeyboardInterrupt as interrupt:
        from tfx_hydra.sweeps.parent import close_interrupted  # here: --help and preflight never pay for it

        hint = (getattr(interrupt, "resume_hint", None)
                or close_interrupted(interrupt)  # a sweep launched here: its parent closed, and how to resume it
                or "interrupted (SIGINT) before a run started: nothing to resume.")
        status = getattr(interrupt, "exit_status", 130)
        # the interrupted fit's frames hold its tf.data iterators: freed here, with TensorFlow's lines about
        # a cache read partly (cache_dataset_ops.cc) to the log, not after the line below
        with native_lines_to_log():
            interrupt.__traceback__ = None
            del interrupt
            gc.collect()
        print(f"tfx_hydra: {hint}", file=sys.stderr)
        sys.exit(status)
    except CompactHydraException as err:  # our errors and Hydra's own config errors: the message alone
        if full_errors:
            job_error_line.release()
            raise
        said = composition_error(err, [arg for arg in sys.argv[1:] if "=" in arg and not arg.startswith("-")])
        print(str(said or err), file=sys.stderr)
        if said is None and isinstance(err.__cause__, OmegaConfBaseException):
            print(str(err.__cause__), file=sys.stderr)  # as Hydra prints it: the config error's detail
        sys.exit(1)
    except Exception as err:
        if full_errors or type(err).__name__ not in LOST_WORKER_ERRORS:
            job_error_line.release()
            raise  # a programming error keeps its traceback, and the job it came from
        print(f"tfx_hydra: the sweep's launcher stopped: {type(err).__name__}: {str(err).splitlines()[0][:2000]}",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
