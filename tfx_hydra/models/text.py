"""Text models: they take raw strings (data=text_folder, data=text_table) and tokenize them in their own
layers, so the SavedModel and the MLflow model take raw text too.

    text_baseline  TextVectorization -> Embedding -> average -> Dense -> the task's head: the baseline to
                   beat; its vocabulary is adapted on the training split alone (models.adapt)
    hub_text       a TF Hub text encoder with its preprocessing model (the BERT family): the preprocessing
                   model turns strings into input_word_ids / input_mask / input_type_ids, the encoder's
                   pooled_output feeds the head; frozen first, fine-tuned in trainer.finetune_epochs
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.models.pretrained import BACKBONE
from tfx_hydra.validation import require_positive, require_range


def text_baseline(name, num_classes, input_shape=(), max_tokens=20000, sequence_length=200, embedding_dim=64,
                  dense_units=64, dropout=0.2, head="softmax"):
    """Raw strings -> tokens (lower-cased, punctuation stripped, the `max_tokens` most frequent words of the
    training split) -> `embedding_dim` embeddings, averaged over the words -> Dense -> the task's head."""
    import keras

    require_text_inputs(input_shape, "text_baseline")
    for key, value, example in (("max_tokens", max_tokens, 20000), ("sequence_length", sequence_length, 200),
                                ("embedding_dim", embedding_dim, 64), ("dense_units", dense_units, 64)):
        require_positive(f"model.{key}", value, example)
    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs = keras.Input(shape=(), dtype="string", name="inputs")
    tokens = keras.layers.TextVectorization(max_tokens=max_tokens, output_sequence_length=sequence_length,
                                            name="vectorize")(inputs)
    x = keras.layers.Embedding(max_tokens, embedding_dim, mask_zero=True, name="embedding")(tokens)
    x = keras.layers.GlobalAveragePooling1D(name="average")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


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
    encoder_inputs = HubLayer(preprocess_handle, output_key="*", name="preprocess")(inputs)
    x = HubLayer(handle, output_key=output_key, trainable=not freeze_backbone, name=BACKBONE)(encoder_inputs)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


def require_text_inputs(input_shape, model: str) -> None:
    if list(input_shape or []) != []:
        raise ConfigError(f"model={model} takes raw text, one string per example; data.input_shape="
                          f"{list(input_shape)} is not text.", fix="data=text_folder or data=text_table")


def import_text_ops() -> None:
    """TensorFlow Text registers the ops BERT's preprocessing models use; a preprocessor of plain
    TensorFlow ops loads without it, so its absence is said only if loading then fails."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        pass
