"""A real PostgreSQL server for the team-setup test: Debian's `postgresql` binaries, a fresh cluster
in a temporary folder, password authentication on 127.0.0.1 and a free port.

.ci/run installs the package; without it the test that needs it is skipped, unless
TFX_HYDRA_REQUIRE_POSTGRES=1 (CI sets it once the install worked) turns the skip into a failure.
PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import free_ports

USER, PASSWORD = "tfx", "tfx-secret-pw"


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl (they are not on PATH in Debian's package)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def require_binaries() -> Path:
    folder = binaries()
    if folder is None:
        if os.environ.get("TFX_HYDRA_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required here (TFX_HYDRA_REQUIRE_POSTGRES=1) but initdb/pg_ctl are missing")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)")
    return folder


def _as_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres_server(databases: tuple[str, ...]) -> Iterator[str]:
    """A running server with `databases` made; yields the URL prefix postgresql://tfx:...@127.0.0.1:PORT/."""
    folder = require_binaries()
    home = Path(tempfile.mkdtemp(prefix="tfx_hydra_pg_"))  # not under pytest's tmp: the postgres user must enter it
    data, password_file = home / "data", home / "password"
    password_file.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
        shutil.chown(password_file, "postgres")
    (port,) = free_ports(1)
    subprocess.run(_as_owner([str(folder / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                              f"--pwfile={password_file}", "-E", "UTF8"]), check=True, capture_output=True)
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(_as_owner([str(folder / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-t", "60",
                              "-l", str(home / "server.log"), "start"]), check=True, capture_output=True)
    env = dict(os.environ, PGPASSWORD=PASSWORD)
    try:
        for name in databases:
            subprocess.run([str(folder / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, name],
                           check=True, capture_output=True, env=env)
        yield f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/"
    finally:
        subprocess.run(_as_owner([str(folder / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)
