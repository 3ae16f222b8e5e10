"""Tiny keras-hub presets the tests write themselves (no download): a BERT-shaped text encoder with a WordPiece
vocabulary of the test reviews' words, and a vision transformer with its image converter, each saved by
keras-hub's own `save_to_preset` with the preprocessor model=keras_hub loads from it."""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("awful terrible boring dull poor sad great superb lovely fine happy warm the film was and it a plot acting "
         "story really . , :").split()


def save_tiny_text_preset(folder: Path, words: list[str] | None = None, sequence_length: int = 16,
                          seed: int = 0, hidden_dim: int = 8) -> Path:
    """A 1-layer BERT (hidden 8: about a thousand weights; 16 learns two features at once) and its text classifier
    preprocessor in `folder`; its WordPiece vocabulary is `words` (the test reviews' by default), lower case, and
    the special tokens."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    vocabulary = SPECIAL + sorted(set(words or WORDS))
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), num_layers=1, num_heads=2,
                                             hidden_dim=hidden_dim, intermediate_dim=2 * hidden_dim,
                                             max_sequence_length=sequence_length)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer=tokenizer,
                                                                   sequence_length=sequence_length)
    backbone.save_to_preset(str(folder))
    preprocessor.save_to_preset(str(folder))
    return folder


def save_tiny_image_preset(folder: Path, image_size: int = 16, seed: int = 0) -> Path:
    """A 1-layer vision transformer (8x8 patches, hidden 8: about two thousand weights) and its image converter
    (resize to `image_size`, scale 0-255 pixels to [0, 1]) in `folder`."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.ViTBackbone(image_shape=(image_size, image_size, 3), patch_size=8, num_layers=1,
                                            num_heads=2, hidden_dim=8, mlp_dim=16)
    converter = keras_hub.layers.ViTImageConverter(image_size=(image_size, image_size), scale=1 / 255.0)
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    backbone.save_to_preset(str(folder))
    preprocessor.save_to_preset(str(folder))
    return folder


CORPUS_WORDS = "the cat sat on mat a dog ran in park".split()


def save_tiny_causal_lm_preset(folder: Path, sequence_length: int = 24, seed: int = 0) -> Path:
    """A 1-layer GPT-2 (hidden 16: a few thousand weights) and its causal LM preprocessor in `folder`: a byte-level
    BPE of the test corpus' letters (a merge of each word's pairs, so words are a few tokens), its end token last
    -- keras-hub pads a generate's prompt with 0, and an end token of id 0 would read as the sequence's end."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    letters = sorted({c for word in CORPUS_WORDS for c in word})
    vocabulary = {token: i for i, token in enumerate([*letters, *(f"Ġ{c}" for c in letters), "Ġ"])}
    merges = ["Ġ " + c for c in letters]  # a space and the next letter: one token
    vocabulary["<|endoftext|>"] = len(vocabulary)
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=len(vocabulary), num_layers=1, num_heads=2, hidden_dim=16,
                                             intermediate_dim=32, max_sequence_length=64)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer=tokenizer, sequence_length=sequence_length)
    backbone.save_to_preset(str(folder))
    preprocessor.save_to_preset(str(folder))
    return folder


def save_pretrained_tiny_llama_preset(folder: Path, sentences: list[str], epochs: int = 8, seed: int = 0) -> Path:
    """A Llama-shaped causal LM (1 layer, hidden 16, grouped-query attention; a few thousand weights) with a
    SentencePiece model trained here on `sentences`, itself trained on them first -- the pretrained model a LoRA
    fine-tuning starts from -- then saved with its preprocessor in `folder`."""
    import io

    import keras
    import keras_hub
    import sentencepiece
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 20), model_writer=proto, vocab_size=64, hard_vocab_limit=False,
        model_type="unigram",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>",
        eos_piece="</s>", character_coverage=1.0, minloglevel=2)
    tokenizer = keras_hub.models.LlamaTokenizer(proto=proto.getvalue())
    backbone = keras_hub.models.LlamaBackbone(vocabulary_size=tokenizer.vocabulary_size(), num_layers=1,
                                              num_query_heads=2, num_key_value_heads=1, hidden_dim=16,
                                              intermediate_dim=32)
    preprocessor = keras_hub.models.LlamaCausalLMPreprocessor(tokenizer=tokenizer, sequence_length=24)
    model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(2e-2))
    model.fit(tf.data.Dataset.from_tensor_slices(sentences * 50).batch(16), epochs=epochs, verbose=0)
    backbone.save_to_preset(str(folder))
    preprocessor.save_to_preset(str(folder))
    return folder
