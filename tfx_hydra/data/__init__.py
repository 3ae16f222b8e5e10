"""data: tf.data pipelines, one factory per option in conf/data/.

Every factory returns `Datasets`: train / validation / test `tf.data.Dataset`s of
(inputs, integer label) batches and the `DataSpec` they satisfy. The spec is declared
in the data config (`data.input_shape`, `data.num_classes`) so the model config can
read it by interpolation before any data is loaded; the factory checks that the real
data matches it, so a wrong declaration fails here with both shapes named instead of
deep inside Keras.

One module per option of conf/data/, named as the option is:

    digits.py     scikit-learn's digits, in memory: the offline default
    synthetic.py  learnable Gaussian data of any shape, in memory
    keras.py      Keras' built-ins (mnist, fashion_mnist, cifar10, cifar100) or a local .npz, in memory
    tfrecord.py   TFRecord shards, streamed (data=tfrecord)
    image_folder.py  a folder of class folders of images, streamed (data=image_folder)
    from_pipelines.py  a user's own tf.data pipelines as a source (the public way: see its docstring)
    csv.py        a CSV of numeric columns, in memory (data=csv)
    text_folder.py  a folder of class folders of .txt files, raw strings in memory (data=text_folder)
    text_corpus.py  a text file or folder of .txt files, a language model's examples (data=text_corpus)
    text_table.py   a CSV / TSV / JSON Lines table of raw text and labels, in memory (data=text_table)
    augmentation.py  data.augmentation: random flips, rotations, zooms on training batches
    tfds.py       TensorFlow Datasets (the optional `tfds` extra)

and what they share:

    options.py    the options every source takes (conf/data/pipeline/default.yaml), checked before TensorFlow
    pipeline.py   what they share: the splits made into batches: limit -> cache -> shuffle -> batch -> prefetch
    cache.py      data.cache=auto: each split in memory, on disk or not cached, by the budget; said on the data line
    service.py    data.service: the training split read from tf.data service workers (local: started for the run)
    service_servers.py  the dispatcher and worker processes data.service=local starts (python -m)
    preflight.py  what a data config names (files, shared options), checked before TensorFlow loads
    to_tfrecord.py  `python -m tfx_hydra.data.to_tfrecord`: any configured dataset -> TFRecord shards
"""

from tfx_hydra.data.csv import csv
from tfx_hydra.data.digits import digits
from tfx_hydra.data.from_pipelines import from_pipelines
from tfx_hydra.data.image_folder import image_folder
from tfx_hydra.data.keras import keras_dataset
from tfx_hydra.data.pipeline import Datasets, DataSpec, PipelineOptions
from tfx_hydra.data.synthetic import synthetic
from tfx_hydra.data.text_corpus import text_corpus
from tfx_hydra.data.text_folder import text_folder
from tfx_hydra.data.text_table import text_table
from tfx_hydra.data.tfds import tfds
from tfx_hydra.data.tfrecord import tfrecord

__all__ = ["DataSpec", "Datasets", "PipelineOptions", "csv", "digits", "from_pipelines", "image_folder",
           "keras_dataset", "synthetic", "text_corpus", "text_folder", "text_table", "tfds", "tfrecord"]
