"""generate: a causal LM's served form (task=causal_lm). A prompt in, text out: the preset's preprocessor, the
model's own `generate_step` (keras-hub's sampling loop, with the sampler and `max_length` of the model's config)
and the tokenizer's detokenizing, all in one graph, so TF Serving and the MLflow model answer raw strings.
keras-hub's own `generate_postprocess` turns tensors into numpy and cannot be saved: the ids are kept here by a
mask in the graph (the padding and the start and end tokens dropped), then detokenized.
"""

from __future__ import annotations

import numpy as np

OUTPUT = "text"
INPUT = "prompts"


def generating_module(model):
    """A `tf.Module` whose `generate` signature takes a batch of prompts and answers the generated texts (the
    prompt and its continuation, as keras-hub's `generate` does)."""
    import keras_hub as hub
    import tensorflow as tf

    model.sampler = hub.samplers.get(model.generation["sampler"])
    preprocessor, length = model.preprocessor, int(model.generation["max_length"])
    tokenizer = preprocessor.tokenizer
    # the start and end tokens are dropped by id; the padding by the mask (its id is a real token's in GPT-2: 0)
    special = sorted({i for i in (tokenizer.end_token_id, tokenizer.start_token_id) if i is not None})

    class Generator(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model  # its variables (the LoRA adapters too) and the tokenizer's tables travel with it

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT)])
        def generate(self, prompts):
            packed = preprocessor.generate_preprocess(prompts, sequence_length=length)
            out = self.model.generate_step(packed, stop_token_ids=[tokenizer.end_token_id])
            ids, keep = out["token_ids"], tf.cast(out["padding_mask"], tf.bool)
            for token in special:
                keep = keep & tf.not_equal(ids, token)
            return {OUTPUT: tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))}

        __call__ = generate  # what MLflow's loader of a tf.Module calls

    return Generator()


def write_generating_archive(model, path: str):
    """The SavedModel of `generating_module(model)` at `path`, its `serving_default` the generate signature."""
    import tensorflow as tf

    module = generating_module(model)
    tf.saved_model.save(module, path, signatures={"serving_default": module.generate})
    return module


def check_generation(module, path: str, prompts: list[str]) -> float:
    """The SavedModel at `path` reloaded (TensorFlow Text's ops registered) answers `prompts` as the module it was
    written from does: the fraction of identical texts (1.0 with a deterministic sampler)."""
    import tensorflow as tf

    from tfx_hydra.export.served import load_saved_model

    reloaded = load_saved_model(path).signatures["serving_default"]
    wanted = module.generate(tf.constant(prompts))[OUTPUT].numpy()
    answered = reloaded(**{INPUT: tf.constant(prompts)})[OUTPUT].numpy()
    return float(np.mean(wanted == answered))


def prompts_of(datasets, count: int = 3) -> list[str]:
    """The first words of a few validation texts: prompts a served model's check and a reader can try."""
    texts = []
    for batch, _ in datasets.validation.unbatch().take(count):
        words = batch.numpy().decode().split()
        texts.append(" ".join(words[: max(1, len(words) // 2)]))
    return texts
