"""faults: a full disk said once, and any error said as one line for a run's `error` tag.

h5py, TensorFlow and MLflow wrap the OSError of a full disk in their own errors; `as_disk_full`
finds it under any of them and says where it happened and where else the run's files can go.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
from contextlib import contextmanager
from typing import Iterator

from tfx_hydra.errors import DiskFull

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "database or disk is full")


def full_disk_path(err: BaseException | None) -> str | None:
    """The path a disk-full error was writing ("" when it does not say), or None if `err` (or what
    caused it: h5py, TensorFlow and MLflow wrap the OSError) is not a full disk."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return str(err.filename2 or err.filename or "")
        if any(text in str(err) for text in DISK_FULL_TEXTS):
            return str(getattr(err, "filename", None) or "")
        err = err.__cause__ or err.__context__
    return None


def as_disk_full(err: BaseException, where: str) -> BaseException:
    """`err` as one DiskFull error if it is a full disk (at its own path, or `where` when it names
    none); `err` itself otherwise."""
    if isinstance(err, DiskFull):
        return err
    path = full_disk_path(err)
    return err if path is None else disk_full_error(path or where)


@contextmanager
def disk_full_said(where: str) -> Iterator[None]:
    """Inside the block, a full disk is raised as one DiskFull error (see as_disk_full). File
    objects the failed write left half-open (h5py's) are closed now, not at interpreter exit."""
    try:
        yield
    except Exception as err:
        said = as_disk_full(err, where)
        if said is err:
            raise
        gc.collect()
        raise said from None


def disk_full_error(path: str) -> DiskFull:
    """Where it happened, how much is free there, and where else the run's files can go."""
    folder = os.path.abspath(path or ".")
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    usage = shutil.disk_usage(folder)
    mount = folder
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    return DiskFull(f"no space left on the disk writing {path or folder} ({sized(usage.free)} free of "
                    f"{sized(usage.total)} on {mount}); the run stopped, and the backup of its last completed epoch "
                    "(if one was written) is kept whole.",
                    fix=f"free space on {mount}, or write elsewhere: hydra.run.dir=/bigger/disk/outputs (the run's "
                    "files and backup), export.<name>.export_dir=..., data.cache=..., tracking.uri=... and "
                    "tracking.artifact_location=... (the MLflow store and its artifacts)")


def sized(count: float) -> str:
    """Bytes as a person reads them, in powers of 1024: 300.0 KiB, 1.2 GiB, 100 B (a full disk, a cache)."""
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            break
        count /= 1024
    return f"{count:.0f} B" if unit == "B" else f"{count:.1f} {unit}"


def describe_error(err: BaseException) -> str:
    """'Kind: message', once (our errors already start with their kind)."""
    text = str(err)
    return text if text.startswith(f"{type(err).__name__}:") else f"{type(err).__name__}: {text}"
