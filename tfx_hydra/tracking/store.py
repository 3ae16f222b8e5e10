"""store: where the MLflow store is, opening it, and the one way a batch of records is sent.

The store is resolved to an absolute location at launch, so sweep jobs in other processes
share it. Every writer (the tracker, the offline journal's replay, a sweep's parent run)
opens it with `connect` and sends records with `send_batch`.
"""

from __future__ import annotations

import logging
import os
import re
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from tfx_hydra.console import library_lines_to
from tfx_hydra.errors import TrackingError
from tfx_hydra.process import held_signals
from tfx_hydra.settings.checks import require_sqlite_file
from tfx_hydra.settings.schemas import TrackingConfig
from tfx_hydra.tracking.known_stores import known_stores, list_path, store_holding
from tfx_hydra.tracking.secrets import mask_uri

log = logging.getLogger(__name__)

MAX_PARAMS_PER_CALL = 100  # MLflow's log_batch limits
MAX_TAGS_PER_CALL = 100
MAX_RECORDS_PER_CALL = 1000  # params, tags and metrics together
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 5000
MLFLOW_TABLES = ("experiments", "runs")  # an SQLite file with tables but not these is someone else's


def resolve_tracking_uri(config: TrackingConfig, launch_dir: str) -> str:
    """An absolute store URI: the default SQLite file in the launch dir, or the user's URI."""
    if not config.uri:
        return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), 'mlflow.db')}"
    if config.uri.startswith("sqlite:///") and not config.uri.startswith("sqlite:////"):
        relative = config.uri[len("sqlite:///"):]
        return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), relative)}"
    return config.uri


def store_to_read(given: str | None, run_id: str | None = None) -> str:
    """The store a command that reads a run (reproduce, promote) opens: its --tracking-uri, then
    MLFLOW_TRACKING_URI, then, for `run_id`, the store of the directory it runs in or the first of the stores
    this machine recorded runs in that holds it (known_stores.py). Nothing is created by looking: a SQLite
    store that is not there is an error, not a new empty file."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    resolved = resolve_tracking_uri(TrackingConfig(uri=uri) if uri else TrackingConfig(), os.getcwd())
    where = resolved.removeprefix("sqlite:///")
    if uri:
        if resolved.startswith("sqlite:///") and not os.path.isfile(where):
            raise TrackingError(f"there is no MLflow store at {where}.", fix="point --tracking-uri (or "
                                "MLFLOW_TRACKING_URI) at the store the run was recorded in")
        return resolved
    found = store_holding(run_id, resolved) if run_id else (resolved if os.path.isfile(where) else None)
    if found is None:
        held = f"run {run_id} is in no MLflow store this machine knows" if run_id else "there is no MLflow store here"
        raise TrackingError(f"{held}: not in {where}, nor in the {len(known_stores())} store(s) tfx_hydra recorded "
                            f"runs in ({list_path()}).", fix="pass --tracking-uri sqlite:////abs/path/mlflow.db (or "
                            "http://host:5000), or set MLFLOW_TRACKING_URI")
    if found != resolved:
        log.info(f"run {run_id}: in the MLflow store at {mask_uri(found)}")
    return found


def resolve_artifact_location(config: TrackingConfig, launch_dir: str, uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: <launch dir>/mlruns/<experiment> for a local store."""
    if config.artifact_location:
        return os.path.abspath(os.path.join(launch_dir, config.artifact_location))
    if uri.startswith("sqlite:"):
        return os.path.join(os.path.abspath(launch_dir), "mlruns", re.sub(r"[^\w.-]", "_", config.experiment))
    return None  # a tracking server decides


