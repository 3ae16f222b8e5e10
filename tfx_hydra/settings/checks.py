"""checks: the one vocabulary of checks, as Keras' `validate_*` helpers are one.

Each kind of mistake has one wording a user learns once, whichever module finds it:

    require_choice       data.normalization=zscore is not one of: standard, minmax, none.
    require_bool         export.strict=yes: expected true or false.
    require_known_keys   unknown key 'trainer.epoch'. Valid keys in 'trainer': epochs, batch_size, ...
    require_positive     trainer.epochs=-1 is out of range: expected a positive integer.
    require_non_negative trainer.finetune_epochs=-2 is out of range: expected 0 (off) or more.
    require_positive_or_null data.limit=0 is out of range: expected a positive integer, or null (every example).
    require_range        optimizer.momentum=1.5 is out of range: expected a number [0, 1].
    require_fraction     data.validation_split=1.5 is out of range: expected a fraction between 0 and 1.
    require_size         data.cache_budget=lots is not a size: expected a number of bytes with a unit ...
    require_interval     trainer.log_every=soon is not an interval: expected a duration (90s, 5min, 1h), ...
    require_batch_span   trainer.tensorboard_profile_batches=[5, 2]: expected [first, last] batch numbers ...
    require_path         data.path=/x/mnist.npz does not exist.
    require_writable_folder  data.cache=/x/cache cannot be written: /x does not exist.
    require_target       trainer.callbacks[0]=3 is not a node with a _target_.
    require_sqlite_file  tracking.uri: /x/mlflow.db is not an SQLite database (file is not a database), ...

Every message names the key, echoes the value as it is typed in an override, says what was
expected, and carries the override that fixes it. Nothing here imports more than errors.py: the
schemas, the data sources, the models and the search all use it before TensorFlow is loaded.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterable, Sequence

from tfx_hydra.errors import ConfigError, DataError, TfxHydraError, show


def require_choice(key: str, value: Any, choices: Sequence[Any], fix: Any = None) -> None:
    """`value` is one of `choices` (the fix: `fix`, or the first choice)."""
    if value not in choices:
        allowed = ", ".join(show(c) for c in choices)
        raise ConfigError(f"{key}={show(value)} is not one of: {allowed}.",
                          fix=f"{key}={show(choices[0] if fix is None else fix)}")


def require_bool(key: str, value: Any, fix: bool = False) -> None:
    """A switch: true or false, never a string such as `yes` that would read as true."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={show(value)}: expected true or false.", fix=f"{key}={show(fix)}")


def require_known_keys(section: str, given: Iterable[str], known: Sequence[str]) -> None:
    """Every key of `section` is one it has (a misspelt key would otherwise be ignored, or fail deep)."""
    unknown = [key for key in given if key not in known]
    if unknown:
        key = f"{section}.{unknown[0]}"
        raise ConfigError(f"unknown key '{key}'. Valid keys in '{section}': {', '.join(known)}.",
                          fix=f"check the spelling of '{key}'")


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def require_positive(key: str, value: Any, example: Any, integer: bool = True, unit: str = "") -> None:
    """An integer >= 1 (`integer=False`: any number > 0; `unit`: what the number counts, e.g. seconds)."""
    kind = "a positive integer" if integer else "a number > 0"
    well_typed = _is_integer(value) if integer else _is_number(value)
    if not well_typed or value <= 0:
        problem = "is out of range" if well_typed else "is not a number"
        raise ConfigError(f"{key}={show(value)} {problem}: expected {kind}{f' ({unit})' if unit else ''}.",
                          fix=f"{key}={example}")


def require_positive_or_auto(key: str, value: Any, example: int) -> None:
    """A positive integer, or `auto` (a value the hardware profile fills in)."""
    if value == "auto":
        return
    if not _is_integer(value):
        raise ConfigError(f"{key}={show(value)} is not a positive integer or auto.", fix=f"{key}={example}")
    if value <= 0:
        raise ConfigError(f"{key}={value} is out of range: expected a positive integer or auto.",
                          fix=f"{key}={example}")


def require_non_negative(key: str, value: Any, zero_means: str | None = None, example: Any = 0) -> None:
    """An integer >= 0, where 0 may have a meaning of its own (`zero_means`: "off", "TensorFlow's choice")."""
    if not _is_integer(value) or value < 0:
        zero = f"0 ({zero_means})" if zero_means else "0"
        raise ConfigError(f"{key}={show(value)} is out of range: expected {zero} or more.",
                          fix=f"{key}={example}")


def require_positive_or_null(key: str, value: Any, example: Any, null_means: str) -> None:
    """An integer >= 1, or null with a meaning of its own (`null_means`: "every batch", "all of them")."""
    if value is not None and (not _is_integer(value) or value < 1):
        raise ConfigError(f"{key}={show(value)} is out of range: expected a positive integer, or null "
                          f"({null_means}).", fix=f"{key}={example}")


def require_range(key: str, value: Any, low: float, high: float | None, example: Any,
                  low_inclusive: bool = True, high_inclusive: bool = True) -> None:
    """A number between `low` and `high` (None: no upper bound), each end in or out."""
    if not _is_number(value):
        raise ConfigError(f"{key}={show(value)} is not a number.", fix=f"{key}={example}")
    inside = ((value > low or (low_inclusive and value == low))
              and (high is None or value < high or (high_inclusive and value == high)))
    if not inside:
        opening, closing = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
        bounds = (f"{opening}{low:g}, {high:g}{closing}" if high is not None
                  else f"{'>=' if low_inclusive else '>'} {low:g}")
        raise ConfigError(f"{key}={show(value)} is out of range: expected a number {bounds}.", fix=f"{key}={example}")


