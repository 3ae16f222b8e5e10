"""model=keras_app: a keras.applications architecture as the backbone, under a new head (backbone.py)."""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.backbone import BACKBONE, resolve_weights
from tfx_hydra.models.blocks import image_inputs
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.settings.checks import require_range


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
    inputs, x = image_inputs(input_shape, "keras_app", resize_to, channels=3)
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
