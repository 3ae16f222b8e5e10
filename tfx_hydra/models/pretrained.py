"""Transfer learning: a pretrained backbone (keras.applications or TF Hub) under a new head.

Every model here names its backbone layer `backbone`, so the run's fine-tuning phase
(trainer.finetune_epochs) finds it: phase one trains the head with the backbone frozen
(model.freeze_backbone=true), phase two unfreezes it (or its top N layers) at a lower
learning rate. A frozen Keras backbone is called with training=False, so its batch-norm
layers stay in inference mode in both phases, as Keras' transfer-learning guide advises.
"""

from __future__ import annotations

import os

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.validation import require_range

BACKBONE = "backbone"  # the layer name the fine-tuning phase looks for
WEIGHTS_SOURCES = (None, "imagenet")


def keras_app(name, architecture, input_shape, num_classes, weights=None, freeze_backbone=False, resize_to=None,
              preprocess=True, dropout=0.2, head="softmax"):
    """keras.applications.<architecture> (MobileNetV3Small, EfficientNetB0, ResNet50, ...) without
    its top, pooled, under a new head for the task (a softmax over the data's classes by default).
    `weights`: null (random), imagenet (downloaded by Keras to ~/.keras/models) or a weights file of the same
    headless model. Inputs come from the data spec: gray images get 3 channels; `resize_to` resizes in the
    model;
    `preprocess` applies the architecture's own preprocess_input to [0, 1] pixels x 255."""
    import keras

    from tfx_hydra.models.layers import Preprocess, application  # they import Keras: only when a model is built

    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    constructor = application(architecture)
    inputs, x = image_inputs(input_shape, resize_to, channels=3)
    weights = resolve_weights(weights)
    try:
        backbone = constructor(include_top=False, weights=weights, input_shape=tuple(x.shape[1:]), pooling="avg")
    except ValueError as err:  # an input size the architecture cannot take, a weights file that does not fit
        raise ConfigError(f"model.architecture={architecture} cannot be built for inputs {list(x.shape[1:])} "
                          f"with weights={weights}: {str(err).splitlines()[0]}",
                          fix="model.resize_to=[224,224] (most architectures need at least 32x32), or a weights "
                          "file saved from the same architecture with include_top=false") from None
    except Exception as err:  # Keras' download of imagenet weights fails without internet
        raise ConfigError(f"model.weights={weights}: Keras could not load them ({str(err).splitlines()[0]}).",
                          fix="download the weights on a machine with internet and pass the file: "
                          "model.weights=/abs/path/<architecture>_notop.weights.h5, or model.weights=null") from None
    backbone.name = BACKBONE
    backbone.trainable = not freeze_backbone
    if preprocess:
        x = keras.layers.Rescaling(255.0, name="to_pixels")(x)
        x = Preprocess(architecture, name="preprocess")(x)
    x = backbone(x, training=False) if freeze_backbone else backbone(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


def hub(name, handle, input_shape, num_classes, freeze_backbone=True, output_key=None, signature=None,
        resize_to=None, channels=None, dropout=0.2, head="softmax"):
    """A TF Hub model (URL or SavedModel folder) as the backbone, under a new head for the task.
    Image feature-vector models take [0, 1] pixels: the data's `scale` normalization gives those."""
    import keras

    from tfx_hydra.models.layers import HubLayer

    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs, x = (image_inputs(input_shape, resize_to, channels) if resize_to or channels
                 else (lambda i: (i, i))(keras.Input(shape=tuple(input_shape), name="inputs")))
    x = HubLayer(handle, output_key=output_key, signature=signature, trainable=not freeze_backbone, name=BACKBONE)(x)
    if len(x.shape) > 2:  # a feature map or a sequence: pool it to one vector
        x = keras.layers.Reshape((-1, x.shape[-1]), name="to_sequence")(x)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


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


# --- helpers ---------------------------------------------------------------------------------------

def resolve_weights(weights):
    if weights in WEIGHTS_SOURCES:
        return weights
    path = os.path.abspath(os.path.expanduser(str(weights)))
    if not os.path.isfile(path):
        raise ConfigError(f"model.weights={weights} is neither null, imagenet nor an existing file.",
                          fix="model.weights=null (random), imagenet, or /abs/path/model_notop.weights.h5")
    return path


def image_inputs(input_shape, resize_to, channels):
    """keras.Input of the data's shape, and the tensor the backbone gets: resized, with `channels`."""
    import keras

    shape = tuple(input_shape)
    if len(shape) not in (2, 3):
        raise ConfigError(f"this model needs images: data.input_shape={list(shape)} should be [height, width] or "
                          "[height, width, channels].", fix="model=mlp for flat features")
    inputs = keras.Input(shape=shape, name="inputs")
    x = keras.layers.Reshape((*shape, 1), name="add_channel")(inputs) if len(shape) == 2 else inputs
    if channels and x.shape[-1] != channels:
        if x.shape[-1] != 1:
            raise ConfigError(f"the backbone takes {channels} channels; the data has {x.shape[-1]}.",
                              fix="data with 1 or matching channels")
        x = keras.layers.Concatenate(name="gray_to_rgb")([x] * channels)
    if resize_to:
        x = keras.layers.Resizing(*resize_to, name="resize")(x)
    return inputs, x
