"""data.cache=auto: memory when the decoded splits fit the budget, a file cache when they do not, off when
neither has room; an explicit memory cache that cannot fit fails before training. Budgets are set small
by config (a few KiB for a folder of tiny images): the decision is the same arithmetic at any size."""

from __future__ import annotations

import gc
import logging
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.unit.test_data_sources import write_images
from tfx_hydra.data import cache, csv, image_folder
from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import require_size

EXAMPLE = 8 * 8 * 3 + 8  # an 8x8 RGB image cached as uint8, and its int64 label


@pytest.fixture
def pets(tmp_path):
    return write_images(tmp_path / "pets", {"cats": [(12, 10)] * 25, "dogs": [(10, 12)] * 25})


def every_batch(dataset) -> np.ndarray:
    return np.concatenate([x.numpy() for x, _ in dataset])


def test_sizes_read_as_typed_and_a_bad_one_names_its_key():
    assert require_size("data.cache_budget", "64MiB") == 64 * 2**20
    assert require_size("data.cache_budget", "1.5GB") == 1_500_000_000
    assert require_size("data.cache_budget", 4096) == 4096
    with pytest.raises(ConfigError, match=r"(?s)data.cache_budget=lots is not a size: expected a number of bytes with "
                                          r"a unit \(512MiB, 4GiB\) or auto.*Fix: data.cache_budget=2GiB"):
        require_size("data.cache_budget", "lots")
    with pytest.raises(ConfigError, match=r"data.cache=0: expected auto, memory, false, or a cache file's path"):
        cache.check_options(0, "auto", None)


def test_splits_that_fit_the_budget_are_cached_in_memory_as_uint8_and_scaled_after(pets):
    data = image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache_budget="64KiB")
    counts = data.num_train + data.num_validation + data.num_test
    assert data.cache == (f"cache: memory, {cache.sized(counts * EXAMPLE)} of 64.0 KiB (data.cache_budget=64KiB)")
    x = every_batch(data.test)
    assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1.0 and x.max() > 0.5  # scaled after the cache


def test_splits_larger_than_the_budget_are_cached_on_disk_and_the_files_go_with_the_pipelines(pets, tmp_path):
    in_memory = image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache_budget="64KiB")
    scratch = tmp_path / "scratch"
    data = image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache_budget="4KiB", cache_dir=str(scratch))
    assert data.cache.startswith(f"cache: disk under {scratch}, ") and "does not fit 4.0 KiB of memory" in data.cache
    np.testing.assert_array_equal(every_batch(data.test), every_batch(in_memory.test))  # the same examples
    (folder,) = scratch.iterdir()
    assert {p.name.split(".")[0] for p in folder.iterdir()} >= {"test"}  # tf.data's cache files, per split
    del data
    gc.collect()
    assert not folder.exists()  # the run's scratch, not left for another run to read stale


def test_no_room_in_memory_nor_on_disk_is_no_cache_said_with_the_fix(pets, tmp_path, monkeypatch):
    # a full disk cannot be made here: the free space is what shutil reports (injected, said so)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 100))
    data = image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache_budget="4KiB",
                        cache_dir=str(tmp_path / "full"))
    assert data.cache.startswith("cache: off: ") and f"{tmp_path / 'full'} has 100 B free" in data.cache
    assert data.cache.endswith("data.cache_dir=/scratch/x caches on disk")
    assert len(every_batch(data.train)) == data.num_train


def test_an_explicit_memory_cache_that_cannot_fit_fails_before_training(pets):
    with pytest.raises(DataError, match=r"(?s)data.cache=memory: the decoded splits take 9.8 KiB \(train 7.0 KiB\) "
                                        r"and the shuffle buffer .* more than the budget of 4.0 KiB "
                                        r"\(data.cache_budget=4KiB\)"
                                        r".*Fix: data.cache=auto \(on disk when memory cannot hold it\)"):
        image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache="memory", cache_budget="4KiB",
                     shuffle_buffer=0)


def test_the_shuffle_buffer_is_shortened_to_its_share_of_the_budget(pets, caplog):
    caplog.set_level(logging.INFO, logger="tfx_hydra")
    data = image_folder(str(pets), [8, 8, 3], 2, batch_size=8, seed=0, cache=False, cache_budget="4KiB")
    # a quarter of 4 KiB holds 5 examples of 200 bytes: the buffer (2,048 asked) shrinks to that, and says so
    assert "shuffle buffer 2,048 -> 5 examples (1000 B: a quarter of the cache budget 4.0 KiB" in caplog.text
    assert data.cache == "cache: off (data.cache=false)"
    first = every_batch(data.train)
    data.order.set_epoch(1)  # as the trainer does when the next epoch begins
    second = every_batch(data.train)
    assert len(first) == data.num_train and not np.array_equal(first, second)  # every example, reshuffled
    np.testing.assert_allclose(np.sort(first.ravel()), np.sort(second.ravel()))


def test_in_memory_tables_are_cached_when_they_fit_and_read_from_the_arrays_when_not(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n" + "".join(f"{i},{i % 5},{i % 2}\n" for i in range(60)))
    fits = csv(str(path), "label", [2], 2, batch_size=8, seed=0)
    assert fits.cache.startswith("cache: memory, ") and _cached(fits.train)  # a cached split trains faster
    short = csv(str(path), "label", [2], 2, batch_size=8, seed=0, cache_budget="1000B")  # the table fits, not the cache
    assert short.cache.startswith("cache: off: ") and short.cache.endswith("the arrays are read from memory")
    assert not _cached(short.train)  # never a file cache of arrays already in memory


def _cached(dataset) -> bool:
    """Whether a CacheDataset is among a pipeline's steps (its graph, with the functions the training split's
    epoch order reads it in)."""
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=dataset._variant_tensor, external_state_policy=1)  # 1: ignore
    return b"CacheDataset" in graph.numpy()


def test_the_budget_is_half_the_memory_available_shared_by_a_parallel_launchers_jobs(monkeypatch):
    monkeypatch.setattr(cache, "available_memory", lambda: 8 * 2**30)
    assert cache.budget("auto") == (4 * 2**30, "half of 8.0 GiB available")
    monkeypatch.setattr(cache, "processes_on_this_machine", lambda: 4)
    assert cache.budget("auto") == (2**30, "half of 8.0 GiB available, shared by 4 parallel jobs")
    monkeypatch.undo()
    import psutil

    assert 0 < cache.available_memory() <= psutil.virtual_memory().total
    assert cache.processes_on_this_machine() == 1  # outside a Hydra job
