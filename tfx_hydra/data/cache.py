"""data.cache: where a streamed source keeps its decoded examples between epochs, decided once per run
before training and said on the data line.

    auto     in memory when every cached split plus the shuffle buffer fits data.cache_budget; else in a
             file under data.cache_dir (or the local temporary folder) when the disk has room; else off
    memory   in memory (true says the same); a split that cannot fit the budget is a DataError before
             training, not an out-of-memory kill in the middle of an epoch
    a path   a file cache per split (<path>.train, ...), as tf.data's cache(filename) writes it
    false    nothing kept: every epoch decodes again

The budget (`auto`) is half the memory available when the data step starts -- the smaller of the
machine's and the cgroup's (a Slurm job, a container) -- shared among the processes a parallel launcher
runs on this machine at once. A split's decoded size is its example count times the bytes of one example
as cached: known from the element spec for fixed-shape tensors, measured on the first examples for
strings and ragged shapes. In-memory sources (arrays, tables) are cached in memory too when they fit: a
cached split trains faster than slices of the arrays (the seed MLP: 27k vs 22k ex/s, bench/README.md) at
the cost of one copy; when they do not fit, they are read from the arrays, never from a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import logging
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.process.faults import sized
from tfx_hydra.settings.checks import require_size

log = logging.getLogger(__name__)
MEMORY_SHARE = 0.5  # of the memory available at the start: the rest is the model's, the batches' and Python's
SHUFFLE_SHARE = 0.25  # of the budget the shuffle buffer may take before it is shortened
DISK_ROOM = 1.1  # a file cache needs its size and a tenth more free on its disk
MEASURED_EXAMPLES = 64  # examples read to measure strings and ragged shapes


@dataclass(frozen=True)
class CachePlan:
    """What a source's splits do with data.cache, and the one line that says why."""

    where: dict[str, str | None]  # split -> "memory", a cache file's path, or None (off)
    shuffle_buffer: int  # examples, after the budget had its say
    said: str  # the data line's "cache: ..." part
    scratch: str | None = None  # the folder `auto` made for its file cache: removed with the pipelines


def without(plan: CachePlan, split: str, said: str) -> CachePlan:
    """`plan` with `split` not cached (read elsewhere: tf.data service's workers), `said` on the data line."""
    return dataclasses.replace(plan, where={**plan.where, split: None}, said=f"{plan.said}; {said}")


def check_options(cache: Any, budget: Any, cache_dir: Any) -> None:
    """The three keys as typed (PipelineOptions checks them before TensorFlow)."""
    if not (isinstance(cache, bool) or (isinstance(cache, str) and cache)):
        raise ConfigError(f"data.cache={cache}: expected auto, memory, false, or a cache file's path.",
                          fix="data.cache=auto")
    if budget != "auto":
        require_size("data.cache_budget", budget)
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise ConfigError(f"data.cache_dir={cache_dir!r}: expected a folder or null.", fix="data.cache_dir=/scratch")


def available_memory() -> int:
    """Bytes this process may still take: the machine's available memory, or the cgroup's room if smaller."""
    import psutil

    room = psutil.virtual_memory().available
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (f"{v1}limit_in_bytes", f"{v1}usage_in_bytes")):
        try:
            with open(limit) as cap, open(usage) as used:
                text = cap.read().strip()
                if text != "max" and int(text) < 2**60:
                    room = min(room, int(text) - int(used.read().strip()))
            break
        except (OSError, ValueError):
            continue
    return max(0, room)


def processes_on_this_machine() -> int:
    """Runs a parallel launcher starts side by side here (joblib's n_jobs, submitit_local's parallelism);
    each gets its share of the budget. 1 outside a Hydra job and under launchers that spread jobs out."""
    try:
        from hydra.core.hydra_config import HydraConfig

        launcher = HydraConfig.get().launcher
    except Exception:  # not inside a Hydra job (a test's compose, a user's own call)
        return 1
    target = str(launcher.get("_target_", ""))
    if "joblib" in target:
        jobs = launcher.get("n_jobs") or 1
        return (os.cpu_count() or 1) if jobs < 0 else int(jobs)
    if "LocalLauncher" in target and "submitit" in target:
        return int(launcher.get("array_parallelism") or 1)
    return 1


def budget(value: Any) -> tuple[int, str]:
    """(bytes, how they were chosen) for data.cache_budget."""
    if value != "auto":
        size = require_size("data.cache_budget", value)
        return size, f"data.cache_budget={value}"
    room, sharing = available_memory(), processes_on_this_machine()
    size = int(room * MEMORY_SHARE / sharing)
    shared = f", shared by {sharing} parallel jobs" if sharing > 1 else ""
    return size, f"half of {sized(room)} available{shared}"


