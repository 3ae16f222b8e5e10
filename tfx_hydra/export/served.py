"""served: the model every export writes, which takes the raw values the data's files hold.

A data source may change the raw values before the model sees them: the digits' 0..16 and an image's
0..255 scaled to [0, 1], a CSV's columns standardized with the training split's mean and std, a user's
pipeline declaring its own `input_scale`/`input_offset`. Training is fed those values; a served model is
sent the raw ones. So every artifact a user serves (the SavedModel, the .keras file, TFLite, ONNX, TF.js
and the MLflow model) is written from one model, `served_model`: the trained network behind a first layer
that does to raw inputs what the source did, in float32. One input contract for every form; what a
user's own model holds (a `Normalization`, a tokenizer) is inside the network already.

`answering_model` is what a client gets back: the served model's outputs with the task's decision and the
classes' names beside the indices (`{"probabilities": ..., "class": ["sports"], "class_index": [1]}`): the
SavedModel's serving_default and the MLflow model answer through it.

A table's model is served by column name too: `input_names` are its columns as the SavedModel's `by_name`
signature and the MLflow model's named-column signature take them (positional formats record the order).

`raw_batches` gives a split back in raw values (each exporter checks its artifact on them, against the
served model), and `raw_examples` a few of them (the MLflow model's input example, TF Serving's warm-up
records).
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from tfx_hydra.errors import ExportError

RAW_INPUTS_LAYER = "raw_inputs"  # the served model's first layer: raw values -> what the network was trained on
BY_NAME = "by_name"  # a table model's SavedModel signature of one input per column, beside serving_default's tensor


def served_model(model, spec):
    """`model` behind the data's normalization (`(raw - input_offset) * input_scale`, as the pipeline
    computes it), or `model` itself when the source changes nothing (text, normalization=none)."""
    if spec.text or not normalizes(spec):
        return model
    import keras

    scale = np.asarray(spec.input_scale, dtype="float64")
    offset = np.asarray(spec.input_offset, dtype="float64")
    raw = keras.Input(shape=tuple(spec.input_shape), dtype="float32", name="inputs")
    # Rescaling computes x * scale + offset: the source's (x - offset) * scale, in float32 whatever the policy
    scaled = keras.layers.Rescaling(scale=_keras_value(scale), offset=_keras_value(-offset * scale),
                                    dtype="float32", name=RAW_INPUTS_LAYER)(raw)
    served = keras.Model(raw, model(scaled), name=model.name)
    served(np.zeros((1, *spec.input_shape), "float32"), training=False)  # called once: Keras' ONNX export asks it
    return served


def computing_in_float32(model):
    """`model`, its layers trained under a mixed policy (mixed_bfloat16, mixed_float16) set to compute in float32:
    what every export is written from. TFLite and ONNX Runtime have no half-precision kernels for most ops
    ("no built-in kernel for tf.Conv2D", "Type 'tensor(bfloat16)' of input parameter"), and a half-precision graph
    rounds differently from the eager model it is checked against (a SavedModel 2e-4 away). The variables of a mixed
    policy are float32 already: the served model holds the trained weights exactly, computed at full precision.
    Layers of a set dtype (the float32 head, a tokenizer's int32 ids) keep theirs."""
    for layer in [model, *model._flatten_layers()]:
        if layer.dtype_policy.name.startswith("mixed_"):
            layer.dtype_policy = "float32"
    return model


def answering_model(served, spec, named: bool = True):
    """The served model with the task's answers as named outputs (Task.answers: `probabilities`, `class`,
    `class_index`; `labels`, `tags`; `predictions`), the classes called by the data's names; `named=False`:
    the numbers only (TF.js: its converter takes no string lookup, and model.json carries the names)."""
    import keras

    inputs = keras.Input(shape=tuple(spec.input_shape), dtype="string" if spec.text else "float32", name="inputs")
    return keras.Model(inputs, spec.task.answers(served(inputs), spec.names if named else ()), name=served.name)


def load_saved_model(path: str):
    """tf.saved_model.load, with TensorFlow Text imported first where the graph holds ops TensorFlow alone does not
    register: a text model's tokenizer (a keras-hub preset's, TF Hub's BERT preprocessing) is made of them. Without
    TensorFlow Text, one ExportError naming the ops and the install, not TensorFlow's 'Op type not registered'."""
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry
    from tensorflow.python.tools import saved_model_utils

    ops = saved_model_utils.get_meta_graph_def(path, "serve").meta_info_def.stripped_op_list.op
    if any(op_def_registry.get(op.name) is None for op in ops):
        from tfx_hydra.models.text import import_text_ops

        import_text_ops()
        missing = sorted({op.name for op in ops if op_def_registry.get(op.name) is None})
        if missing:
            raise ExportError(f"the SavedModel at {path} holds ops TensorFlow alone does not have "
                              f"({', '.join(missing[:5])}): a text model's tokenizer, made of TensorFlow Text's.",
                              fix='pip install "tfx_hydra[keras-hub]" (TensorFlow Text, the version matching '
                              "TensorFlow)")
    return tf.saved_model.load(path)


def input_names(spec) -> tuple[str, ...]:
    """A table's columns as a signature's input names (BY_NAME): the column's name where it is a Python name,
    else with each other character as `_` (`size (m2)` -> `size__m2_`); () for inputs without names, or names
    that would collide."""
    import keyword
    import re

    names = [re.sub(r"\W", "_", name) for name in spec.feature_names]
    names = tuple(f"f_{name}" if name[:1].isdigit() else f"{name}_" if keyword.iskeyword(name) else name
                  for name in names)
    return names if len(set(names)) == len(names) else ()


def normalizes(spec) -> bool:
    """Whether the source's pipeline changes the raw values (a scale other than 1, an offset other than 0)."""
    return bool(np.any(np.asarray(spec.input_scale) != 1.0) or np.any(np.asarray(spec.input_offset) != 0.0))


def raw_batches(datasets, split: str = "validation") -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A split's batches as (raw inputs, labels): the values a client sends a served model."""
    spec = datasets.spec
    for inputs, labels, *_ in getattr(datasets, split):
        inputs = np.asarray(inputs)
        yield (inputs if spec.text else np.asarray(spec.denormalize(inputs.astype("float32")), "float32"),
               np.asarray(labels))


def raw_examples(datasets, count: int, split: str = "validation") -> np.ndarray:
    """Up to `count` examples of a split in raw values, one array."""
    taken = []
    for inputs, _ in raw_batches(datasets, split):
        taken.extend(inputs[: count - len(taken)])
        if len(taken) >= count:
            break
    return np.asarray(taken)


def _keras_value(values: np.ndarray):
    """A number, or one per feature (a list Rescaling broadcasts over the last axis)."""
    return float(values) if values.ndim == 0 else [float(v) for v in values.reshape(-1)]


LABELS_FILE = os.path.join("assets.extra", "labels.txt")  # the classes' names, one per line, in index order


def write_labels(path: str, names) -> str:
    """The classes' (or tags') names, one per line in index order: the file TF Serving clients and
    mode=evaluate read beside a SavedModel, and beside the .keras, TFLite and ONNX files."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(f"{name}\n" for name in names))
    return path


def read_labels(path: str) -> tuple[str, ...]:
    """The names write_labels wrote (() when there is no such file)."""
    if not os.path.isfile(path):
        return ()
    with open(path, encoding="utf-8") as text:
        return tuple(line.rstrip("\n") for line in text)
