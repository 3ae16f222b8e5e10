"""Preprocessing layers that learn from the data (TextVectorization's vocabulary, Normalization's mean
and variance) are adapted on the training split alone, before training, for ours and the user's models:
the validation and test splits stay unseen, and the learned state is part of the model (and of every
export)."""

from __future__ import annotations


def adapt_to_training_split(model, datasets) -> list[str]:
    """Adapt each layer of `model` that learns from data and has not learned yet (a vocabulary with only
    its padding and out-of-vocabulary tokens, a Normalization given no mean) on the training split's
    inputs; returns the adapted layers' names."""
    import keras

    adapted = []
    for layer in model._flatten_layers(include_self=False):
        if not_adapted(layer, keras):
            layer.adapt(datasets.train.map(lambda inputs, *labels_and_weights: inputs))
            adapted.append(layer.name)
    return adapted


def not_adapted(layer, keras) -> bool:
    if isinstance(layer, keras.layers.TextVectorization):
        return layer.vocabulary_size() <= 2  # "" and [UNK] only
    if isinstance(layer, (keras.layers.StringLookup, keras.layers.IntegerLookup)):
        return layer.vocabulary_size() <= layer.num_oov_indices + (1 if layer.mask_token is not None else 0)
    if isinstance(layer, keras.layers.Normalization):
        return layer.input_mean is None
    return False
