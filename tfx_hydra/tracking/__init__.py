"""tracking: every run recorded in MLflow, as ARCHITECTURE.md's tracking contract says.

One MLflow run per experiment run: it starts before the hardware step, records the config and
environment first, gets one batched metric write per epoch, and always ends FINISHED, FAILED or
KILLED. The package, by concern:

    datasets.py   the data a run read, as MLflow datasets (source, digest, schema, size)
    store.py      where the store is, opening it (`connect`), the one way a batch is sent
    secrets.py    credentials masked in params, tags and saved configs
    tracker.py    the Tracker interface: MlflowTracker (one run), NullTracker (tracking=none)
    journal.py    what MLflow did not take, kept on disk; its replay (python -m tfx_hydra.sync)
    lifecycle.py  tracked_run: start or resume a run, end it whatever happens
    signals.py    Ctrl-C/SIGTERM: Interrupted, and the writes a signal waits for
    lost_runs.py  runs whose process died without a word, closed by the next command
    faults.py     a full disk said once; an error said as one line
    records.py    what a run records: launch tags, config, environment, setup, model, plots

MLflow is imported inside the functions: importing it costs ~2 s, and `--help`, `--cfg job` and
config validation must not pay for it. The sweep's Hydra callback imports this package on every
launch, which is why its top-level imports stay light.
"""

from tfx_hydra.tracking.datasets import recorded_digests
from tfx_hydra.tracking.faults import as_disk_full, describe_error, disk_full_error, disk_full_said, full_disk_path
from tfx_hydra.tracking.journal import OFFLINE_DIR, OfflineJournal, replay_journal
from tfx_hydra.tracking.lifecycle import finished_sweep_job, resume_hint, tracked_run
from tfx_hydra.tracking.lost_runs import close_lost_run, close_lost_runs, process_is_gone, process_tags
from tfx_hydra.tracking.secrets import mask_files, mask_secrets, mask_text, mask_uri
from tfx_hydra.tracking.signals import Interrupted, uninterrupted
from tfx_hydra.tracking.store import (check_store_reachable, client_for, connect, flatten, now_ms, open_store,
                                      resolve_artifact_location, resolve_tracking_uri, send_batch, ui_command)
from tfx_hydra.tracking.tracker import BACKUP_TAG, MlflowTracker, NullTracker, Tracker, is_result, register_model

__all__ = [
    "BACKUP_TAG", "Interrupted", "MlflowTracker", "NullTracker", "OFFLINE_DIR", "OfflineJournal", "Tracker",
    "as_disk_full", "check_store_reachable", "client_for", "close_lost_run", "close_lost_runs", "connect",
    "describe_error", "disk_full_error", "disk_full_said", "finished_sweep_job", "flatten", "full_disk_path", "is_result",
    "mask_files", "mask_secrets", "mask_text", "mask_uri", "now_ms", "open_store", "process_is_gone",
    "process_tags", "recorded_digests", "register_model", "replay_journal", "resolve_artifact_location", "resolve_tracking_uri", "resume_hint",
    "send_batch", "tracked_run", "ui_command", "uninterrupted",
]
