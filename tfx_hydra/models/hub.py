"""model=hub (and its presets hub_efficientnet_b0, hub_mobilenet_v3): a TF Hub model as the backbone, under
a new head (backbone.py)."""

from __future__ import annotations

from tfx_hydra.models.backbone import BACKBONE
from tfx_hydra.models.blocks import image_inputs
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.settings.checks import require_range


def hub(name, handle, input_shape, num_classes, freeze_backbone=True, output_key=None, signature=None,
        resize_to=None, channels=None, dropout=0.2, head="softmax"):
    """A TF Hub model (URL or SavedModel folder) as the backbone, under a new head for the task.
    Image feature-vector models take [0, 1] pixels: the data's `scale` normalization gives those."""
    import keras

    from tfx_hydra.models.layers import HubLayer

    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs, x = (image_inputs(input_shape, "hub", resize_to, channels) if resize_to or channels
                 else (lambda i: (i, i))(keras.Input(shape=tuple(input_shape), name="inputs")))
    x = HubLayer(handle, output_key=output_key, signature=signature, trainable=not freeze_backbone, name=BACKBONE)(x)
    if len(x.shape) > 2:  # a feature map or a sequence: pool it to one vector
        x = keras.layers.Reshape((-1, x.shape[-1]), name="to_sequence")(x)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)
