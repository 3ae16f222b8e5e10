"""`python -m tfx_hydra.sync <run output dir>`: send what a run could not send to MLflow.

When the tracking server goes away in the middle of a run, training goes on and every
record MLflow did not take (params, tags, metrics with their steps and timestamps,
artifacts, the final status) is kept in `<output dir>/mlflow_offline/` in the order it was
made (tracking.OfflineJournal). Once the server is back, this replays them into the same
MLflow run. It remembers how far it got, so running it again after a new interruption
continues where it stopped and never sends a record twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tfx_hydra import console, tracking
from tfx_hydra.errors import TfxHydraError, TrackingError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfx_hydra.sync", description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="the run's output dir (its summary and the warning print it)")
    parser.add_argument("--tracking-uri", help="the server's address, if it moved since the run")
    args = parser.parse_args(argv)
    try:
        sent = sync(args.output_dir, args.tracking_uri)
    except TfxHydraError as err:
        console.console.print(str(err), markup=False)
        return 1
    console.info(f"sent {sent} record(s) to MLflow; nothing is left to sync in {args.output_dir}")
    return 0


def sync(output_dir: str, uri: str | None = None) -> int:
    """Replay the journal of `output_dir` into its MLflow run; return how many records were sent."""
    journal = tracking.OfflineJournal.open(os.path.join(output_dir, tracking.OFFLINE_DIR))
    if journal is None:
        raise TrackingError(f"{output_dir} has nothing to sync (no {tracking.OFFLINE_DIR}/ folder): "
                            "everything this run logged reached MLflow.",
                            fix="pass the output dir of the run whose summary asked for a sync")
    uri = uri or journal.uri
    tracking.check_store_reachable(uri, timeout=5.0)
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        client.get_run(journal.run_id)
    except MlflowException:
        raise TrackingError(f"run {journal.run_id} is not in the MLflow store at {tracking.mask_uri(uri)}.",
                            fix="point at the store the run started in: --tracking-uri http://host:5000") from None
    sent = 0
    for index, record in journal.pending():
        replay(client, journal, record)
        journal.mark_sent(index)
        sent += 1
    return sent


def replay(client, journal, record: dict) -> None:
    """Send one journal record as the tracker would have sent it."""
    from mlflow.entities import Metric, Param, RunTag

    run_id, op = journal.run_id, record["op"]
    if op == "log_batch":
        client.log_batch(run_id, params=[Param(k, v) for k, v in record.get("params", [])],
                         tags=[RunTag(k, v) for k, v in record.get("tags", [])],
                         metrics=[Metric(k, v, ts, step) for k, v, ts, step in record.get("metrics", [])])
    elif op == "log_artifacts":
        local = os.path.join(journal.folder, record["local"])
        if os.path.isdir(local):
            client.log_artifacts(run_id, local, record.get("artifact_path"))
        else:
            client.log_artifact(run_id, local, record.get("artifact_path"))
    elif op == "set_terminated":
        client.set_terminated(run_id, status=record["status"], end_time=record.get("end_time"))
    else:
        raise TrackingError(f"unknown record '{op}' in {journal.path}: {json.dumps(record)[:200]}",
                            fix="the journal was written by another tfx_hydra version; sync it with that one")


if __name__ == "__main__":
    sys.exit(main())
