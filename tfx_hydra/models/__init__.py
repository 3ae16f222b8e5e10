"""models: Keras model builders, one per option in conf/model/.

    small.py       built from scratch: mlp (the seed's), cnn, resnet_small
    pretrained.py  transfer learning: keras_app (keras.applications), hub (TF Hub handles),
                   and what the fine-tuning phase needs (the backbone, unfreezing it)
    layers.py      HubLayer (a Keras 3 layer around hub.load; hub.KerasLayer is Keras 2 only), Preprocess
    text.py        text_baseline (TextVectorization + embeddings), hub_text (a TF Hub encoder and its
                   preprocessing model, the BERT family): they take raw strings
    heads.py       the task's output layer; a regression's targets put back in their units
    adapt.py       preprocessing layers (a vocabulary) adapted on the training split alone

Builders return an uncompiled `keras.Model`; the run compiles it inside the strategy's
scope. Whatever the precision policy, the last layer computes in float32
(`precision.OUTPUT_DTYPE`): a float16 softmax loses the small probabilities the
cross-entropy needs. Keras is imported inside the builders (validation must not pay for it).
"""

from tfx_hydra.models.pretrained import BACKBONE, hub, keras_app, require_backbone, unfreeze_backbone
from tfx_hydra.models.small import cnn, mlp, resnet_small
from tfx_hydra.models.text import hub_text, text_baseline

__all__ = ["BACKBONE", "cnn", "count_params", "hub", "hub_text", "keras_app", "mlp", "require_backbone",
           "resnet_small", "text_baseline", "unfreeze_backbone"]


def count_params(weights) -> int:
    """How many numbers `weights` (a model's trainable or frozen weights) hold."""
    import numpy as np

    return int(sum(np.prod(w.shape) for w in weights))
