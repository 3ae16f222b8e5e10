"""Moved in 0.2.0: model=keras_app and model=hub have their own modules (keras_app.py, hub.py) and what
they share is backbone.py. These names stay importable from here until 0.3.0."""

from tfx_hydra.models.backbone import BACKBONE, require_backbone, unfreeze_backbone
from tfx_hydra.models.hub import hub
from tfx_hydra.models.keras_app import keras_app

__all__ = ["BACKBONE", "hub", "keras_app", "require_backbone", "unfreeze_backbone"]
