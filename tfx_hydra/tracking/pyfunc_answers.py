"""The loader MLflow's pyfunc uses for the models tfx_hydra logs: MLflow's own TensorFlow loader, with the
answers made JSON's.

A served model answers with the classes' names beside the indices (`class`, `tags`): TensorFlow strings, which
reach Python as bytes, and `mlflow models serve` writes bytes to JSON as base64 ("c2V0b3Nh" for "setosa"). This
loader hands them back as text. It also predicts without Keras' progress bar, which MLflow's loader leaves on
(a line per request in a server's log).

The file is copied into each logged model (its `code/` folder, as `tfx_hydra_answers.py`) and named by its
MLmodel's `python_function.loader_module`: it imports nothing of tfx_hydra, so the model serves where only
MLflow, TensorFlow and Keras are installed.
"""

from __future__ import annotations

import numpy as np

MODULE = "tfx_hydra_answers"  # the name the copy is imported by


def _load_pyfunc(path):
    """What `mlflow.pyfunc.load_model` calls with the model's data folder (`<model>/data`, beside its MLmodel) or,
    for a causal LM's generate module, the model's folder itself."""
    import os

    import mlflow.tensorflow
    from mlflow.models import Model

    model_dir = path if os.path.isfile(os.path.join(path, "MLmodel")) else os.path.dirname(path)
    metadata = Model.load(os.path.join(model_dir, "MLmodel")).metadata or {}
    import_graph_packages(model_dir)
    return Answers(mlflow.tensorflow._load_pyfunc(path), metadata.get(FEATURE_NAMES))


def import_graph_packages(model_dir: str) -> None:
    """What the graph needs beyond TensorFlow and Keras, imported where the model's requirements name it: TensorFlow
    Text registers a keras-hub tokenizer's ops, keras-hub its classes (a preset's preprocessor and backbone)."""
    import importlib
    import os

    path = os.path.join(model_dir, "requirements.txt")
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as listing:
        listed = listing.read()
    for name, module in GRAPH_PACKAGES:
        if f"{name}==" in listed:
            importlib.import_module(module)


GRAPH_PACKAGES = (("tensorflow-text", "tensorflow_text"), ("keras-hub", "keras_hub"))  # pip name, module
FEATURE_NAMES = "feature_names"  # the MLmodel metadata's entry: a table model's columns, in its input's order


class Answers:
    """MLflow's Keras wrapper, its predictions with text as str and no progress bar. A table model (`columns`)
    takes a DataFrame by column name: MLflow's schema check has matched the request's columns to the signature's
    by name (extra ones, such as the label column, dropped; a missing one refused, named) and checked their
    types; they are put in the model's order here and fed as one float32 row each."""

    def __init__(self, wrapped, columns=None) -> None:
        self._wrapped = wrapped
        self._columns = list(columns or [])

    def get_raw_model(self):
        return self._wrapped.get_raw_model()

    def predict(self, data, params=None):
        model = getattr(self._wrapped, "keras_model", None)
        if model is not None and self._columns and hasattr(data, "columns"):  # a pandas DataFrame
            data = data[self._columns].to_numpy(dtype="float32")
        if model is None and hasattr(data, "columns"):  # a causal LM's prompts, as a one-column DataFrame
            data = [str(prompt) for prompt in data.iloc[:, 0]]
        if model is None or not isinstance(data, (np.ndarray, list, tuple, dict)):
            return as_text(self._wrapped.predict(data, params=params))
        return as_text(model.predict(data, verbose=0))


def as_text(answers):
    """Arrays of bytes decoded to str (UTF-8), in a dict of outputs or alone; numbers as they are."""
    if isinstance(answers, dict):
        return {name: as_text(values) for name, values in answers.items()}
    values = np.asarray(answers)
    if values.dtype.kind in "OS" and values.size and isinstance(values.reshape(-1)[0], bytes):
        return np.vectorize(lambda v: v.decode("utf-8"), otypes=[object])(values)
    return answers
