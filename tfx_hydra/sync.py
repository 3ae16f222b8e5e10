"""`python -m tfx_hydra.sync <run output dir>`: send what a run could not send to MLflow.

When the tracking server goes away in the middle of a run, training goes on and every record
MLflow did not take is kept in `<output dir>/mlflow_offline/` (tracking/journal.py). Once the
server is back, this replays them into the same MLflow run; run again after a new
interruption, it continues where it stopped and never sends a record twice.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tfx_hydra.console import use_terminal
from tfx_hydra.errors import TfxHydraError
from tfx_hydra.tracking import replay_journal

log = logging.getLogger("tfx_hydra.sync")  # by name: run as `python -m`, __name__ is "__main__"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfx_hydra.sync", description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="the run's output dir (its summary and the warning print it)")
    parser.add_argument("--tracking-uri", help="the server's address, if it moved since the run")
    args = parser.parse_args(argv)
    use_terminal()
    try:
        sent = replay_journal(args.output_dir, args.tracking_uri)
    except TfxHydraError as err:
        log.error(str(err))
        return 1
    log.info(f"sent {sent} record(s) to MLflow; nothing is left to sync in {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
