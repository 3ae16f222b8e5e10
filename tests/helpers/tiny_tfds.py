"""A TensorFlow Datasets builder of this test suite's own: 8x8 gray images, dark or light, prepared from
arrays in a folder of the test's (no download), so data=tfds is tested on a real prepared dataset that TFDS
reads back from its own files. TFDS registers a builder when its class is defined: once per process, here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

SPLITS = {"train": 96, "validation": 32, "test": 32}


class TinyShapes(tfds.core.GeneratorBasedBuilder):
    """`tiny_shapes`: images whose brightness says their class ("dark" below 100, "light" above 150)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 1)),
            "label": tfds.features.ClassLabel(names=["dark", "light"])}), supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {name: self._generate_examples(name) for name in SPLITS}

    def _generate_examples(self, split):
        rng = np.random.default_rng(list(SPLITS).index(split))
        for i in range(SPLITS[split]):
            label = int(rng.integers(0, 2))
            low, high = (0, 100) if label == 0 else (150, 256)
            yield i, {"image": rng.integers(low, high, (8, 8, 1)).astype("uint8"), "label": label}


def prepare_tiny_shapes(data_dir: Path) -> tfds.core.DatasetBuilder:
    """The dataset written into `data_dir` (as `data.download=true` would), its builder returned."""
    builder = TinyShapes(data_dir=str(data_dir))
    builder.download_and_prepare()
    return builder
