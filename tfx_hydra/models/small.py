"""Moved in 0.2.0: each model of conf/model/ has its own module (mlp.py, cnn.py, resnet_small.py). These
names stay importable from here until 0.3.0."""

from tfx_hydra.models.cnn import cnn
from tfx_hydra.models.mlp import mlp
from tfx_hydra.models.resnet_small import resnet_small

__all__ = ["cnn", "mlp", "resnet_small"]
