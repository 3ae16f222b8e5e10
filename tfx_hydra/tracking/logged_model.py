"""logged_model: what a run's MLflow logged model carries beyond its files -- the user's packages its
classes come from (`code_paths`), the loader that answers in text (`answers_loader`, pyfunc_answers.py) --
and a registered model's new version made from it."""

from __future__ import annotations

import os
import shutil

from tfx_hydra.settings.project import is_users, package_location
from tfx_hydra.tracking import pyfunc_answers


def register_model(client, run_id: str, name: str) -> str:
    """A new version of registered model `name` from the run's logged model (or, for a run synced
    from the offline journal, its `model/` artifacts); its version number."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # already registered: add a version
    run = client.get_run(run_id)
    outputs = run.outputs.model_outputs if run.outputs else []
    # from the logged model's own location: MLflow's SQL registry resolves a `models:/<id>` source in the process's
    # global tracking store, not this client's (a search's parent, whose trials logged to another store)
    if outputs:
        model_id = outputs[-1].model_id
        location = client.get_logged_model(model_id).artifact_location
        return client.create_model_version(name, location, run_id=run_id, model_id=model_id).version
    return client.create_model_version(name, f"{run.info.artifact_uri}/model", run_id=run_id).version


def keras_model_of(model):
    """The Keras model a logged model serves: itself, or the one a causal LM's generate module holds."""
    return model if hasattr(model, "_flatten_layers") else model.model


def code_paths(model) -> list[str]:
    """The folders of the user's packages whose classes the model holds (a custom layer): MLflow copies
    them into the logged model, so `mlflow models serve` imports them (which registers the classes)
    wherever it runs. tfx_hydra's own layers come with tfx_hydra, which the serving environment has.
    MLflow also pickles every class registered in this process (keras.saving.get_custom_objects), in the
    model or not, and unpickling imports their packages: those are carried too."""
    import keras

    modules = {type(layer).__module__ for layer in [model, *model._flatten_layers()]}
    modules |= {getattr(obj, "__module__", "") or "" for obj in keras.saving.get_custom_objects().values()}
    packages = sorted({module.split(".", 1)[0] for module in modules if is_users(module)})
    return [location for location in map(package_location, packages) if location]


def requirements(model) -> list[str]:
    """The MLflow model's pip requirements, pinned: TensorFlow and Keras, and for a keras-hub preset's model
    keras-hub (its classes) and TensorFlow Text (its tokenizers' ops), which the loader then imports."""
    from importlib.metadata import version

    import keras
    import tensorflow as tf

    pinned = [f"tensorflow=={tf.__version__}", f"keras=={keras.version()}"]
    if any(type(layer).__module__.startswith("keras_hub.") for layer in model._flatten_layers()):
        pinned += [f"{name}=={version(name)}" for name, _ in pyfunc_answers.GRAPH_PACKAGES]
    return pinned


def answers_loader(folder: str) -> str:
    """pyfunc_answers.py copied into `folder` under the name the model imports it by: a file for `code_paths`."""
    path = os.path.join(folder, f"{pyfunc_answers.MODULE}.py")
    shutil.copyfile(pyfunc_answers.__file__, path)
    return path


def load_through_answers(model_dir: str, columns: list[tuple[str, str]] | None = None) -> None:
    """The saved model's MLmodel: its python_function flavor loads through the copied loader (which calls
    MLflow's own), so `mlflow.pyfunc` and `mlflow models serve` answer names as text. A table model's (`columns`:
    its columns' names and types, in its input's order) signature becomes one named column each, which MLflow's
    tensorflow flavor does not write (its check wants one tensor; the loader is ours and takes the columns), so
    MLflow matches a request's columns by name, in any order."""
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, Schema

    path = os.path.join(model_dir, "MLmodel")
    model = Model.load(path)
    model.flavors["python_function"]["loader_module"] = pyfunc_answers.MODULE
    if columns:
        model.signature = ModelSignature(inputs=Schema([ColSpec(COLUMN_TYPES[dtype], name) for name, dtype in columns]),
                                         outputs=model.signature.outputs)
        model.metadata = {**(model.metadata or {}), pyfunc_answers.FEATURE_NAMES: [name for name, _ in columns]}
    model.save(path)


COLUMN_TYPES = {"int64": "long", "float64": "double"}  # a column's type as a file's reader gets it -> MLflow's


def table_rows(values, columns: list[tuple[str, str]]):
    """A table model's example rows as a DataFrame of its named columns, each of the type its file's reader gets."""
    import numpy as np
    import pandas

    return pandas.DataFrame({name: np.round(values[:, i]).astype(dtype) if dtype == "int64" else
                             values[:, i].astype(dtype) for i, (name, dtype) in enumerate(columns)})


def as_example(values):
    """Raw inputs as an MLflow input example holds them: text as str (MLflow's schema reads it as string), numbers
    as float32."""
    import numpy as np

    values = np.asarray(values)
    if values.dtype.kind in "OSU":
        return np.asarray([v.decode() if isinstance(v, bytes) else str(v) for v in values], dtype=object)
    return values.astype("float32")
