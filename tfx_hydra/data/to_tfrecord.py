"""python -m tfx_hydra.data.to_tfrecord OUTPUT_DIR [--shards N] [overrides]: write any configured
dataset to sharded TFRecord files, the streaming fast path (`data=tfrecord`).

    python -m tfx_hydra.data.to_tfrecord /data/mnist-tfr --shards 8 data=mnist data.path=/data/mnist.npz

composes the same config as `python -m tfx_hydra` with the same overrides, builds the data
pipeline, and writes OUTPUT_DIR/{train,validation,test}-NNNNN-of-NNNNN.tfrecord (one
tf.train.Example per example: `inputs`, the raw values as floats; `label`, an int64), plus
OUTPUT_DIR/tfrecord-index.json (each file's records: readers start without counting them) and
OUTPUT_DIR/data/<folder name>.yaml: the data option that reads them back
(`python -m tfx_hydra hydra.searchpath=[file://OUTPUT_DIR] data=<folder name>`), and prints how to use it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np
from hydra.errors import HydraException

from tfx_hydra.console import quiet_libraries, start_tensorflow_quietly, use_terminal
from tfx_hydra.data import record_index
from tfx_hydra.errors import ConfigError, TfxHydraError

SPLITS = ("train", "validation", "test")
WRITTEN_BATCH = 256  # examples converted to records per step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfx_hydra.data.to_tfrecord", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", help="folder for the .tfrecord shards (created)")
    parser.add_argument("--shards", type=int, default=4, help="files per split (default 4; >= the workers "
                        "that will read them, so data.shard_policy=file can give each its own)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides that select the data, e.g. data=mnist")
    args = parser.parse_intermixed_args(argv)
    use_terminal()
    quiet_libraries()
    try:
        written = convert(args.output_dir, args.shards, args.overrides)
    except (TfxHydraError, HydraException) as err:  # a user mistake: the message, not a traceback
        from tfx_hydra.settings.compose import composition_error

        print(f"Error: {composition_error(err) or err}", file=sys.stderr)
        return 1
    print(written)
    return 0


def convert(output_dir: str, shards: int, overrides: list[str]) -> str:
    """Write the shards and their data option; return how `python -m tfx_hydra` reads them."""
    from omegaconf import OmegaConf

    from tfx_hydra.settings.checked import require_mandatory_values
    from tfx_hydra.settings.compose import build, compose

    if shards < 1:
        raise ConfigError(f"--shards={shards}: expected at least 1.", fix="--shards 4")
    cfg = compose(overrides)
    require_mandatory_values(OmegaConf.masked_copy(cfg, ["data"]))  # data=image_folder's num_classes: `???`
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    data_cfg.update(shuffle_buffer=0, cache=False)  # written in order; data.limit still applies
    start_tensorflow_quietly()  # its start-up lines off the terminal
    # built a batch of one (a source refuses a split smaller than its batch: 43 images are enough to convert),
    # written in batches of WRITTEN_BATCH
    datasets = build(OmegaConf.create(data_cfg), "data", batch_size=1)
    output_dir = os.path.abspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    spec = datasets.spec
    uniform_scale = np.ndim(spec.input_scale) == 0 and np.ndim(spec.input_offset) == 0 and spec.input_offset == 0
    counts, per_file = {}, {}
    for split in SPLITS:
        written = write_split(getattr(datasets, split), spec, os.path.join(output_dir, split), shards)
        counts[split] = sum(written.values())
        per_file |= written
    record_index.write_index(output_dir, per_file)  # readers size their splits from it, reading no record
    reader = {
        **{f"{split}_files": os.path.join(output_dir, f"{split}-*.tfrecord") for split in SPLITS},
        "input_shape": list(spec.input_shape), "num_classes": spec.num_classes, "kind": "dense",
        "normalization": "scale", "raw_scale": float(spec.input_scale) if uniform_scale else 1.0,
        **({"class_names": list(spec.class_names)} if spec.class_names else {}),
    }
    option = option_name(output_dir)
    os.makedirs(os.path.join(output_dir, "data"), exist_ok=True)
    with open(os.path.join(output_dir, "data", f"{option}.yaml"), "w", encoding="utf-8") as file:
        task = "" if spec.task.name == "classification" else f" task={spec.task.name}"
        file.write(f"# data={option}: {counts['train']} train, {counts['validation']} validation, {counts['test']} "
                   f"test examples, written from data={cfg.data._target_.rsplit('.', 1)[-1]}.\n"
                   f"# python -m tfx_hydra hydra.searchpath=[file://{output_dir}] data={option}{task}\n")
        file.write(OmegaConf.to_yaml(OmegaConf.create({"defaults": ["tfrecord", "_self_"], **reader})))
    command = " ".join(["python -m tfx_hydra data=tfrecord" + ("" if spec.task.name == "classification"
                                                              else f" task={spec.task.name}")] +
                       [override_word(k, v) for k, v in reader.items() if k not in ("kind", "normalization")])
    note = "" if uniform_scale else ("\n(the source standardized per feature: the files hold raw values; "
                                     "add your own normalization)")
    task = "" if spec.task.name == "classification" else f" task={spec.task.name}"
    return (f"wrote {counts} examples to {output_dir}\nread them with the data option written beside them:\n"
            f"  python -m tfx_hydra hydra.searchpath=[file://{output_dir}] data={option}{task}\n"
            f"or with every value spelled out:\n  {command}{note}")


def option_name(output_dir: str) -> str:
    """The data option the written config is: the folder's name (`/data/digits-tfr` -> digits-tfr),
    never the name of one of ours (Hydra would read ours, or the file would inherit from itself)."""
    from tfx_hydra.settings.compose import group_options

    name = re.sub(r"[^\w-]+", "_", os.path.basename(os.path.normpath(output_dir))).strip("_") or "records"
    return f"{name}_records" if name in [*group_options("data"), "pipeline"] else name


def write_split(dataset, spec, prefix: str, shards: int) -> dict[str, int]:
    """Raw values (the pipeline's scaling undone) round-robin over `shards` files; returns each file's count."""
    import tensorflow as tf

    scale = np.asarray(spec.input_scale, dtype="float64")
    offset = np.asarray(spec.input_offset, dtype="float64")
    paths = [f"{prefix}-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]
    writers = [tf.io.TFRecordWriter(path) for path in paths]
    count = 0
    try:
        for inputs, labels in dataset.unbatch().batch(WRITTEN_BATCH):
            raw = (inputs.numpy().astype("float64") / scale + offset).astype("float32")
            for x, y in zip(raw, labels.numpy()):
                label = (tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))
                         if spec.task.name == "classification"  # a class; other tasks' labels are floats
                         else tf.train.Feature(float_list=tf.train.FloatList(value=np.reshape(y, -1))))
                example = tf.train.Example(features=tf.train.Features(feature={
                    "inputs": tf.train.Feature(float_list=tf.train.FloatList(value=x.reshape(-1))),
                    "label": label,
                }))
                writers[count % shards].write(example.SerializeToString())
                count += 1
    finally:
        for writer in writers:
            writer.close()
    return {path: count // shards + (i < count % shards) for i, path in enumerate(paths)}


def format_value(value) -> str:
    """A value as a Hydra override writes it: a list in brackets, a string Hydra would not read plain quoted."""
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, str) and "*" in value:
        return f"'{value}'"
    if isinstance(value, str) and not re.fullmatch(r"[\w./-]+", value):  # a class name with spaces or commas
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def override_word(key: str, value) -> str:
    """`data.<key>=<value>` as a word of the command it prints; the class names quoted for the shell where it
    would split or expand them (a glob's quotes are Hydra's, as before)."""
    import shlex

    word = f"data.{key}={format_value(value)}"
    return shlex.quote(word) if key == "class_names" and not re.fullmatch(r"[\w.,=\[\]/:+-]+", word) else word


if __name__ == "__main__":
    sys.exit(main())
