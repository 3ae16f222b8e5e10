"""tfx_hydra: declarative, Hydra-configured TensorFlow experiments tracked in MLflow.

Importing the package is cheap on purpose: TensorFlow and MLflow are imported by the
functions that need them, so `--help`, `--cfg job` and config validation stay fast.
"""

__version__ = "0.2.0"  # the one place: pyproject.toml reads it, `tfx-hydra --version` prints it, runs tag it
