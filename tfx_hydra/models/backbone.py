"""backbone: what transfer learning shares (model=keras_app, model=hub, model=hub_text): a pretrained
backbone under a new head.

Every such model names its backbone layer `backbone`, so the run's fine-tuning phase
(trainer.finetune_epochs) finds it: phase one trains the head with the backbone frozen
(model.freeze_backbone=true), phase two unfreezes it (or its top N layers) at a lower
learning rate. A frozen Keras backbone is called with training=False, so its batch-norm
layers stay in inference mode in both phases, as Keras' transfer-learning guide advises.
"""

from __future__ import annotations

import os

from tfx_hydra.errors import ConfigError

BACKBONE = "backbone"  # the layer name the fine-tuning phase looks for
WEIGHTS_SOURCES = (None, "imagenet")


def require_backbone(model):
    """The model's pretrained backbone layer, or the error that says which models have one."""
    try:
        return model.get_layer(BACKBONE)
    except ValueError:
        raise ConfigError(f"trainer.finetune_epochs needs a model with a pretrained backbone; {model.name} has none.",
                          fix="model=keras_app or model=hub (or trainer.finetune_epochs=0)") from None


def unfreeze_backbone(model, top_layers: int | None = None) -> int:
    """Make the backbone trainable again (only its last `top_layers` layers, when given);
    returns how many weights are now trainable."""
    backbone = require_backbone(model)
    backbone.trainable = True
    layers = getattr(backbone, "layers", None)
    if top_layers is not None and not layers:
        raise ConfigError(f"trainer.finetune_layers={top_layers}: the {type(backbone).__name__} backbone is one "
                          "layer; it unfreezes whole.", fix="trainer.finetune_layers=null")
    for index, layer in enumerate(layers or []):  # each layer: Keras does not pass trainable=True down twice
        layer.trainable = top_layers is None or index >= len(layers) - top_layers
    return len(model.trainable_weights)


def resolve_weights(weights):
    if weights in WEIGHTS_SOURCES:
        return weights
    path = os.path.abspath(os.path.expanduser(str(weights)))
    if not os.path.isfile(path):
        raise ConfigError(f"model.weights={weights} is neither null, imagenet nor an existing file.",
                          fix="model.weights=null (random), imagenet, or /abs/path/model_notop.weights.h5")
    return path
