"""task=causal_lm: a language model learns each text's next tokens. Its labels are the texts themselves (the
preset's preprocessor turns each into token ids, the ids shifted by one and a mask of the padding), its loss the
cross-entropy of those next tokens, its figure perplexity; a served model answers a prompt with generated text
(export/generate.py), not values per class."""

from __future__ import annotations

import numpy as np

from tfx_hydra.errors import DataError
from tfx_hydra.task.base import Task


class CausalLM(Task):
    name = "causal_lm"
    head = "logits"  # the backbone's own: logits over the vocabulary at every position
    output = "text"
    outputs = ("text",)
    quality_name = "neg_perplexity"
    label_dtype = "string"
    generates = True

    def labels(self, y, split, width, first_row=None):
        texts = np.asarray(y, dtype=object).reshape(-1)
        empty = [i for i, text in enumerate(texts) if not isinstance(text, str) or not text.strip()]
        if empty:
            raise DataError(f"the {split} split's example {empty[0]} is not text, or is empty: a causal LM learns "
                            "from the texts themselves.", fix="drop the empty lines or files")
        return texts.astype(str)

    def describe(self, width):
        return "next-token labels from the text"

    def classes(self, width):
        return 0

    def answers(self, values, names):
        return {"text": values}

    def report(self, values, labels, folder, names=()):
        return []  # its figures are the curves (loss, perplexity): nothing per example to draw
