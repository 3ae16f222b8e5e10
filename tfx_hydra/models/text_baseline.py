"""model=text_baseline: TextVectorization -> Embedding -> average -> Dense -> the task's head, on raw strings:
the baseline to beat; its vocabulary is adapted on the training split alone (models.adapt)."""

from __future__ import annotations

from tfx_hydra.models.heads import head as output_head
from tfx_hydra.models.text import require_text_inputs
from tfx_hydra.settings.checks import require_positive, require_range


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
