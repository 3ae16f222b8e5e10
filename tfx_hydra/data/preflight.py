"""preflight: what a data config names, checked before TensorFlow loads: a typo costs half a
second, not ten."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.data.pipeline import PipelineOptions
from tfx_hydra.data.tfrecord import expand_globs
from tfx_hydra.errors import ConfigError
from tfx_hydra.validation import require_path, require_writable_folder


def check_data_config(data: DictConfig, task: str = "classification") -> None:
    """The files a data source reads, the options every source shares (ranges and choices:
    data.shard_policy, prefetch, limit, ...), and whether it gives the task's labels."""
    require_task_labels(data, task)
    shared = {key: data[key] for key in PipelineOptions.__dataclass_fields__
              if key in data and key not in ("batch_size", "seed")}
    PipelineOptions(batch_size=1, seed=0, **shared)

    for key in ("path", "directory", "test_directory"):
        value = data.get(key)
        if value:
            require_path(f"data.{key}", value, fix=f"data.{key}=/abs/path/to/the/data")
    for key in ("train_files", "validation_files", "test_files"):
        value = data.get(key)
        if value:
            expand_globs(f"data.{key}", OmegaConf.to_object(value) if OmegaConf.is_list(value) else value)
    cache = data.get("cache")
    if isinstance(cache, str) and cache != "memory":  # a cache file: its folder must be there to write in
        require_writable_folder("data.cache", cache, os.path.dirname(os.path.abspath(cache)), create=False)


def require_task_labels(data: DictConfig, task: str) -> None:
    """A source gives another task's labels than class indices only if its config takes `task`
    (csv, synthetic, arrays in an .npz, text: `task: ${task.name}`); the others give classes. A binary task
    has one output, the probability of 1: data.num_classes=2 (the two classes) would build two."""
    if task == "binary" and data.get("num_classes") not in (None, 1):
        raise ConfigError(f"task=binary has one output (the probability of label 1), but data.num_classes="
                          f"{data.num_classes} asks the model for {data.num_classes}.",
                          fix="drop data.num_classes (task=binary sets it to 1), or task=classification")
    if task == "classification" or "task" in data:
        return
    target = data.get("_target_", "?")
    user = not str(target).startswith("tfx_hydra.")
    raise ConfigError(f"task={task}: data._target_={target} gives class labels only" +
                      (" (its config takes no `task`)." if user else "."),
                      fix="pass `task: ${task.name}` to your source (and on to from_pipelines(..., task=task))" if user
                      else "data=csv (a label column, or label_columns), data=synthetic, or data=keras with an .npz "
                      "(data.path) hold labels of every task; or task=classification")
