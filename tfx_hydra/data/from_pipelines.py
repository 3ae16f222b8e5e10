"""from_pipelines: a user's own tf.data pipelines, handed to tfx_hydra as a data source.

A data source of one's own is a factory a config names (`_target_: myproj.data.my_data`) that
returns `Datasets`. The public way to make them from pipelines the user already has:

    def my_data(batch_size, seed, **pipeline):
        train, validation, test = ...  # tf.data.Datasets of unbatched (inputs, integer label) examples
        return from_pipelines(train, validation, test, input_shape=(28, 28), num_classes=10,
                              batch_size=batch_size, seed=seed, name="my_data", **pipeline)

tfx_hydra then does what it does for its own sources: cache -> shuffle -> batch -> prefetch
(the data.* pipeline options; data.cache=auto keeps a split in memory when it fits the budget),
the checks (shape, label type and range) and the record. Nothing is read through before training: a
split's length is tf.data's (a pipeline of unknown length -- a filter, files read by TFRecordDataset -- is
read to its end each epoch: the bar has no total, a file cache is the only cache, and the record says its
length is unknown), and its first SAMPLE_EXAMPLES examples are digested (sha256 of their bytes, in order, and the
count) and their labels checked, so reproduce can say whether the data changed and a wrong num_classes
fails before training; a class index past num_classes later on fails the epoch that reads it, named.
`digest=False` skips the digest; the run then says that its data is not digested.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from tfx_hydra.data.epoch_order import EpochOrder
from tfx_hydra.data.lineage import DIGEST_LENGTH, DataRead
from tfx_hydra.data.options import options_from
from tfx_hydra.data.pipeline import (
    Datasets,
    DataSpec,
    cached_splits,
    examples_read,
    finish,
    require_a_batch,
    with_class_names,
)
from tfx_hydra.errors import DataError
from tfx_hydra.task import get as get_task

log = logging.getLogger(__name__)
SPLITS = ("train", "validation", "test")
PASS_BATCH = 1024  # examples per step of the sample's read
SAMPLE_EXAMPLES = 2_048  # the first examples of each split: digested and their labels checked before training
NOT_DIGESTED = "not digested (from_pipelines(digest=False))"


def from_pipelines(train: Any, validation: Any, test: Any, *, input_shape, num_classes: int, batch_size: int,
                   seed: int | None = 0, name: str = "own", digest: bool = True,
                   input_scale: float = 1.0, input_offset: float = 0.0, task: Any = "classification",
                   class_names: Any = None, **pipeline) -> Datasets:
    """`Datasets` from three tf.data pipelines of unbatched `(inputs, label)` examples.
    `input_shape`/`num_classes`: what the model is built for (checked against the pipelines);
    `task`: what the labels are (a name, as `task: ${task.name}` hands it): an integer class index
    (classification), 0/1 (binary), a multi-hot row of num_classes (multilabel), num_classes numbers
    (regression), checked in the counting pass;
    `input_scale`/`input_offset`: the normalization the pipelines already applied, which every export
    puts in front of the model so a served model takes raw inputs; `class_names`: the classes' (or tags')
    names in index order, which the served model answers with (None: numbered, or data.class_names);
    `pipeline`: the data.* options."""
    options = options_from(batch_size, seed, pipeline)
    kind = get_task(task) if isinstance(task, str) else task
    spec = with_class_names(DataSpec(tuple(int(d) for d in input_shape), int(num_classes), input_scale, input_offset,
                                     task=kind), class_names, options.class_names)
    pipelines = {"train": train, "validation": validation, "test": test}
    reads, counts, told = {}, {}, {}
    for split, dataset in pipelines.items():
        require_examples(split, dataset, spec)
        if split == "train" and options.limit is not None:
            dataset = dataset.take(options.limit)
        told[split], reads[split] = counted_and_digested(split, dataset, spec, name, digest)
        counts[split] = reads[split].num_examples
        if counts[split] == 0:
            raise DataError(f"the {split} pipeline of {name} is empty.", fix="hand over a pipeline with examples")
    if counts["train"] is not None:
        require_a_batch(counts["train"], options.batch_size)
    if options.served:  # the workers read pieces of it: a length asserted on a piece would fail (service.py)
        told["train"] = pipelines["train"]
    told, cached = cached_splits(options, told, counts)
    order = EpochOrder()  # the user's pipeline keeps its own order; ours (the shuffle on top) follows the epoch
    finished = {split: finish(told[split], options, training=split == "train", num_examples=counts[split],
                              shuffle_buffer=cached.shuffle_buffer, order=order) for split in SPLITS}
    if not digest:
        log.info(f"data: {name}'s splits are not digested (digest=False): reproduce cannot tell whether they change")
    read = {split: examples_read(options, counts[split]) for split in SPLITS}
    explain = (lambda err: label_out_of_range(err, name, spec.num_classes)) if kind.name == "classification" else None
    return Datasets(train=finished["train"], validation=finished["validation"], test=finished["test"], spec=spec,
                    num_train=read["train"], num_validation=read["validation"], num_test=read["test"], reads=reads,
                    cache=cached.said, order=order, explain=explain, served=options.served)


def require_examples(split: str, dataset: Any, spec: DataSpec) -> None:
    """An unbatched pipeline of (inputs of the declared shape, an integer label), of finite length."""
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise DataError(f"the {split} split is a {type(dataset).__name__}, not a tf.data.Dataset.",
                        fix="hand from_pipelines tf.data.Datasets (tf.data.Dataset.from_tensor_slices((x, y)) for "
                        "arrays)")
    element = dataset.element_spec
    if not (isinstance(element, tuple) and len(element) == 2):
        raise DataError(f"the {split} pipeline yields {element}, not (inputs, label) pairs.",
                        fix="map it to pairs: dataset.map(lambda example: (example['image'], example['label']))")
    inputs, label = element
    shape = tuple(inputs.shape)
    if shape != spec.input_shape:
        batched = len(shape) == len(spec.input_shape) + 1 and shape[1:] == spec.input_shape
        raise DataError(f"the {split} pipeline's inputs have shape {list(shape)}, the model is built for "
                        f"{list(spec.input_shape)}" + (": it is batched already." if batched else "."),
                        fix="hand over unbatched examples (tfx_hydra batches them by trainer.batch_size)" if batched
                        else f"input_shape={list(shape)} in the source (or reshape the pipeline's inputs)")
    if spec.task.name == "classification" and not (label.dtype.is_integer and label.shape.rank == 0):
        raise DataError(f"the {split} pipeline's labels are {label.dtype.name} of shape {list(label.shape)}: "
                        "expected one integer class index per example.",
                        fix="map the labels to integers: dataset.map(lambda x, y: (x, tf.cast(y, tf.int64)))")
    if spec.task.name != "classification" and label.shape.num_elements() not in (None, spec.num_classes):
        raise DataError(f"the {split} pipeline's labels have shape {list(label.shape)}: task={spec.task.name} "
                        f"expects {spec.task.describe(spec.num_classes)} per example.",
                        fix=f"num_classes={label.shape.num_elements()}, or reshape the labels")
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise DataError(f"the {split} pipeline never ends (it repeats): an epoch needs an end.",
                        fix="drop the .repeat(), or end it with .take(N)")


def counted_and_digested(split: str, dataset: Any, spec: DataSpec, name: str, digest: bool):
    """(the pipeline; its DataRead). Its length is tf.data's where tf.data knows it, the sample's where the
    pipeline ends within it, else unknown (None: said, with how to tell it); the digest and the label checks
    read the first SAMPLE_EXAMPLES examples only, so a pipeline of any size starts training in the same time."""
    import numpy as np
    import tensorflow as tf

    count = int(dataset.cardinality())
    hashed, low, high, every, sampled = hashlib.sha256(), None, None, [], 0
    checked = spec.task.name != "classification"  # 0/1, multi-hot and finite numbers: each label looked at
    for inputs, labels in dataset.take(SAMPLE_EXAMPLES).batch(PASS_BATCH).as_numpy_iterator():
        sampled += len(labels)
        if digest:
            hashed.update(np.ascontiguousarray(inputs).tobytes())
            hashed.update(np.ascontiguousarray(labels).astype("float64" if checked else "int64").tobytes())
        low = labels.min() if low is None else min(low, labels.min())
        high = labels.max() if high is None else max(high, labels.max())
        if checked:
            every.append(labels.reshape(len(labels), -1))
    if count < 0 and sampled < SAMPLE_EXAMPLES:  # it ended within the sample: its length is known now
        count = sampled
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    elif count < 0:
        count = None
        log.info(f"data: {name}'s {split} pipeline does not know its length: each epoch reads it to its end (the "
                 "bar counts batches without a total); dataset.apply(tf.data.experimental.assert_cardinality(N)) "
                 "tells it")
    hashed.update(f"{count}".encode())  # the sample, and how many examples follow it (None: unknown)
    if checked:
        if every:
            spec.task.labels(np.concatenate(every), split, spec.num_classes)
        width = spec.num_classes
        dataset = dataset.map(lambda x, y: (x, tf.reshape(tf.cast(y, tf.float32), [width])))
    elif low is not None and (low < 0 or high >= spec.num_classes):
        raise DataError(f"num_classes={spec.num_classes} does not match the {split} pipeline: its labels range over "
                        f"[{low}, {high}].", fix=f"num_classes={int(high) + 1}")
    read = DataRead(split=split, name=f"{name}-{split}", source=f"{name} (the project's tf.data pipeline)",
                    source_type="code", num_examples=count, input_shape=spec.input_shape,
                    input_dtype=dataset.element_spec[0].dtype.name, num_classes=spec.num_classes,
                    digest=hashed.hexdigest()[:DIGEST_LENGTH] if digest else "none",
                    digested=digested(sampled, count is not None) if digest else NOT_DIGESTED)
    return dataset, read


def digested(sampled: int, counted: bool = True) -> str:
    return (f"sha256 of the first {sampled:,} examples' inputs and labels, in the pipeline's order, and the count"
            + ("" if counted else " (unknown: the pipeline does not know its length)"))


def label_out_of_range(err: Exception, name: str, num_classes: int) -> Exception | None:
    """A class index past num_classes that the sample did not hold, met where the loss reads it."""
    import re

    found = re.search(r"Received a label value of (-?\d+) which is outside the valid range of \[0, (\d+)\)",
                      str(getattr(err, "message", err)))
    if found is None:
        return None
    return DataError(f"{name}: a label of {found.group(1)} after the first {SAMPLE_EXAMPLES:,} examples (which were "
                     f"checked) is not a class of num_classes={num_classes}.",
                     fix=f"num_classes={int(found.group(1)) + 1}, or fix the pipeline's labels")
