"""The one vocabulary of checks: each kind of mistake in one wording, naming the key, echoing the value as
it is typed, saying what was expected and giving the override that fixes it."""

from __future__ import annotations

import pytest

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.settings.checks import (
    require_bool,
    require_choice,
    require_fraction,
    require_known_keys,
    require_non_negative,
    require_path,
    require_positive,
    require_positive_or_auto,
    require_range,
    require_sqlite_file,
    require_writable_folder,
)


def said(check, *args, **kwargs) -> str:
    with pytest.raises((ConfigError, DataError)) as caught:
        check(*args, **kwargs)
    return str(caught.value)


def test_each_kind_of_mistake_has_one_wording():
    assert said(require_choice, "data.kind", "audio", ("image", "dense")) == \
        "ConfigError: data.kind=audio is not one of: image, dense.\n  Fix: data.kind=image"
    assert said(require_choice, "trainer.jit_compile", None, ("auto", True, False)) == \
        "ConfigError: trainer.jit_compile=null is not one of: auto, true, false.\n  Fix: trainer.jit_compile=auto"
    assert said(require_bool, "export.strict", "yes") == \
        "ConfigError: export.strict=yes: expected true or false.\n  Fix: export.strict=false"
    assert said(require_bool, "data.check_finite", 1, fix=True).endswith("Fix: data.check_finite=true")
    assert said(require_known_keys, "data.augmentation", ["flip", "blur"], ("flip", "rotation", "zoom")) == (
        "ConfigError: unknown key 'data.augmentation.blur'. Valid keys in 'data.augmentation': flip, rotation, "
        "zoom.\n  Fix: check the spelling of 'data.augmentation.blur'")
    assert said(require_positive, "model.units", 0, 128) == \
        "ConfigError: model.units=0 is out of range: expected a positive integer.\n  Fix: model.units=128"
    assert said(require_positive, "model.units", True, 128).startswith(
        "ConfigError: model.units=true is not a number: expected a positive integer.")  # a bool is not a count
    assert said(require_positive, "tracking.connect_timeout", -1.0, 5, integer=False, unit="seconds") == (
        "ConfigError: tracking.connect_timeout=-1.0 is out of range: expected a number > 0 (seconds).\n"
        "  Fix: tracking.connect_timeout=5")
    assert said(require_positive_or_auto, "trainer.batch_size", 0, 32) == (
        "ConfigError: trainer.batch_size=0 is out of range: expected a positive integer or auto.\n"
        "  Fix: trainer.batch_size=32")
    assert said(require_positive_or_auto, "trainer.batch_size", "big", 32) == \
        "ConfigError: trainer.batch_size=big is not a positive integer or auto.\n  Fix: trainer.batch_size=32"
    assert said(require_non_negative, "trainer.finetune_epochs", -2, "off", 3) == (
        "ConfigError: trainer.finetune_epochs=-2 is out of range: expected 0 (off) or more.\n"
        "  Fix: trainer.finetune_epochs=3")
    assert said(require_range, "optimizer.momentum", 1.5, 0.0, 1.0, "0.9") == \
        "ConfigError: optimizer.momentum=1.5 is out of range: expected a number [0, 1].\n  Fix: optimizer.momentum=0.9"
    assert said(require_range, "model.dropout", 1.0, 0.0, 1.0, 0.2, high_inclusive=False).startswith(
        "ConfigError: model.dropout=1.0 is out of range: expected a number [0, 1).")
    assert said(require_range, "optimizer.learning_rate", -0.1, 0.0, None, "0.001", low_inclusive=False).startswith(
        "ConfigError: optimizer.learning_rate=-0.1 is out of range: expected a number > 0.")
    assert said(require_range, "optimizer.learning_rate", "fast", 0.0, None, "0.001") == \
        "ConfigError: optimizer.learning_rate=fast is not a number.\n  Fix: optimizer.learning_rate=0.001"
    assert said(require_fraction, "data.validation_split", 1.5) == (
        "ConfigError: data.validation_split=1.5 is out of range: expected a fraction between 0 and 1.\n"
        "  Fix: data.validation_split=0.1")


def test_values_in_range_pass():
    require_choice("data.kind", "dense", ("image", "dense"))
    require_known_keys("data.augmentation", ["flip"], ("flip", "rotation", "zoom"))
    require_positive("model.units", 1, 128)
    require_positive("tracking.connect_timeout", 0.5, 5, integer=False)
    require_positive_or_auto("trainer.batch_size", "auto", 32)
    require_non_negative("trainer.finetune_epochs", 0, "off")
    require_range("optimizer.momentum", 1.0, 0.0, 1.0, "0.9")
    require_fraction("data.validation_split", 0.5)


def test_paths_a_run_reads_and_writes_are_checked_before_it_starts(tmp_path):
    missing = tmp_path / "nope.npz"
    assert said(require_path, "data.path", str(missing), fix="data.path=/abs/path/mnist.npz", file=True) == \
        f"DataError: data.path={missing} does not exist.\n  Fix: data.path=/abs/path/mnist.npz"
    assert said(require_path, "data.path", str(tmp_path), fix="data.path=x", file=True).startswith(
        f"DataError: data.path={tmp_path} does not exist.")  # a folder where a file is read
    require_path("data.directory", str(tmp_path), fix="data.directory=x")
    assert said(require_path, "data.path", "~/no-such-file.npz", fix="x", file=True) == (  # quoted past the shell
        "DataError: data.path=~/no-such-file.npz does not exist: a ~ in a value is a plain character, not your home "
        "folder.\n  Fix: data.path=$HOME/no-such-file.npz")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert said(require_writable_folder, "data.cache", f"{a_file}/cache", str(a_file), create=False) == (
        f"ConfigError: data.cache={a_file}/cache cannot be written: {a_file} is a file.\n"
        "  Fix: data.cache=<a writable folder>")
    require_writable_folder("export.savedmodel.export_dir", "new/sub", str(tmp_path / "new" / "sub"), create=True)


def test_a_store_a_killed_writer_left_with_its_hot_journal_is_not_called_damaged(tmp_path):
    """kill -9 during a write leaves `<db>-journal`; a read-only open cannot roll it back (SQLITE_READONLY_ROLLBACK),
    which read as 'not an SQLite database' and refused the store for good (a flaky search resume showed it). The
    store's own, writable connection rolls it back; the check lets it through."""
    import shutil
    import sqlite3

    writer = sqlite3.connect(tmp_path / "live.db")
    writer.execute("CREATE TABLE experiments (x)")
    writer.executemany("INSERT INTO experiments VALUES (?)", [(i,) for i in range(100)])
    writer.commit()
    writer.execute("PRAGMA cache_size=1")  # the transaction spills into the file: its journal is needed
    writer.execute("BEGIN")
    writer.executemany("INSERT INTO experiments VALUES (?)", [(str(i) * 50,) for i in range(5000)])
    for suffix in ("", "-journal"):  # the files as a kill -9 leaves them: mid-transaction, no lock held
        shutil.copy(tmp_path / f"live.db{suffix}", tmp_path / f"killed.db{suffix}")
    writer.close()
    require_sqlite_file("tracking.uri", str(tmp_path / "killed.db"), "MLflow store", tables=["experiments"])
    reopened = sqlite3.connect(tmp_path / "killed.db")
    assert reopened.execute("SELECT count(*) FROM experiments").fetchone() == (100,)  # rolled back, whole
    reopened.close()
