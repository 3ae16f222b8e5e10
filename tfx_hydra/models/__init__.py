"""models: Keras model builders, one per option in conf/model/.

One option, one module, named as the option is typed (model=cnn -> cnn.py):
    mlp.py            the seed's MLP            cnn.py           a small conv net
    resnet_small.py   a small ResNet            keras_app.py     a keras.applications backbone, new head
    hub.py            a TF Hub backbone (hub, hub_efficientnet_b0, hub_mobilenet_v3 are its presets)
    text_baseline.py  TextVectorization + embeddings on raw strings
    hub_text.py       a TF Hub text encoder and its preprocessing model (the BERT family)
    keras_hub.py      a keras-hub preset's backbone behind its own preprocessor (text and image classifiers)
What they share:
    blocks.py      image inputs, conv and residual blocks
    backbone.py    what the fine-tuning phase needs (the backbone layer, unfreezing it), weights files
    text.py        raw-string inputs, TensorFlow Text's ops
    layers.py      HubLayer (a Keras 3 layer around hub.load; hub.KerasLayer is Keras 2 only), Preprocess
    heads.py       the task's output layer; a regression's targets put back in their units
    presets.py     keras-hub presets: found on this machine (never downloaded by a run), digested, fetched
    adapt.py       preprocessing layers (a vocabulary) adapted on the training split alone

Builders return an uncompiled `keras.Model`; the run compiles it inside the strategy's
scope. Whatever the precision policy, the last layer computes in float32
(`precision.OUTPUT_DTYPE`): a float16 softmax loses the small probabilities the
cross-entropy needs. Keras is imported inside the builders (validation must not pay for it).
"""

from tfx_hydra.models.backbone import BACKBONE, require_backbone, unfreeze_backbone
from tfx_hydra.models.cnn import cnn
from tfx_hydra.models.hub import hub
from tfx_hydra.models.hub_text import hub_text
from tfx_hydra.models.keras_app import keras_app
from tfx_hydra.models.keras_hub import keras_hub
from tfx_hydra.models.mlp import mlp
from tfx_hydra.models.resnet_small import resnet_small
from tfx_hydra.models.text_baseline import text_baseline

__all__ = ["BACKBONE", "cnn", "count_params", "hub", "hub_text", "keras_app", "keras_hub", "mlp", "require_backbone",
           "resnet_small", "text_baseline", "unfreeze_backbone"]


def count_params(weights) -> int:
    """How many numbers `weights` (a model's trainable or frozen weights) hold."""
    import numpy as np

    return int(sum(np.prod(w.shape) for w in weights))
