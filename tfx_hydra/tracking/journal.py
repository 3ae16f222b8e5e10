"""journal: what MLflow did not take, kept on disk, and its replay once the store is back.

When the tracking server goes away (or its disk fills) in the middle of a run, training goes
on and every record MLflow did not take (params, tags, metrics with their steps and timestamps,
artifacts, the final status) is kept in `<output dir>/mlflow_offline/` in the order it was made.
`replay_journal` (the command `python -m tfx_hydra.sync`) sends them into the same MLflow run;
it remembers how far it got, so a second replay continues and never sends a record twice.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Iterator

from tfx_hydra.errors import TrackingError
from tfx_hydra.tracking.datasets import send_datasets
from tfx_hydra.tracking.secrets import mask_uri
from tfx_hydra.tracking.store import check_store_reachable, client_for, send_artifacts, send_batch

OFFLINE_DIR = "mlflow_offline"  # in the run's output dir


class OfflineJournal:
    """What MLflow did not take, kept on disk in order: `journal.jsonl` (one record per line),
    `run.json` (which run, which store), copies of the artifacts, and `sent` (how many records
    `python -m tfx_hydra.sync` has replayed, so a second sync continues and never repeats)."""

    def __init__(self, folder: str, run_id: str, uri: str) -> None:
        self.folder, self.run_id, self.uri = folder, run_id, uri
        self.path = os.path.join(folder, "journal.jsonl")

    @classmethod
    def create(cls, folder: str, run_id: str, uri: str) -> "OfflineJournal":
        os.makedirs(os.path.join(folder, "artifacts"), exist_ok=True)
        with open(os.path.join(folder, "run.json"), "w", encoding="utf-8") as header:
            json.dump({"run_id": run_id, "uri": uri}, header)
        return cls(folder, run_id, uri)

    @classmethod
    def open(cls, folder: str) -> "OfflineJournal | None":
        try:
            with open(os.path.join(folder, "run.json"), encoding="utf-8") as header:
                record = json.load(header)
        except FileNotFoundError:
            return None
        return cls(folder, record["run_id"], record["uri"])

    def append(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as journal:
            journal.write(json.dumps(record) + "\n")

    def keep_artifacts(self, local_path: str, artifact_path: str | None) -> None:
        """Copy the artifact now: it may live in a temporary folder that is gone by sync time."""
        name = f"{len(os.listdir(os.path.join(self.folder, 'artifacts'))):04d}"
        target = os.path.join(self.folder, "artifacts", name, os.path.basename(local_path.rstrip(os.sep)))
        if os.path.isdir(local_path):
            shutil.copytree(local_path, target)
        else:
            os.makedirs(os.path.dirname(target))
            shutil.copy2(local_path, target)
        self.append({"op": "log_artifacts", "local": os.path.relpath(target, self.folder),
                     "artifact_path": artifact_path})

    def pending(self) -> Iterator[tuple[int, dict]]:
        done = self._sent()
        with open(self.path, encoding="utf-8") as journal:
            for index, line in enumerate(journal):
                if index >= done and line.strip():
                    yield index, json.loads(line)

    def mark_sent(self, index: int) -> None:
        with open(os.path.join(self.folder, "sent"), "w", encoding="utf-8") as sent:
            sent.write(str(index + 1))

    def _sent(self) -> int:
        try:
            with open(os.path.join(self.folder, "sent"), encoding="utf-8") as sent:
                return int(sent.read().strip() or 0)
        except FileNotFoundError:
            return 0


def replay_journal(output_dir: str, uri: str | None = None) -> int:
    """Replay the journal of `output_dir` into its MLflow run; return how many records were sent."""
    journal = OfflineJournal.open(os.path.join(output_dir, OFFLINE_DIR))
    if journal is None:
        raise TrackingError(f"{output_dir} has nothing to sync (no {OFFLINE_DIR}/ folder): "
                            "everything this run logged reached MLflow.",
                            fix="pass the output dir of the run whose summary asked for a sync")
    uri = uri or journal.uri
    check_store_reachable(uri, timeout=5.0)
    from mlflow.exceptions import MlflowException

    client = client_for(uri)
    try:
        client.get_run(journal.run_id)
    except MlflowException:
        raise TrackingError(f"run {journal.run_id} is not in the MLflow store at {mask_uri(uri)}.",
                            fix="point at the store the run started in: --tracking-uri http://host:5000") from None
    sent = 0
    for index, record in journal.pending():
        replay(client, journal, record)
        journal.mark_sent(index)
        sent += 1
    return sent


def replay(client, journal: OfflineJournal, record: dict) -> None:
    """Send one journal record as the tracker would have sent it."""
    run_id, op = journal.run_id, record["op"]
    if op == "log_batch":
        send_batch(client, run_id, record.get("params", []), record.get("tags", []), record.get("metrics", []))
    elif op == "log_artifacts":
        send_artifacts(client, run_id, os.path.join(journal.folder, record["local"]), record.get("artifact_path"))
    elif op == "log_inputs":
        send_datasets(client, run_id, record["datasets"])
    elif op == "set_terminated":
        client.set_terminated(run_id, status=record["status"], end_time=record.get("end_time"))
    else:
        raise TrackingError(f"unknown record '{op}' in {journal.path}: {json.dumps(record)[:200]}",
                            fix="the journal was written by another tfx_hydra version; sync it with that one")

