"""model=hub_text: a TF Hub text encoder with its preprocessing model (the BERT family): the preprocessing
model turns strings into input_word_ids / input_mask / input_type_ids, the encoder's pooled_output feeds the
head; frozen first, fine-tuned in trainer.finetune_epochs (backbone.py)."""

from __future__ import annotations

from tfx_hydra.models.backbone import BACKBONE
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.models.text import import_text_ops, require_text_inputs
from tfx_hydra.settings.checks import require_range


def hub_text(name, handle, preprocess_handle, num_classes, input_shape=(), freeze_backbone=True,
             output_key="pooled_output", dropout=0.1, head="softmax"):
    """A TF Hub text encoder (`handle`) behind its preprocessing model (`preprocess_handle`), both URLs or
    SavedModel folders; the encoder is the `backbone` the fine-tuning phase unfreezes. The real BERT
    preprocessors need TensorFlow Text's ops: `pip install "tfx_hydra[text]"`."""
    import keras

    from tfx_hydra.models.layers import HubLayer

    require_text_inputs(input_shape, "hub_text")
    require_range("model.dropout", dropout, 0.0, 1.0, 0.1, high_inclusive=False)
    import_text_ops()
    inputs = keras.Input(shape=(), dtype="string", name="inputs")
    encoder_inputs = HubLayer(preprocess_handle, output_key="*", key="model.preprocess_handle",
                              name="preprocess")(inputs)
    x = HubLayer(handle, output_key=output_key, trainable=not freeze_backbone, name=BACKBONE)(encoder_inputs)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)
