"""`python -m tfx_hydra [overrides]` and the `tfx-hydra` console script.

Only Hydra and our light modules are imported here: `--help` and `--cfg job` never
load TensorFlow or MLflow. User mistakes (tfx_hydra.errors) are Hydra
CompactHydraExceptions, so Hydra prints their message without a traceback and exits 1.
"""

import os

import hydra
from omegaconf import DictConfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's INFO lines drown the run's own output


@hydra.main(version_base="1.3", config_path="pkg://tfx_hydra.conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from tfx_hydra.run import run

    return run(cfg)


if __name__ == "__main__":
    main()