def example_bytes(dataset) -> int:
    """Bytes one cached example takes: from the element spec when every shape is fixed, else measured."""
    import numpy as np
    import tensorflow as tf

    specs = tf.nest.flatten(dataset.element_spec)
    if all(s.shape.is_fully_defined() and s.dtype != tf.string for s in specs):
        return sum(int(np.prod(s.shape)) * s.dtype.size for s in specs)
    total, count = 0, 0
    for element in dataset.take(MEASURED_EXAMPLES):
        count += 1
        for value in tf.nest.flatten(element):
            total += (int(tf.reduce_sum(tf.strings.length(value))) + 16 * int(tf.size(value))
                      if value.dtype == tf.string else int(tf.size(value)) * value.dtype.size)
    return -(-total // max(count, 1))


def plan(options, splits: dict[str, tuple[Any, int]], in_memory: bool = False) -> CachePlan:
    """Where each split is cached. `splits`: name -> (the parsed, unbatched dataset, its example count: None
    for a user's pipeline of unknown length, which `auto` does not cache)."""
    cache = options.cache
    each = {name: example_bytes(dataset) for name, (dataset, _) in splits.items()}
    allowed, how = budget(options.cache_budget)
    shuffle = shuffled_examples(options, each["train"], allowed)
    if cache is False:
        return CachePlan(dict.fromkeys(splits), shuffle, "cache: off (data.cache=false)")
    if isinstance(cache, str) and cache not in ("auto", "memory"):
        return CachePlan({name: f"{cache}.{name}" for name in splits}, shuffle, f"cache: files {cache}.<split>")
    unknown = [name for name, (_, count) in splits.items() if count is None]
    if unknown:  # a user's pipeline that does not know its length: whether it fits cannot be told before training
        said = f"the {' and '.join(unknown)} pipeline{'s' if len(unknown) > 1 else ''} of unknown length"
        if cache in (True, "memory"):
            raise DataError(f"data.cache=memory: {said} may not fit the budget of {sized(allowed)} ({how}), and "
                            "cannot be measured before training.",
                            fix="data.cache=/local/scratch/cache (on disk), data.cache=auto (off), or give the "
                            "pipeline its length: dataset.apply(tf.data.experimental.assert_cardinality(N))")
        return CachePlan(dict.fromkeys(splits), shuffle, f"cache: off: {said} (data.cache=/scratch/x caches on disk)")
    sizes = {name: each[name] * count for name, (_, count) in splits.items()}
    total = sum(sizes.values())
    needed = total + shuffle * each["train"]
    if needed <= allowed:
        return CachePlan(dict.fromkeys(splits, "memory"), shuffle, f"cache: memory, {sized(total)} of {sized(allowed)} "
                         f"({how})")
    if in_memory and cache == "auto":  # a file cache of arrays in memory would only be slower
        return CachePlan(dict.fromkeys(splits), shuffle, f"cache: off: {sized(total)} does not fit {sized(allowed)} "
                         f"of memory ({how}); the arrays are read from memory")
    if cache in (True, "memory"):
        raise DataError(f"data.cache=memory: the decoded splits take {sized(total)} (train {sized(sizes['train'])}) "
                        f"and the shuffle buffer {sized(shuffle * each['train'])}, more than the budget of "
                        f"{sized(allowed)} ({how}).",
                        fix="data.cache=auto (on disk when memory cannot hold it), data.cache=/local/scratch/cache, "
                        "or a larger data.cache_budget if the memory is there")
    folder = options.cache_dir or tempfile.gettempdir()
    free = disk_free(folder)
    if free is not None and total * DISK_ROOM <= free:
        scratch = tempfile.mkdtemp(prefix="tfx_hydra-cache-", dir=folder)
        return CachePlan({name: os.path.join(scratch, name) for name in splits}, shuffle,
                         f"cache: disk under {folder}, {sized(total)} decoded does not fit {sized(allowed)} of memory "
                         f"({how})", scratch)
    room = f"{folder} has {sized(free)} free" if free is not None else f"{folder} cannot be written"
    return CachePlan(dict.fromkeys(splits), shuffle,
                     f"cache: off: {sized(total)} decoded fits neither {sized(allowed)} of memory ({how}) nor disk "
                     f"({room}); data.cache_dir=/scratch/x caches on disk")


def shuffled_examples(options, each: int, allowed: int) -> int:
    """data.shuffle_buffer, shortened to SHUFFLE_SHARE of the budget when its examples are that large
    (2,048 images of 224x224x3 in float32 are 1.2 GiB); said when it is."""
    wanted = options.shuffle_buffer
    fits = max(1, int(allowed * SHUFFLE_SHARE // max(each, 1)))
    if wanted > fits:
        log.info(f"data: shuffle buffer {wanted:,} -> {fits:,} examples ({sized(fits * each)}: a quarter of the "
                 f"cache budget {sized(allowed)}; data.cache_budget raises it)")
        return fits
    return wanted


def disk_free(folder: str) -> int | None:
    try:
        os.makedirs(folder, exist_ok=True)
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def remove_with(dataset, prefix: str, scratch: str) -> None:
    """`auto`'s file cache is the run's scratch: a split's files are removed once the pipeline reading them
    is gone (the run over, a search's trial done) or at exit, and the folder with the last of them; never
    read by another run (a cache left behind would be read stale)."""
    weakref.finalize(dataset, _remove_split, prefix, scratch)


def _remove_split(prefix: str, scratch: str) -> None:
    for path in glob.glob(glob.escape(prefix) + "*"):
        with contextlib.suppress(OSError):
            os.remove(path)
    with contextlib.suppress(OSError):
        os.rmdir(scratch)  # only once empty: the other splits' files may still be read
