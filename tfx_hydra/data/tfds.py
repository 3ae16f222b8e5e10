"""TensorFlow Datasets: any builder by name. An optional extra (`pip install "tfx_hydra[tfds]"`):
tensorflow-datasets pulls a dozen packages most runs never need."""

from __future__ import annotations

import glob
import os

from tfx_hydra.data.lineage import DataRead, files_read
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import PIXEL_SCALE, Datasets, DataSpec, scaled_pixels, streamed_datasets
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_choice

TFDS_NORMALIZATIONS = ("scale", "none")


def tfds(name, input_shape, num_classes, batch_size, seed, data_dir=None, download=False, train_split="train",
         validation_split="validation", test_split="test", normalization="scale", raw_scale=PIXEL_SCALE,
         **pipeline) -> Datasets:
    """`tensorflow_datasets` builder `name` (e.g. mnist, cifar10, tf_flowers) as (input, label) pairs.

    Splits are TFDS split strings, so a dataset without a validation split takes a slice:
    train_split="train[:90%]", validation_split="train[90%:]". With download=false (the default,
    so a run never starts a multi-GB download by surprise) the data must be in `data_dir`.
    """
    import tensorflow as tf

    options = options_from(batch_size, seed, pipeline)
    require_choice("data.normalization", normalization, TFDS_NORMALIZATIONS)
    try:
        import tensorflow_datasets
    except ImportError:
        raise DataError("data=tfds needs TensorFlow Datasets, which is not installed.",
                        fix='pip install "tfx_hydra[tfds]" (or pip install tensorflow-datasets)') from None
    try:
        builder = tensorflow_datasets.builder(name, data_dir=data_dir)
    except Exception as err:  # DatasetNotFoundError and friends
        raise DataError(f"data.name={name}: TensorFlow Datasets has no such builder ({str(err).splitlines()[0]}).",
                        fix="a name from https://www.tensorflow.org/datasets/catalog, e.g. data.name=mnist") from None
    if not builder.is_prepared():
        if not download:
            raise DataError(f"the TFDS dataset {name} is not in {builder.data_dir} (data.download=false).",
                            fix=f"data.download=true to download and prepare it, or data.data_dir=<folder that holds "
                            f"{name}/>")
        builder.download_and_prepare()
    supervised = builder.info.supervised_keys
    if not supervised:
        raise DataError(f"the TFDS dataset {name} has no (input, label) supervised keys.",
                        fix="a classification dataset, e.g. data.name=mnist")
    scale = raw_scale if normalization == "scale" else 1.0
    label = builder.info.features[supervised[1]]
    spec = DataSpec(tuple(int(d) for d in input_shape), int(num_classes), input_scale=scale,
                    class_names=tuple(getattr(label, "names", None) or ()))  # a ClassLabel's names
    splits, counts = {}, {}
    for role, split in (("train", train_split), ("validation", validation_split), ("test", test_split)):
        try:
            splits[role] = builder.as_dataset(split=split, as_supervised=True, shuffle_files=role == "train",
                                              read_config=tensorflow_datasets.ReadConfig(shuffle_seed=seed))
            counts[role] = int(splits[role].cardinality())  # TFDS asserts it; else its metadata
            if counts[role] < 0:
                counts[role] = int(builder.info.splits[split].num_examples)
        except (ValueError, KeyError) as err:
            raise DataError(f"data.{role}_split={split}: {str(err).splitlines()[0]} (splits of {name}: "
                            f"{', '.join(builder.info.splits)}).",
                            fix=f"data.{role}_split=train[90%:] (a slice of another split)") from None
    shape = tuple(builder.info.features[supervised[0]].shape)
    if None in shape or tuple(d for d in shape if d != 1) != tuple(d for d in spec.input_shape if d != 1):
        raise DataError(f"data.input_shape={list(spec.input_shape)} does not match {name}'s inputs {list(shape)}.",
                        fix=f"data.input_shape={list(shape)}".replace(" ", ""))

    floating = tf.as_dtype(builder.info.features[supervised[0]].dtype).is_floating  # images are integers

    def prepare(inputs, label):  # integer pixels stay as they are through the cache (pipeline.scaled_pixels)
        inputs = tf.reshape(inputs if not floating else tf.cast(inputs, tf.float32) * scale, spec.input_shape)
        return inputs, tf.cast(label, tf.int64)
    split_strings = {"train": train_split, "validation": validation_split, "test": test_split}

    def read(role: str, count: int) -> DataRead:
        """The prepared split's files (TFDS names them <name>-<split>.<format>-<shard>) and the split string."""
        split = split_strings[role]
        files = sorted(glob.glob(os.path.join(builder.data_dir, f"{builder.name}-{split.split('[')[0]}.*")))
        source = f"tfds:{name}@{builder.info.version}[{split}]"
        return files_read(role, name, source, files, count, spec.input_shape, spec.num_classes, source)

    return streamed_datasets(splits, counts, prepare, spec, options,
                             to_inputs=None if floating else scaled_pixels(scale),
                             check_finite_as=f"data=tfds data.name={name}" if floating else None, reads=read)
