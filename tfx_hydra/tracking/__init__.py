"""tracking: every run recorded in MLflow, as ARCHITECTURE.md's tracking contract says.

One MLflow run per experiment run: it starts before the hardware step, records the config and
environment first, gets one batched metric write per epoch, and always ends FINISHED, FAILED or
KILLED. The package, by concern:

    datasets.py   the data a run read, as MLflow datasets (source, digest, schema, size)
    store.py      where the store is, opening it (`connect`), the one way a batch is sent
    secrets.py    credentials masked in params, tags and saved configs
    tracker.py    the Tracker interface, and NullTracker (tracking=none)
    mlflow_tracker.py  MlflowTracker: one MLflow run, one batched request per call
    journal.py    what MLflow did not take, kept on disk; its replay (python -m tfx_hydra.sync)
    lifecycle.py  tracked_run: start or resume a run, end it whatever happens
    lost_runs.py  runs whose process died without a word, closed by the next command

MLflow is imported inside the functions: importing it costs ~2 s, and `--help`, `--cfg job` and
config validation must not pay for it. The sweep's Hydra callback imports this package on every
launch, which is why its top-level imports stay light.
"""

from tfx_hydra.tracking.datasets import recorded_digests
from tfx_hydra.tracking.journal import OFFLINE_DIR, OfflineJournal, replay_journal
from tfx_hydra.tracking.lifecycle import backed_up_at, cluster_metrics, resume_hint, standard_tags, tracked_run
from tfx_hydra.tracking.logged_model import register_model
from tfx_hydra.tracking.lost_runs import close_lost_run, close_lost_runs, process_is_gone, process_tags
from tfx_hydra.tracking.mlflow_tracker import MlflowTracker
from tfx_hydra.tracking.secrets import mask_files, mask_secrets, mask_text, mask_uri
from tfx_hydra.tracking.store import (
    check_store_reachable,
    client_for,
    connect,
    flatten,
    now_ms,
    open_store,
    resolve_artifact_location,
    resolve_tracking_uri,
    send_batch,
    store_setup_lines_to,
    store_to_read,
    ui_command,
)
from tfx_hydra.tracking.tracker import (
    BACKUP_TAG,
    OUTPUTS_TAG,
    TRAINED_DIR,
    TRAINED_RECORD,
    NullTracker,
    Tracker,
    is_result,
)

__all__ = [
    "BACKUP_TAG", "OUTPUTS_TAG", "TRAINED_DIR", "TRAINED_RECORD", "MlflowTracker", "NullTracker", "OFFLINE_DIR",
    "OfflineJournal", "Tracker",
    "check_store_reachable", "client_for", "cluster_metrics", "close_lost_run", "close_lost_runs", "connect",
    "flatten", "is_result",
    "mask_files", "mask_secrets", "mask_text", "mask_uri", "now_ms", "open_store", "process_is_gone",
    "process_tags", "recorded_digests", "register_model", "replay_journal", "resolve_artifact_location",
    "resolve_tracking_uri", "resume_hint", "backed_up_at",
    "send_batch", "standard_tags", "store_setup_lines_to", "store_to_read", "tracked_run", "ui_command",
]