def check_store_reachable(uri: str, timeout: float) -> None:
    """Fail fast, before TensorFlow is imported, when the store cannot be used.

    MLflow itself retries an unreachable server with exponential backoff for minutes;
    one health request with a short timeout tells the user at once.
    """
    if uri.startswith(("http://", "https://")):
        health = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(health, timeout=timeout) as response:  # noqa: S310 (user's own URI)
                response.read()
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise TrackingError(
                f"tracking.uri={mask_uri(uri)} is unreachable ({reason}).",
                fix="start the server (mlflow server --host 127.0.0.1 --port 5000), drop tracking.uri to use "
                "the local store (sqlite:///mlflow.db in the launch directory), or tracking=none",
            ) from None
    elif uri.startswith("sqlite:///"):
        folder = os.path.dirname(uri[len("sqlite:///"):]) or "."
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise TrackingError(
                f"tracking.uri={uri}: the folder {folder} does not exist or is not writable.",
                fix="point tracking.uri at a writable folder, e.g. tracking.uri=sqlite:///mlflow.db",
            )
        require_sqlite_file("tracking.uri", uri[len("sqlite:///"):], "MLflow store", MLFLOW_TABLES, TrackingError)


def open_store(uri: str, experiment: str, artifact_location: str | None):
    """An MLflow client on the store and the id of `experiment`, created if new."""
    from mlflow.exceptions import MlflowException

    try:
        with one_opener_at_a_time(uri):
            created_whole(uri)
            try:
                client = client_for(uri)
                found = client.get_experiment_by_name(experiment)
            except Exception as err:  # noqa: BLE001 - SQLAlchemy's, or MLflow's around it
                raise half_made(uri, err) or err
        if found is None:
            try:
                return client, client.create_experiment(experiment, artifact_location=artifact_location,
                                                        tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
            except MlflowException:  # another process created it between our two calls
                found = client.get_experiment_by_name(experiment)
                if found is None:
                    raise
    except MlflowException as err:
        raise TrackingError(f"cannot open the MLflow store at {mask_uri(uri)}: {err.message}",
                            fix="check tracking.uri, or use tracking=none") from None
    if found.lifecycle_stage == "deleted":
        raise TrackingError(
            f"the MLflow experiment '{experiment}' was deleted.",
            fix=f"restore it (mlflow experiments restore --experiment-id {found.experiment_id}) "
            "or pick another: tracking.experiment=<new name>",
        )
    if EXPERIMENT_KIND_TAG not in found.tags:  # an experiment made before tfx_hydra marked its kind
        try:
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        except MlflowException:
            pass  # only the UI's default view: not worth failing a run
    return client, found.experiment_id


# MLflow 3's UI opens an experiment in its GenAI view unless this tag says it trains models
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


@contextmanager
def one_opener_at_a_time(uri: str) -> Iterator[None]:
    """Two commands opening one fresh SQLite store at once would both run its schema migration, and
    the later one fails half-way (MLflow's alembic steps are not concurrent-safe). A lock file
    beside the store lets one create it while the other waits, then opens what the first made.
    Once the lock is held, Ctrl-C/SIGTERM wait for the opening: MLflow creates the tables, then
    migrates them, and a store cut in between is refused by every later open ("duplicate column")."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    path = uri[len("sqlite:///"):]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(f"{path}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with held_signals():
                yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def created_whole(uri: str) -> None:
    """A new SQLite store is made under another name in its folder, its tables all created, then renamed into
    place: a kill at any instant (kill -9 included, which no lock or signal handler stops) leaves no store or a
    whole one, never the half-made file every later command would fail to open. Called with the opener's lock."""
    if not uri.startswith("sqlite:///"):
        return
    path = uri[len("sqlite:///"):]
    if os.path.exists(path):
        return
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    partial = f"{path}.creating"
    for leftover in (partial, f"{partial}-journal"):  # an earlier creation killed half-way
        if os.path.exists(leftover):
            os.remove(leftover)
    store = SqlAlchemyStore(f"sqlite:///{partial}", DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    store.engine.dispose()
    os.replace(partial, path)


def half_made(uri: str, err: Exception) -> TrackingError | None:
    """An SQLite store whose creation was cut short by an older version (its tables partly there): MLflow
    tries to create them again and fails ('table experiment_tags already exists'). Said with the file and
    the fix, not SQLAlchemy's traceback; None for any other error."""
    text = f"{err} {err.__cause__ or ''}"
    if not uri.startswith("sqlite:///") or not re.search(r"already exists|no such table", text):
        return None
    import contextlib
    import sqlite3

    path = uri[len("sqlite:///"):]
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.Error:
        runs = 0
    first = next((line.strip() for line in text.splitlines() if "already exists" in line or "no such" in line),
                 text.strip().splitlines()[0])
    held = f"it holds {runs} run(s): keep the moved file to read them" if runs else "it holds no run"
    return TrackingError(f"the MLflow store {path} is half-made: a command was stopped while it created the store's "
                         f"tables ({first[:160]}); {held}.",
                         fix=f"mv {path} {path}.broken, then run again: the next command makes a whole new store")


STORE_SETUP_LOGGER = "mlflow.store.db.utils"  # "Creating initial MLflow database tables...", "Updating database tables"


@contextmanager
def store_setup_lines_to(log_file: str) -> Iterator[None]:
    """MLflow's own lines while it creates or upgrades a SQL store go to `log_file`, not the terminal
    (a sweep's launching process, which has no job log, printed them after its summary table)."""
    with library_lines_to(log_file, STORE_SETUP_LOGGER):
        yield


def ui_command(uri: str, launch_dir: str) -> str:
    """The command that opens this store in the MLflow UI."""
    if uri == resolve_tracking_uri(TrackingConfig(), launch_dir):
        return f"cd {launch_dir} && mlflow ui"  # MLflow's own default store is ./mlflow.db
    if uri.startswith(("http://", "https://")):
        return f"open {mask_uri(uri)}"
    return f"mlflow ui --backend-store-uri {uri}"


def limit_http_retries() -> None:
    """MLflow retries a failed request 7 times with exponential backoff (minutes of stalled
    training for a server that went away); a few quick retries, then the offline journal."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


def connect(config: TrackingConfig, launch_dir: str):
    """(client, experiment id, uri) for the store `config` names: its URI made absolute, a new
    experiment's artifact location chosen, the experiment created if it is not there yet."""
    uri = resolve_tracking_uri(config, launch_dir)
    if uri.startswith(("http://", "https://")):
        limit_http_retries()
    client, experiment_id = open_store(uri, config.experiment, resolve_artifact_location(config, launch_dir, uri))
    return client, experiment_id, uri


def client_for(uri: str):
    """An MLflow client on an already resolved store (a run's recorded URI)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def now_ms() -> int:
    """MLflow's timestamps: milliseconds since the epoch."""
    return int(time.time() * 1000)


def send_batch(client, run_id: str, params: Iterable = (), tags: Iterable = (), metrics: Iterable = ()) -> None:
    """One `log_batch` request: params and tags as (key, value) pairs, metrics as (key, value,
    timestamp ms, step). The tracker, the journal's replay and a sweep's parent all send this way."""
    from mlflow.entities import Metric, Param, RunTag

    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params],
                     tags=[RunTag(k, str(v)) for k, v in tags],
                     metrics=[Metric(k, float(v), ts, step) for k, v, ts, step in metrics])


def send_artifacts(client, run_id: str, local_path: str, artifact_path: str | None) -> None:
    """A folder's files, or one file, under `artifact_path` of the run."""
    if os.path.isdir(local_path):
        client.log_artifacts(run_id, local_path, artifact_path)
    else:
        client.log_artifact(run_id, local_path, artifact_path)


def flatten(node: Any, prefix: str = "", leave_unset: bool = False) -> dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}: MLflow params are flat strings. A list of nodes (trainer.callbacks)
    is flattened by position, `trainer.callbacks.0._target_`; a list of values stays one param. `leave_unset`:
    keys whose value is null are left out (a run's params are what it was set to, not placeholders)."""
    if isinstance(node, list) and any(isinstance(value, dict) for value in node):
        node = {str(index): value for index, value in enumerate(node)}
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}.", leave_unset))
        return flat
    return {} if node is None and leave_unset else {prefix.rstrip("."): str(node)[:MAX_PARAM_LENGTH]}
