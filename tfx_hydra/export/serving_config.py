"""models.config: TensorFlow Serving's `--model_config_file` for every model of an export folder, built and
read back with TF Serving's own proto (`tensorflow_serving.config.ModelServerConfig`, text format), so
what is written is what the server parses.

Each model serves its labelled versions and its newest (`model_version_policy { specific { versions } }`).
A request that names no version gets the newest (TF Serving's default); one that names a label gets the
version the label points at (gRPC `model_spec.version_label`, REST `/v1/models/<name>/labels/<label>`). A
model's first version is labelled `stable`; a run labels its own version with
`export.savedmodel.version_label` (e.g. `canary`), and `tfx-hydra promote` points a label at a run's version.
The file is written beside itself and renamed over the old one: TF Serving re-reads it every
`--model_config_file_poll_wait_seconds` and must never read half of it.
"""

from __future__ import annotations

import os
import tempfile

from tfx_hydra.errors import ExportError

CONFIG_NAME = "models.config"
FIRST_LABEL = "stable"  # what a model's first version is labelled: the one clients asking for `stable` get


def versions_of(model_dir: str) -> list[int]:
    """The integer-named version folders of a model, in order (what TF Serving loads)."""
    if not os.path.isdir(model_dir):
        return []
    return sorted(int(name) for name in os.listdir(model_dir)
                  if name.isdigit() and os.path.isdir(os.path.join(model_dir, name)))


def read_config(export_dir: str):
    """The export folder's models.config as TF Serving parses it (an empty config if there is none)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    path = os.path.join(export_dir, CONFIG_NAME)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as text:
            try:
                text_format.Parse(text.read(), config)
            except text_format.ParseError as err:
                raise ExportError(f"{path} is not a models.config TensorFlow Serving can read: {err}.",
                                  fix=f"correct it, or remove it: the next export writes it again from the "
                                  f"models in {export_dir}") from None
    return config


def labels_of(config) -> dict[str, dict[str, int]]:
    """model name -> {label: version}, as the config says."""
    return {entry.name: dict(entry.version_labels) for entry in config.model_config_list.config}


def write_models_config(export_dir: str, label: tuple[str, str, int] | None = None) -> str:
    """models.config for the versioned models in `export_dir`: each keeps the labels it had whose version is
    still there (its oldest version `stable` if it has none), then `label` (model, label, version) is set.
    Returns the file's path."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    kept = labels_of(read_config(export_dir))
    config = model_server_config_pb2.ModelServerConfig()
    for name in sorted(os.listdir(export_dir)):
        folder = os.path.join(export_dir, name)
        versions = versions_of(folder)
        if not versions:
            continue
        labels = {key: version for key, version in kept.get(name, {}).items() if version in versions}
        labels = labels or {FIRST_LABEL: versions[0]}
        if label is not None and label[0] == name:
            labels[label[1]] = label[2]
        entry = config.model_config_list.config.add(name=name, base_path=os.path.abspath(folder),
                                                    model_platform="tensorflow")
        entry.model_version_policy.specific.versions.extend(sorted({*labels.values(), versions[-1]}))
        for key in sorted(labels):
            entry.version_labels[key] = labels[key]
    path = os.path.join(export_dir, CONFIG_NAME)
    descriptor, staging = tempfile.mkstemp(prefix=".models.config-", dir=export_dir)
    with os.fdopen(descriptor, "w", encoding="utf-8") as text:
        text.write(text_format.MessageToString(config))
    os.replace(staging, path)  # atomic: the server reads the old file or the new one
    return path
