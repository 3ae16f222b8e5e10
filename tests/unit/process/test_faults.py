"""faults: a full disk is recognised under any library's error and said once."""

from __future__ import annotations

import errno

import pytest

from tfx_hydra.errors import DiskFull
from tfx_hydra.process import disk_full_error, full_disk_path
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.tracking import tracked_run


def test_a_full_disk_is_recognised_through_the_errors_libraries_wrap_it_in(tmp_path):
    raw = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "backup" / "latest.weights.h5"))
    try:
        try:
            raise raw
        except OSError as err:
            raise RuntimeError("Unable to synchronously write (file write failed)") from err
    except RuntimeError as wrapped:
        assert full_disk_path(wrapped) == str(tmp_path / "backup" / "latest.weights.h5")
    assert full_disk_path(RuntimeError("(sqlite3.OperationalError) database or disk is full")) == ""
    assert full_disk_path(OSError(errno.EACCES, "Permission denied")) is None
    error = disk_full_error(str(tmp_path / "backup" / "latest.weights.h5"))
    assert isinstance(error, DiskFull) and " free of " in error.message and "hydra.run.dir=" in error.fix


def test_a_full_disk_is_one_message_with_tracking_off_too(tmp_path):
    with pytest.raises(DiskFull, match=rf"no space left on the disk writing {tmp_path}/out/plots/a.png \("):
        with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}, offline_dir=str(tmp_path / "x")):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "plots" / "a.png"))
    with pytest.raises(ValueError, match="not a disk"):  # anything else goes through as it came
        with tracked_run(TrackingConfig(enabled=False), str(tmp_path), tags={}):
            raise ValueError("not a disk")