def require_fraction(key: str, value: Any, example: Any = 0.1) -> None:
    """A share strictly between 0 and 1 (a split of the data)."""
    if not _is_number(value) or not 0.0 < value < 1.0:
        raise ConfigError(f"{key}={show(value)} is out of range: expected a fraction between 0 and 1.",
                          fix=f"{key}={example}")


DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def require_interval(key: str, value: Any, example: str = "5min") -> tuple[float | None, int | None]:
    """(seconds, steps) of an interval typed as a duration (90s, 5min, 1h) or a number of steps (500);
    (None, None) for null or 0: off."""
    if value is None or value == 0:
        return None, None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return None, value
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]+)\s*", str(value).lower())
    if not found or found.group(2) not in DURATION_UNITS or float(found.group(1)) <= 0:
        raise ConfigError(f"{key}={show(value)} is not an interval: expected a duration (90s, 5min, 1h), a number of "
                          "steps (500), or null (off).", fix=f"{key}={example}")
    return float(found.group(1)) * DURATION_UNITS[found.group(2)], None


def require_batch_span(key: str, value: Sequence[int] | None, example: str) -> None:
    """[first, last] batch numbers, 1 <= first <= last; null: none."""
    if value is not None and (len(value) != 2 or not 1 <= value[0] <= value[1]):
        raise ConfigError(f"{key}={list(value)}: expected [first, last] batch numbers with 1 <= first <= last.",
                          fix=f"{key}={example}")


SIZE_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
              "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def require_size(key: str, value: Any, example: str = "2GiB") -> int:
    """A byte count as typed: 64MiB, 2GB, 1.5GiB, or a number of bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return int(value)
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not found or found.group(2).lower() not in SIZE_UNITS or float(found.group(1)) <= 0:
        raise ConfigError(f"{key}={show(value)} is not a size: expected a number of bytes with a unit (512MiB, 4GiB) "
                          "or auto.", fix=f"{key}={example}")
    return int(float(found.group(1)) * SIZE_UNITS[found.group(2).lower()])


def require_path(key: str, value: str, fix: str, file: bool = False) -> None:
    """A file (`file=True`) or folder that exists: a DataError, since the config's shape is right and
    the disk is not."""
    found = os.path.isfile(value) if file else os.path.exists(value)
    if value and not found and value.startswith("~"):  # quoted past the shell: a path, not a home folder
        raise DataError(f"{key}={value} does not exist: a ~ in a value is a plain character, not your home "
                        "folder.", fix=f"{key}=$HOME{value[1:]}" if value.startswith("~/") else fix)
    if not value or not found:
        raise DataError(f"{key}={value} does not exist.", fix=fix)


def require_writable_folder(key: str, value: str, folder: str, create: bool) -> None:
    """`folder` (where `key`=`value` writes) exists and is writable, or (create=True) its nearest
    existing parent is a writable folder: a typo in a path must not surface after the last epoch."""
    path = os.path.abspath(os.path.expanduser(folder))
    existing = path
    while create and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if os.path.exists(existing) else "does not exist"
        raise ConfigError(f"{key}={value} cannot be written: {existing} {what}.", fix=f"{key}=<a writable folder>")
    if not os.access(existing, os.W_OK):
        raise ConfigError(f"{key}={value} cannot be written: {existing} is not writable.",
                          fix=f"{key}=<a writable folder>")


def require_made_folder(key: str, value: str, folder: str, fix: str | None = None) -> None:
    """`folder` (where `key`=`value` writes) made now if it is not there yet: a path the system will not let
    be created (under /proc, under a file, without the right) is one error naming it, not a traceback from
    the first write."""
    try:
        os.makedirs(os.path.abspath(os.path.expanduser(folder)), exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{key}={value} cannot be written: {err.filename or folder} cannot be created "
                          f"({err.strerror}).", fix=fix or f"{key}=<a path in a folder you can write>") from None
    require_writable_folder(key, value, folder, create=False)


def require_target(key: str, value: Any, example: str, allow_name: bool = False, named: bool = False) -> None:
    """A `_target_` node (`allow_name`: or a library's name for it; `named`: with the `name` it is
    logged under)."""
    if allow_name and isinstance(value, str):
        return
    if not isinstance(value, dict) or not isinstance(value.get("_target_"), str):
        raise ConfigError(f"{key}={show(value)} is not " + ("a name or " if allow_name else "")
                          + "a node with a _target_.", fix=f"{key}={example}")
    if named and not isinstance(value.get("name"), str):
        raise ConfigError(f"{key} ({value['_target_']}) has no name: a metric is logged, monitored and swept by "
                          "its name.", fix=f"{key}={example}")


def require_sqlite_file(key: str, path: str, what: str, tables: Sequence[str] = (),
                        error: type[TfxHydraError] = ConfigError) -> None:
    """An SQLite file that exists is a database, and `what` (an MLflow store, an Optuna study) if it has
    tables: opened read-only, so nothing is written into a file that is not what the key says. `error`:
    the kind of mistake the caller reports it as (a store is a TrackingError)."""
    import sqlite3

    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return  # none yet: it is created
    fix = (f"move it aside (mv {path} {path}.broken) to start a new {what} there, or point {key} at the right "
           "file")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            found = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as err:
        if os.path.exists(f"{path}-journal") and "readonly" in str(err):  # SQLITE_READONLY_ROLLBACK: a writer
            return  # killed mid-transaction left its hot journal; the store's own connection rolls it back
        raise error(f"{key}: {path} is not an SQLite database ({err}), so it cannot be the {what}; nothing "
                          "was written into it.", fix=fix) from None
    missing = [table for table in tables if table not in found]
    if found and missing:
        raise error(f"{key}: {path} is an SQLite database, but not an {what} (it has no '{missing[0]}' "
                          "table); nothing was written into it.", fix=fix)
