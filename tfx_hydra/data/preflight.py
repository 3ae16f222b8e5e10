"""preflight: what a data config names, checked before TensorFlow loads: a typo costs half a
second, not ten."""

from __future__ import annotations

import math
import os

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.data.options import PipelineOptions
from tfx_hydra.data.table import is_number
from tfx_hydra.data.tfrecord import expand_globs
from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.checks import require_path, require_writable_folder


def check_data_config(data: DictConfig, task: str = "classification") -> None:
    """The files a data source reads, the options every source shares (ranges and choices:
    data.shard_policy, prefetch, limit, ...), and whether it gives the task's labels."""
    require_task_labels(data, task)
    require_class_labels(data, task)
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
    if isinstance(cache, str) and cache not in ("auto", "memory"):  # a cache file: its folder must be there
        require_writable_folder("data.cache", cache, os.path.dirname(os.path.abspath(cache)), create=False)
    if data.get("cache_dir"):  # where cache=auto may write a file cache: made now, or one error naming it
        require_writable_folder("data.cache_dir", data.cache_dir, os.path.abspath(data.cache_dir), create=True)


def require_task_labels(data: DictConfig, task: str) -> None:
    """A source gives another task's labels than class indices only if its config takes `task`
    (csv, synthetic, arrays in an .npz, text: `task: ${task.name}`); the others give classes. A binary task
    has one output, the probability of 1: data.num_classes=2 (the two classes) would build two."""
    if task == "binary" and data.get("num_classes") not in (None, 1):
        raise ConfigError(f"task=binary has one output (the probability of label 1), but data.num_classes="
                          f"{data.num_classes} asks the model for {data.num_classes}.",
                          fix="drop data.num_classes (task=binary sets it to 1), or task=classification")
    target = data.get("_target_", "?")
    if (target == "tfx_hydra.data.text_corpus") != (task == "causal_lm") and str(target).startswith("tfx_hydra."):
        raise ConfigError(f"data={str(target).rsplit('.', 1)[-1]} and task={task} do not go together: a text corpus "
                          "holds a language model's examples, no labels (task=causal_lm learns from one).",
                          fix="task=causal_lm data=text_corpus" if task == "causal_lm" or
                          target == "tfx_hydra.data.text_corpus" else "task=classification")
    if task == "classification" or "task" in data:
        return
    user = not str(target).startswith("tfx_hydra.")
    raise ConfigError(f"task={task}: data._target_={target} gives class labels only" +
                      (" (its config takes no `task`)." if user else "."),
                      fix="pass `task: ${task.name}` to your source (and on to from_pipelines(..., task=task))" if user
                      else "data=csv (a label column, or label_columns), data=synthetic, or data=keras with an .npz "
                      "(data.path) hold labels of every task; or task=classification")


LABEL_PEEK = 5000  # rows of a table's label column read before TensorFlow starts (a quick look, not the data step)


def require_class_labels(data: DictConfig, task: str) -> None:
    """A table's label column under task=classification that holds a quantity to predict (a price, a dose: many
    distinct numbers, few rows each) is said before any run exists, with task=regression as the fix: as
    classes it would fail later with 'data.num_classes=214', or train a 214-way classifier."""
    from tfx_hydra.task.classification import looks_continuous

    target = str(data.get("_target_", ""))
    path, column = data.get("path"), data.get("label_column")
    if task != "classification" or target not in ("tfx_hydra.data.csv", "tfx_hydra.data.text_table") \
            or data.get("label_columns") or not path or not column or not os.path.isfile(str(path)):
        return
    values = peek_column(str(path), str(column))
    numbers = [float(v) for v in values if is_number(v)]
    if not values or len(numbers) < len(values):  # class names, or a missing column: the data step says which
        return
    distinct = len(set(numbers))
    fractions = any(not n.is_integer() for n in numbers)
    if fractions or looks_continuous(distinct, len(numbers), int(data.get("num_classes") or 0)):
        raise ConfigError(f"task=classification, but data.label_column={column} of {path} holds numbers to predict, "
                          f"not classes: {distinct} distinct values over [{min(numbers):g}, {max(numbers):g}] in its "
                          f"first {len(numbers)} rows{' (some with fractions)' if fractions else ''}.",
                          fix="task=regression (numeric targets)")


def peek_column(path: str, column: str) -> list[str]:
    """Up to LABEL_PEEK values of one column of a CSV, TSV or JSON Lines file ([] when it has no such column)."""
    import csv
    import itertools
    import json

    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as text:
            if path.endswith(".jsonl"):
                rows = [json.loads(line) for line in itertools.islice(text, LABEL_PEEK) if line.strip()]
                return [str(row.get(column, "")) for row in rows if isinstance(row, dict)]
            reader = csv.DictReader(text, delimiter="\t" if path.endswith(".tsv") else ",")
            if column not in (reader.fieldnames or []):
                return []
            return [(row[column] or "").strip() for row in itertools.islice(reader, LABEL_PEEK)]
    except (OSError, ValueError, csv.Error):  # unreadable: the data step names what is wrong, where
        return []


def declared_input_values(data: DictConfig) -> int | None:
    """The values one example's input holds, by data.input_shape ([64, 64, 3]: 12,288); None where the
    config does not say (a user's source without the key, text of shape [])."""
    if "input_shape" not in data or OmegaConf.is_missing(data, "input_shape"):
        return None
    shape = data.input_shape
    if not OmegaConf.is_list(shape) or not len(shape) or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    return math.prod(shape)
