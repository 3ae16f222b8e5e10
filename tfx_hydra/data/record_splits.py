"""record_splits: which TFRecords each split reads, decided without reading the files through.

A TFRecord file does not say how many records it holds, and counting them reads it whole (100 GB took ~40
minutes): a first start that counted read the data once before its first step. So nothing here counts:

- Splits without files of their own are whole training files where there are WHOLE_FILES or more (drawn by
  data.seed), else records of the training files by a seeded pattern of their positions (the tables' pattern,
  table_stream.split_pattern: within each block of 1,000 records, the same positions go to test, validation and
  training), read in file order. Both are the same split on every start, whatever is known of the counts; the
  held-out splits read the training files whole each pass and keep their share (cheap next to parsing).
- Each split's length is its files' records where an index (to_tfrecord's) or the count cache knows every
  file's (record_index.py), the pattern's share of them for a carved split; else unknown (None): the epoch reads
  to its end, as a user's pipeline of unknown length does, and what needs the length says so before work.
- Files no index or cache knows are counted in a thread of their own at low priority while the run trains
  (record_index.count_in_background), so the next start knows them.
"""

from __future__ import annotations

import logging

import numpy as np

from tfx_hydra.data import record_index
from tfx_hydra.data.table_stream import split_counts, split_pattern
from tfx_hydra.errors import DataError
from tfx_hydra.settings.checks import require_fraction

log = logging.getLogger(__name__)
WHOLE_FILES = 10  # training files from which the splits without files of their own are carved as whole files
PARTS = {"train": 0, "validation": 1, "test": 2}  # table_stream.split_pattern's numbers


def carve_whole_files(sources: dict, validation_split: float, test_split: float, seed) -> None:
    """The splits without files of their own as whole training files, where there are WHOLE_FILES or more:
    test_split of the files (at least one), then validation_split of the rest, drawn by `seed` (`sources`
    updated in place): no split reads another's records."""
    files, missing = sources["train"], [name for name in ("test", "validation") if not sources[name]]
    if len(files) < WHOLE_FILES or not missing:
        return
    order = [files[i] for i in np.random.default_rng(seed or 0).permutation(len(files))]
    for name, fraction in (("test", test_split), ("validation", validation_split)):
        if name in missing:
            require_fraction(f"data.{name}_split", fraction)
            take = max(1, int(round(len(order) * fraction)))
            sources[name], order = sorted(order[:take]), order[take:]
    if not order:
        raise DataError(f"the training files ({len(files)}) are too few to carve validation and test files from.",
                        fix="more files, or data.validation_files=... data.test_files=...")
    kept = set(order)
    sources["train"] = [f for f in files if f in kept]
    log.info("data: " + " and ".join(f"{name} is {len(sources[name])} whole file{'s' * (len(sources[name]) > 1)}"
                                     for name in missing) + f" of the {len(files)} training files (drawn by data.seed)")


def carving(sources: dict, validation_split: float, test_split: float, seed) -> np.ndarray | None:
    """The pattern the splits without files of their own take the training files' records by (None: every
    split has files)."""
    missing = [name for name in ("test", "validation") if not sources[name]]
    if not missing:
        return None
    for name in missing:
        require_fraction(f"data.{name}_split", {"test": test_split, "validation": validation_split}[name])
    return split_pattern(test_split if "test" in missing else 0.0,
                         validation_split if "validation" in missing else 0.0, seed)


def by_pattern(records, pattern: np.ndarray, part: str):
    """The records of `records` (read in a fixed order) whose position the pattern gives to `part`."""
    import tensorflow as tf

    kept = tf.constant(pattern == PARTS[part])
    size = len(pattern)
    return records.enumerate().filter(lambda i, _: tf.gather(kept, i % size)).map(lambda _, record: record)


def known_records(files: list[str] | None) -> int | None:
    """Records in `files` where the index or the count cache knows each one's; None where any is unknown."""
    if not files:
        return None
    known = record_index.known_counts(files)
    return sum(known.values()) if len(known) == len(files) else None


def split_sizes(sources: dict, pattern: np.ndarray | None) -> dict[str, int | None]:
    """Each split's records: its files' (None: not all known), the pattern's share of the training files' for
    a carved one; an empty split is refused now where the counts say so."""
    totals = {name: known_records(files) for name, files in sources.items() if files}
    if pattern is None:
        return totals
    shares = split_counts(totals["train"], pattern) if totals["train"] is not None else dict.fromkeys(PARTS)
    sizes = {name: totals[name] if sources.get(name) and name != "train" else shares[name] for name in PARTS}
    empty = [name for name, size in sizes.items() if size == 0]
    if empty:
        raise DataError(f"the training files hold {totals['train']} records, too few to carve a {empty[0]} split from.",
                        fix="more data, or data.validation_files=... data.test_files=...")
    return sizes


def tfrecord_count(path: str, stopped) -> int | None:
    """A TFRecord file's records, read in batches until done or `stopped()`; None when stopped or unreadable
    (a corrupt file is met, and named, by the epoch that reads it)."""
    import tensorflow as tf

    count = 0
    try:
        for batch in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(4096):
            if stopped():
                return None
            count += int(batch.shape[0])
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
        return None
    return count
