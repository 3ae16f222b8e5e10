"""`python -m tfx_hydra [overrides]` and the `tfx-hydra` console script.

Only Hydra and our light modules are imported here: `--help` and `--cfg job` never
load TensorFlow or MLflow. User mistakes (tfx_hydra.errors) are Hydra
CompactHydraExceptions, so Hydra prints their message without a traceback and exits 1.
"""

import os
import sys

import hydra
from omegaconf import DictConfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's INFO lines drown the run's own output


@hydra.main(version_base="1.3", config_path="pkg://tfx_hydra.conf", config_name="config")
def hydra_main(cfg: DictConfig) -> float:
    from tfx_hydra.run import run

    return run(cfg)


def main() -> None:
    """The command: Hydra's app, and an interrupt (Ctrl-C, or the SIGTERM Slurm sends at a time
    limit) ended the way shells expect: one line saying what happened and how to resume, and
    the status 128 + the signal's number (130, 143), not a traceback."""
    try:
        hydra_main()
    except KeyboardInterrupt as interrupt:
        hint = getattr(interrupt, "resume_hint", None) or "interrupted (SIGINT) before a run started: nothing to resume."
        print(f"tfx_hydra: {hint}", file=sys.stderr)
        sys.exit(getattr(interrupt, "exit_status", 130))


if __name__ == "__main__":
    main()
