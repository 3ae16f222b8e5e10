"""data: tf.data pipelines, one factory per option in conf/data/.

Every factory returns `Datasets`: train / validation / test `tf.data.Dataset`s of
(inputs, integer label) batches and the `DataSpec` they satisfy. The spec is declared
in the data config (`data.input_shape`, `data.num_classes`) so the model config can
read it by interpolation before any data is loaded; the factory checks that the real
data matches it, so a wrong declaration fails here with both shapes named instead of
deep inside Keras.

    arrays.py     in memory: digits (offline default), synthetic, Keras' built-ins (mnist, cifar, ...)
    files.py      on disk:   tfrecord, image_folder, csv
    catalogs.py   TensorFlow Datasets (the optional `tfds` extra)
    pipeline.py   what they share: the common options, cache -> shuffle -> batch -> prefetch
    preflight.py  what a data config names (files, shared options), checked before TensorFlow loads
    to_tfrecord.py  `python -m tfx_hydra.data.to_tfrecord`: any configured dataset -> TFRecord shards
"""

from tfx_hydra.data.arrays import digits, keras_dataset, synthetic
from tfx_hydra.data.catalogs import tfds
from tfx_hydra.data.files import csv, image_folder, tfrecord
from tfx_hydra.data.pipeline import DataSpec, Datasets, PipelineOptions

__all__ = ["DataSpec", "Datasets", "PipelineOptions", "csv", "digits", "image_folder", "keras_dataset", "synthetic",
           "tfds", "tfrecord"]
