"""A real one-node Slurm cluster for the Slurm tests: tests/slurm/cluster.sh brings up munge, a MariaDB
for accounting, slurmdbd, slurmctld and slurmd in a temporary folder (Debian's packages, as root).

.ci/run installs the packages; without them the tests that need Slurm are skipped, unless
TFX_HYDRA_REQUIRE_SLURM=1 (CI sets it once the install worked) turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.helpers import required_or_skipped

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "slurm" / "cluster.sh"
DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct")


@dataclass
class SlurmCluster:
    conf: Path  # its slurm.conf: SLURM_CONF for every command that talks to it

    def sacct(self, attempts: bool = False) -> list[dict[str, str]]:
        """Every job and array task Slurm's accounting holds (steps left out): JobID, JobName, State. With
        `attempts`, a requeued job's every run (sacct --duplicates: the earlier ones REQUEUED), oldest first."""
        done = subprocess.run(["sacct", "--allusers", "--parsable2", "-o", "JobID,JobName,State", "-S", "2020-01-01",
                               *(["--duplicates"] if attempts else [])],
                              env={**os.environ, "SLURM_CONF": str(self.conf)}, capture_output=True, text=True,
                              check=True, timeout=30)
        header, *rows = done.stdout.splitlines()
        names = header.split("|")
        return [row for row in (dict(zip(names, line.split("|"))) for line in rows) if "." not in row["JobID"]]


def why_not_here() -> str | None:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing: apt-get install slurmctld slurmd " \
               "slurm-client slurmdbd munge mariadb-server; .ci/run does it)"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root"
    if not Path("/etc/munge/munge.key").exists():
        return "munge has no key (/etc/munge/munge.key: Debian's munge package makes it)"
    return None


def slurm_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """Up in `folder`, yielded, down again (the body of a session fixture)."""
    why = why_not_here()
    if why:
        required_or_skipped(why, "TFX_HYDRA_REQUIRE_SLURM", "Slurm")
    up = subprocess.run([str(SCRIPT), "up", str(folder)], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr + "".join(
            f"\n--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted((folder / "log").glob("*")))
        yield SlurmCluster(folder / "etc" / "slurm.conf")
    finally:
        subprocess.run([str(SCRIPT), "down", str(folder)], capture_output=True, timeout=120)
