"""lineage: which data a run read, as a digest per split that says whether it is the same data today.

Each source describes its three splits as `DataRead`s (the source, the example count, the
schema and a digest); tracking logs them as MLflow datasets and `reproduce` compares them
with what the same config reads now.

Digests:
    in-memory arrays  sha256 of every array (shape, dtype and bytes) a split holds, after
                      the split and `data.limit`, before normalization: exactly what was read
    files             sha256 of, for every file of the split in order, its path relative to the
                      files' common folder and its size, plus a content sample: the first and
                      last 64 KiB (a file of 128 KiB or less: all of it) of at most 256 files,
                      evenly spaced through the list. The cost is one stat per file and at most
                      32 MiB read, whatever the dataset's size: a terabyte of TFRecords or a
                      million images costs the same reads. A change inside a large file that
                      keeps its size and its sampled ends is not seen.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

DIGEST_LENGTH = 16  # hex characters (MLflow keeps up to 36)
SAMPLED_FILES = 256  # files whose content enters a file digest
SAMPLE_BYTES = 64 * 1024  # read from each end of a sampled file
CONTEXTS = {"train": "training", "validation": "validation", "test": "test"}  # MLflow's dataset contexts


@dataclass(frozen=True)
class DataRead:
    """One split as a run read it: what MLflow's Datasets panel shows, and what reproduce compares."""

    split: str  # train | validation | test
    name: str  # e.g. digits-train
    source: str  # where it came from: a path or glob, keras.datasets.mnist, tfds:mnist@3.0.1[train]
    source_type: str  # local (files) | code (made or downloaded by a library)
    num_examples: int | None  # None: a user's pipeline of unknown length
    input_shape: tuple[int, ...]
    input_dtype: str
    num_classes: int
    digest: str
    digested: str  # how the digest was made, in words
    details: dict[str, Any] = field(default_factory=dict)  # e.g. the number of files

    @property
    def context(self) -> str:
        return CONTEXTS[self.split]


def array_digest(*arrays: np.ndarray) -> str:
    """sha256 of each array's shape, dtype and bytes."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        if array.dtype.kind in "OU":  # file paths (image folders) and other objects: their text
            digest.update("\0".join(str(v) for v in array.reshape(-1)).encode())
        else:
            digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:DIGEST_LENGTH]


def files_digest(paths: Sequence[str], *also: object) -> str:
    """Names, sizes and sampled content of `paths` (see the module docstring), and `also` (e.g.
    which records of the files a split takes)."""
    digest = hashlib.sha256()
    paths = list(paths)
    root = common_folder(paths)
    for path in paths:
        digest.update(f"{os.path.relpath(path, root)}\0{os.path.getsize(path)}\0".encode())
    for path in sampled(paths):
        digest.update(file_sample(path))
    for value in also:
        digest.update(f"\0{value}".encode())
    return digest.hexdigest()[:DIGEST_LENGTH]


def common_folder(paths: Sequence[str]) -> str:
    folders = [os.path.dirname(os.path.abspath(p)) for p in paths]
    return os.path.commonpath(folders) if folders else ""


def sampled(paths: Sequence[str]) -> list[str]:
    """At most SAMPLED_FILES of `paths`, evenly spaced, the first and the last included."""
    if len(paths) <= SAMPLED_FILES:
        return list(paths)
    picks = np.linspace(0, len(paths) - 1, SAMPLED_FILES).round().astype(int)
    return [paths[i] for i in sorted(set(picks.tolist()))]


def file_sample(path: str) -> bytes:
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        if size <= 2 * SAMPLE_BYTES:
            return file.read()
        head = file.read(SAMPLE_BYTES)
        file.seek(size - SAMPLE_BYTES)
        return head + file.read(SAMPLE_BYTES)


FILES_DIGESTED = (f"names and sizes of every file, the first and last {SAMPLE_BYTES // 1024} KiB of up to "
                  f"{SAMPLED_FILES} of them")
ARRAYS_DIGESTED = "sha256 of the split's arrays"


def array_reads(named: str, source: str, splits: dict[str, Any], num_classes: int, source_type: str = "code",
                ) -> dict[str, DataRead]:
    """DataReads of in-memory splits (objects with .x and .y): one digest of each split's arrays."""
    return {split: DataRead(split=split, name=f"{named}-{split}", source=source, source_type=source_type,
                            num_examples=len(arrays.x), input_shape=tuple(int(d) for d in arrays.x.shape[1:]),
                            input_dtype=str(arrays.x.dtype), num_classes=int(num_classes),
                            digest=array_digest(arrays.x, arrays.y), digested=ARRAYS_DIGESTED)
            for split, arrays in splits.items()}


def files_read(split: str, named: str, source: str, paths: Sequence[str], num_examples: int | None,
               input_shape: Sequence[int], num_classes: int, *also: object, count_in_digest: bool = True) -> DataRead:
    """The DataRead of a split streamed from `paths` (`also`: e.g. which of their records it takes). The example
    count enters the digest (data.limit reads less of the same files), unless `count_in_digest=False`: a source
    whose count may be known on one start and not on another (TFRecords without an index) says what it reads in
    `also` instead, so its digest is the same on both."""
    counted = (num_examples,) if count_in_digest else ()
    return DataRead(split=split, name=f"{named}-{split}", source=source, source_type="local",
                    num_examples=None if num_examples is None else int(num_examples),
                    input_shape=tuple(int(d) for d in input_shape), input_dtype="float32",
                    num_classes=int(num_classes), digest=files_digest(paths, *counted, *also),
                    digested=FILES_DIGESTED, details={"files": len(paths)})
