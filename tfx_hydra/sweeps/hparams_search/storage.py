"""The study's storage: an SQLite file, a database server or a journal file, opened with the error a
user can act on, and kept open for the trials that follow in the same process."""

from __future__ import annotations

import functools
import os
import time

from tfx_hydra.settings.checks import require_sqlite_file
from tfx_hydra.settings.errors import ConfigError
from tfx_hydra.sweeps.hparams_search.settings import is_url
from tfx_hydra.tracking import mask_uri


def open_storage(url: str):
    """The Optuna storage behind `url`: a database (RDB) or a journal file; unreachable ones fail
    here, with the URL (password masked) and the way out. A file's (SQLite, journal) is opened once
    per process and file: a search's trials in one process (the basic launcher, a worker) share it,
    where opening an RDB storage afresh reads Optuna's schema migrations each time (~20 ms a trial).
    A file replaced or removed since (its inode changed) is opened anew, so nothing is written into a
    file that is gone. A database server's is opened each time: it may have restarted in between."""
    path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else None if is_url(url) else url
    if url.startswith("sqlite:///"):
        require_sqlite_file("hparams_search.storage", path, "Optuna study", ("studies", "trials"))
    if path is None:  # a database server's
        return _open_storage(url)
    try:
        found = os.stat(path)
    except OSError:  # created now: opened anew until the file exists
        return _open_storage(url)
    return _opened_storage(url, (found.st_dev, found.st_ino))


@functools.lru_cache(maxsize=4)
def _opened_storage(url: str, file: tuple[int, int]):
    """`url`'s storage, for the file `file` (device, inode) names."""
    return _open_storage(url)


def _open_storage(url: str):
    """`url`'s storage, opened (an error is not cached: the next call tries again)."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        if not is_url(url):
            return JournalStorage(JournalFileBackend(url))
        engine_kwargs = {"connect_args": {"connect_timeout": 5}} if url.startswith("postgresql") else {}
        for attempt in range(5):
            try:
                return RDBStorage(url, engine_kwargs=engine_kwargs)
            except Exception as err:  # noqa: BLE001
                # two commands creating a fresh database's tables at once: the later one's schema
                # migration collides with the first's (alembic_version); once they exist, it opens
                if attempt == 4 or not any(s in str(err) for s in ("alembic_version", "already exists", "locked")):
                    raise
                time.sleep(0.5 + attempt)
    except (ImportError, ModuleNotFoundError) as err:
        raise ConfigError(f"hparams_search.storage={mask_uri(url)} needs a database driver that is not installed: "
                          f"{err}.", fix="pip install 'psycopg[binary]' (PostgreSQL: SQLAlchemy 2.1 drives it "
                          "by default) or pymysql (MySQL)") from None
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's and the driver's errors, said as one line
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise ConfigError(f"hparams_search.storage={mask_uri(url)} cannot be reached: {reason}",
                          fix="start the database (or correct the URL), or drop hparams_search.storage to keep the "
                          "study in an SQLite file in the launch directory") from None
