"""record_index: how many records each TFRecord file holds, without reading the files at every start.

A TFRecord file does not say how many records it holds: counting them reads it whole (100 GB took ~40
minutes). The counts give the epochs their length, so they come, in order, from
    1. the index to_tfrecord writes beside its shards (tfrecord-index.json: each file's records and bytes);
    2. this user's count cache ($XDG_CACHE_HOME/tfx_hydra/record_counts.json, else ~/.cache/...), keyed by
       the file's path, size and modification time: a file written again is counted again;
    3. nowhere yet: the run trains without them (an epoch of unknown length), and the files are counted in a
       thread of its own while it trains (`count_in_background`), kept in that cache for the next start.
No file is read through before training: a truncated or corrupt record is met in the epoch that reads it, and
named there (tfrecord.corrupt_record).
"""

from __future__ import annotations

import contextlib
import logging
import os

from tfx_hydra import user_cache
from tfx_hydra.user_cache import cache_file, read_json, write_json

log = logging.getLogger(__name__)

INDEX_FILE = "tfrecord-index.json"
CACHE_FILE = "record_counts.json"


def cache_path() -> str:
    return cache_file(CACHE_FILE)


def write_index(folder: str, counts: dict[str, int]) -> str:
    """The index beside the shards `counts` names (path -> records): what to_tfrecord wrote, in its own words."""
    entries = {os.path.basename(path): {"records": n, "bytes": os.path.getsize(path)} for path, n in counts.items()}
    path = os.path.join(folder, INDEX_FILE)
    known = read_json(path).get("files", {})
    write_json(path, {"format": 1, "files": known | entries})
    return path


def known_counts(files: list[str]) -> dict[str, int]:
    """Counts an index or the cache holds for `files` as they are now (same size; the cache: same mtime)."""
    found: dict[str, int] = {}
    indexes: dict[str, dict] = {}
    cached = read_json(cache_path())
    for path in files:
        stat = os.stat(path)
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in indexes:
            indexes[folder] = read_json(os.path.join(folder, INDEX_FILE)).get("files", {})
        count = _records(indexes[folder].get(os.path.basename(path)), bytes=stat.st_size)
        if count is None:
            count = _records(cached.get(os.path.abspath(path)), bytes=stat.st_size, mtime_ns=stat.st_mtime_ns)
        if count is not None:
            found[path] = count
    return found


def _records(entry, **expected) -> int | None:
    """An entry's record count if it still describes the file (an entry edited by hand into something else
    is no entry: the file is counted again)."""
    if not isinstance(entry, dict) or any(entry.get(key) != value for key, value in expected.items()):
        return None
    records = entry.get("records")
    return records if isinstance(records, int) and not isinstance(records, bool) and records >= 0 else None


def remember(counts: dict[str, int]) -> None:
    """Keep counted files' counts for the next start (a cache that cannot be written only costs a recount)."""
    entries = {}
    for file, records in counts.items():
        with contextlib.suppress(OSError):  # a file gone since it was counted: nothing to remember of it
            stat = os.stat(file)
            entries[os.path.abspath(file)] = {"records": records, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    user_cache.remember(cache_path(), entries)


def count_in_background(files: list[str], count_file, what: str) -> None:
    """Count `files` (`count_file(path, stopped) -> records | None`) in a daemon thread at the lowest CPU
    priority, each count kept in the cache as it is made; the process stops it at exit (its TensorFlow reads must
    not outlive the interpreter)."""
    import atexit
    import threading

    stop = threading.Event()

    def count_each() -> None:
        with contextlib.suppress(OSError, AttributeError):  # a lower priority where the OS gives one per thread
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        counted = {}
        for path in files:
            records = count_file(path, stop.is_set)
            if records is None:
                return
            counted[path] = records
            remember({path: records})
        log.debug(f"counted {sum(counted.values()):,} records of {len(counted)} {what} file(s) while training")

    thread = threading.Thread(target=count_each, name="tfx_hydra-record-count", daemon=True)
    atexit.register(lambda: (stop.set(), thread.join(timeout=10)))
    thread.start()
