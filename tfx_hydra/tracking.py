"""tracking: every run recorded in MLflow, the way ARCHITECTURE.md's tracking contract says.

One MLflow run per experiment run: it starts before the hardware step, records the
config and environment first, gets one batched metric write per epoch (a single
`log_metric` costs 4-8 ms on SQLite, per step that would slow training), and always
ends FINISHED, FAILED or KILLED (`tracked_run`).

The store is resolved to an absolute location at launch, so sweep jobs in other
processes share it; a sweep creates it once before any job starts, and makes the
parent run its jobs' runs nest under (sweep.py).

MLflow is imported inside the functions: importing it costs ~2 s, and `--help`,
`--cfg job` and config validation must not pay for it. The sweep's Hydra callback
imports this module on every launch, which is why its top-level imports stay light.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.errors import DiskFull, TrackingError
from tfx_hydra.schemas import TrackingConfig

# Keys whose values never reach MLflow (ARCHITECTURE.md: secrets never land in MLflow).
SECRET_KEY = re.compile(r"pass(?:word|wd)?|token|secret|credential|api[_-]?key|private[_-]?key|access[_-]?key"
                        r"|[_-]key\b", re.IGNORECASE)  # aws_key, encryption-key; not resume.key or key_path
URI_CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+@")
MASK = "***"
MAX_PARAMS_PER_CALL = 100  # MLflow's log_batch limit
MAX_TAGS_PER_CALL = 100
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 5000


# --- where the store is -------------------------------------------------------------------

def resolve_tracking_uri(config: TrackingConfig, launch_dir: str) -> str:
    """An absolute store URI: the default SQLite file in the launch dir, or the user's URI."""
    if not config.uri:
        return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), 'mlflow.db')}"
    if config.uri.startswith("sqlite:///") and not config.uri.startswith("sqlite:////"):
        relative = config.uri[len("sqlite:///"):]
        return f"sqlite:///{os.path.join(os.path.abspath(launch_dir), relative)}"
    return config.uri


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


def open_store(uri: str, experiment: str, artifact_location: str | None):
    """An MLflow client on the store and the id of `experiment`, created if new."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            try:
                return client, client.create_experiment(experiment, artifact_location=artifact_location)
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
    return client, found.experiment_id


def ui_command(uri: str, launch_dir: str) -> str:
    """The command that opens this store in the MLflow UI."""
    if uri == resolve_tracking_uri(TrackingConfig(), launch_dir):
        return f"cd {launch_dir} && mlflow ui"  # MLflow's own default store is ./mlflow.db
    if uri.startswith(("http://", "https://")):
        return f"open {mask_uri(uri)}"
    return f"mlflow ui --backend-store-uri {uri}"


# --- secrets ------------------------------------------------------------------------------

def mask_uri(value: str) -> str:
    """http://user:pw@host -> http://***@host"""
    return URI_CREDENTIALS.sub(MASK + "@", value)


# key=value in an override or a command line, whose key's last part looks like a credential
SECRET_ASSIGNMENT = re.compile(r"(?P<key>[\w.+~/-]*?(?:" + SECRET_KEY.pattern + r")[\w-]*)=(?P<value>[^\s,\]'\"]+)",
                               re.IGNORECASE)
# `key: value` in YAML, whose key looks like a credential
SECRET_YAML_LINE = re.compile(r"^(?P<lead>\s*(?:-\s+)?)(?P<key>[\w.-]*(?:" + SECRET_KEY.pattern +
                              r")[\w.-]*):\s+(?P<value>\S.*)$", re.IGNORECASE)


def mask_text(text: str) -> str:
    """Credentials inside free text: `api_token=x` overrides, `password: x` YAML lines, user:pw@ URIs."""
    lines = []
    for line in text.splitlines(keepends=True):
        found = SECRET_YAML_LINE.match(line.rstrip("\n"))
        if found and found["value"].strip() not in ("null", "None", "''", '""', MASK, f"'{MASK}'"):
            line = f"{found['lead']}{found['key']}: '{MASK}'" + ("\n" if line.endswith("\n") else "")
        line = SECRET_ASSIGNMENT.sub(lambda m: f"{m['key']}={MASK}", line)
        lines.append(mask_uri(line))
    return "".join(lines)


def mask_secrets(flat: dict[str, str]) -> dict[str, str]:
    """Mask values whose key looks like a credential, and credentials inside other values."""
    return {key: MASK if SECRET_KEY.search(key.rsplit(".", 1)[-1]) and value not in ("None", "") else mask_text(value)
            for key, value in flat.items()}


def mask_files(folder: str) -> None:
    """Mask credentials in place in every YAML/text file of `folder` (Hydra's saved configs)."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and name.endswith((".yaml", ".yml", ".txt", ".json")):
            with open(path, encoding="utf-8") as source:
                text = source.read()
            masked = mask_text(text)
            if masked != text:
                with open(path, "w", encoding="utf-8") as target:
                    target.write(masked)


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}: MLflow params are flat strings."""
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): str(node)[:MAX_PARAM_LENGTH]}


# --- when the store goes away ---------------------------------------------------------------

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


# --- the run ------------------------------------------------------------------------------

class MlflowTracker:
    """Writes one run. Every method batches what it sends: one request per call.

    MLflow never stops training: the first failed write (a tracking server that went away,
    a locked or full disk) is reported once, and from then on every record goes to an
    OfflineJournal in the run's output dir instead, for `python -m tfx_hydra.sync` to send later.
    """

    def __init__(self, client, run_id: str, uri: str, launch_dir: str, resumed_backup_dir: str | None = None,
                 offline_dir: str | None = None, previous_error: str | None = None) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self.launch_dir = launch_dir
        self.resumed_backup_dir = resumed_backup_dir  # set when this continues an interrupted run
        self.offline_dir = offline_dir or os.path.join(launch_dir, OFFLINE_DIR, run_id)
        self.journal: OfflineJournal | None = None  # set once MLflow fails
        self.dropped = False  # set when the journal cannot be written either (a full disk)
        self.store_full = False  # the store stopped taking records because its disk is full
        self.backup_dir: str | None = resumed_backup_dir  # the per-epoch backup (its tag, BACKUP_TAG)
        self.previous_error = previous_error  # what ended the attempt this run resumes

    @property
    def ui_command(self) -> str:
        return ui_command(self.uri, self.launch_dir)

    def log_config(self, config: DictConfig) -> None:
        """The resolved config (without Hydra's own node), flattened to dotted params."""
        container = OmegaConf.to_container(config, resolve=True)
        container.pop("hydra", None)
        self.log_params(flatten(container))

    def log_params(self, params: dict[str, str]) -> None:
        items = list(mask_secrets(params).items())
        for start in range(0, len(items), MAX_PARAMS_PER_CALL):
            self._log_batch(params=items[start:start + MAX_PARAMS_PER_CALL])

    def set_tags(self, tags: dict[str, Any]) -> None:
        if BACKUP_TAG in tags:
            self.backup_dir = str(tags[BACKUP_TAG])
        items = [(k, v[:MAX_TAG_LENGTH]) for k, v in mask_secrets({k: str(v) for k, v in tags.items()}).items()]
        for start in range(0, len(items), MAX_TAGS_PER_CALL):
            self._log_batch(tags=items[start:start + MAX_TAGS_PER_CALL])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        now = int(time.time() * 1000)
        items = [(k, float(v), now, step or 0) for k, v in metrics.items() if _is_number(v)]
        if items:
            self._log_batch(metrics=items)

    def log_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        """Keras' on_epoch_end signature: one batched write of every epoch metric, step = epoch."""
        self.log_metrics(dict(logs or {}), step=epoch)

    def log_missing_epochs(self, backed_up: dict[int, dict[str, float]]) -> None:
        """On resume: epochs the backup holds whose metrics never reached MLflow (the process died
        between the backup and the write) are logged now, each once."""
        if not backed_up:
            return
        try:
            logged = {m.step for m in self.client.get_metric_history(self.run_id, "loss")}
        except Exception as err:  # noqa: BLE001 - better a gap than an epoch twice
            console_warn(f"could not read which epochs MLflow holds ({type(err).__name__}); epochs "
                         f"{sorted(backed_up)} of the backup are not logged again.")
            return
        for epoch in sorted(set(backed_up) - logged):
            self.log_epoch(epoch, backed_up[epoch])

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        self._send_artifacts(local_dir, artifact_path)

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self._send_artifacts(local_path, artifact_path)

    def log_model(self, model, example_inputs, register_as: str | None = None) -> str:
        """Log `model` as an MLflow model (signature and input example included) under the run's
        `model/` artifact, so `mlflow models serve -m runs:/<run id>/model` answers /invocations;
        with `register_as`, also as a new version of that registered model."""
        import tempfile

        import keras
        import mlflow.tensorflow
        import numpy as np
        import tensorflow as tf
        from mlflow.models import infer_signature

        example_inputs = np.asarray(example_inputs, dtype="float32")
        signature = infer_signature(example_inputs, np.asarray(model(example_inputs, training=False)))
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-mlflow-model-") as folder:
            path = os.path.join(folder, "model")
            # Pinned requirements instead of MLflow's inference, which imports the model in a subprocess.
            mlflow.tensorflow.save_model(model, path, signature=signature, input_example=example_inputs,
                                         pip_requirements=[f"tensorflow=={tf.__version__}",
                                                           f"keras=={keras.version()}"])
            self.log_artifacts(path, "model")
        uri = f"runs:/{self.run_id}/model"
        tags = {"mlflow.model_uri": uri}
        if register_as and self.journal is None:
            tags["mlflow.registered_model"] = f"{register_as}/{self._register(register_as)}"
        elif register_as:
            console_warn(f"export.register_as={register_as}: not registered, MLflow is unreachable; register "
                         f"runs:/{self.run_id}/model once the run is synced.")
        self.set_tags(tags)
        return uri

    def _register(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException:
            pass  # already registered: add a version
        artifact_uri = self.client.get_run(self.run_id).info.artifact_uri
        version = self.client.create_model_version(name, f"{artifact_uri}/model", run_id=self.run_id)
        return version.version

    def end(self, status: str, error: str | None = None) -> None:
        with uninterrupted():  # a second Ctrl-C must not leave the run RUNNING
            if error:
                self.set_tags({"error": error})
            elif status == "FINISHED" and self.previous_error:  # the interruption is history, not the outcome
                self.set_tags({"resume.interrupted_by": self.previous_error})
                self._try(lambda: self.client.delete_tag(self.run_id, "error"))
            end_time = int(time.time() * 1000)
            if not self._try(lambda: self.client.set_terminated(self.run_id, status=status, end_time=end_time)):
                self._keep(lambda: self.journal.append({"op": "set_terminated", "status": status,
                                                        "end_time": end_time}))
        if self.dropped:
            console_warn(f"MLflow run {self.run_id} could not be closed {status}: neither the store nor the offline "
                         f"journal in {self.offline_dir} could be written. Once there is room, the next run on this "
                         "store closes it (as lost).")
        elif self.journal is not None:
            when = "once the store's disk has room again" if self.store_full else "once the tracking server is back"
            console_warn(f"MLflow did not take everything this run logged. It is kept in {self.journal.folder}; "
                         f"{when}: python -m tfx_hydra.sync {os.path.dirname(self.journal.folder)}")

    # --- sending, or keeping for later -------------------------------------------------------

    def _log_batch(self, params=(), tags=(), metrics=()) -> None:
        from mlflow.entities import Metric, Param, RunTag

        def send():
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in params],
                                  tags=[RunTag(k, v) for k, v in tags],
                                  metrics=[Metric(k, v, ts, step) for k, v, ts, step in metrics])
        if not self._try(send):
            self._keep(lambda: self.journal.append({"op": "log_batch", "params": list(params), "tags": list(tags),
                                                    "metrics": list(metrics)}))

    def _send_artifacts(self, local_path: str, artifact_path: str | None) -> None:
        def send():
            if os.path.isdir(local_path):
                self.client.log_artifacts(self.run_id, local_path, artifact_path)
            else:
                self.client.log_artifact(self.run_id, local_path, artifact_path)
        if not self._try(send):
            self._keep(lambda: self.journal.keep_artifacts(local_path, artifact_path))

    def _try(self, send) -> bool:
        """Send now if MLflow is taking writes; False (and the journal open) when it is not."""
        if self.journal is not None:
            return False
        try:
            with uninterrupted():
                send()
            return True
        except Exception as err:  # noqa: BLE001 - whatever MLflow raises, training must go on
            self.journal = OfflineJournal(self.offline_dir, self.run_id, self.uri)
            self._keep(lambda: OfflineJournal.create(self.offline_dir, self.run_id, self.uri))
            self.store_full = full_disk_path(err) is not None
            why = ": its disk is full" if self.store_full else ""
            console_warn(f"MLflow at {mask_uri(self.uri)} stopped taking this run's records{why} "
                         f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}). Training goes "
                         f"on; everything from now on is kept in {self.journal.folder} for "
                         "`python -m tfx_hydra.sync`.")
            return False

    def _keep(self, write) -> None:
        """A write to the offline journal; if that disk is full too, the records are dropped (said
        once) rather than training stopped by its bookkeeping."""
        if self.dropped:
            return
        try:
            write()
        except OSError as err:
            self.dropped = True
            console_warn(f"the offline journal in {self.offline_dir} cannot be written either ({err.strerror}): "
                         "MLflow records of this run are lost from here on.")


def console_warn(message: str) -> None:
    from tfx_hydra.console import warn

    warn(message)


class NullTracker:
    """tracking=none: the same interface, recording nothing."""

    run_id = None
    ui_command = None
    resumed_backup_dir = None

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def _is_number(value: Any) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


@contextmanager
def tracked_run(config: TrackingConfig, launch_dir: str, tags: dict[str, str], resume_key: str | None = None,
                sweep_job=None, offline_dir: str | None = None) -> Iterator[MlflowTracker | NullTracker]:
    """Start an MLflow run and end it FINISHED, FAILED (with the error as a tag) or KILLED (Ctrl-C).

    With `resume_key`, an interrupted run of the same config (left RUNNING by a crash or
    kill -9, or ended KILLED) whose backup still exists is continued instead of starting
    a new one, so re-running the same command resumes it in the same MLflow run.
    A sweep job (`sweep.SweepJob`) becomes a child of its sweep's parent run. What MLflow
    does not take once the run has started is kept in `offline_dir` (see MlflowTracker).
    """
    where = os.path.dirname(offline_dir) if offline_dir else launch_dir  # a full disk's path when it names none
    if not config.enabled:
        try:
            yield NullTracker()
        except Exception as err:
            said = as_disk_full(err, where)
            if said is err:
                raise
            raise said from None
        return
    uri = resolve_tracking_uri(config, launch_dir)
    if uri.startswith(("http://", "https://")):
        limit_http_retries()
    try:
        client, experiment_id = open_store(uri, config.experiment, resolve_artifact_location(config, launch_dir, uri))
    except Exception as err:
        said = as_disk_full(err, uri.removeprefix("sqlite:///"))
        if said is err:
            raise
        raise said from None
    tags = {**tags, **config.tags, "resume.key": resume_key or "none"}
    run_name = config.run_name
    if sweep_job is not None:  # nested under the sweep's parent run in the MLflow UI
        tags |= {"mlflow.parentRunId": sweep_job.parent_run_id, "sweep.job_num": str(sweep_job.num)}
        run_name = run_name or sweep_job.name
    tracker = None
    previous_handlers = _interrupt_on_signals()
    try:
        with uninterrupted():  # a run is created (or taken up) whole, or not at all
            tracker = _start_or_resume(client, experiment_id, uri, launch_dir, run_name, tags, resume_key,
                                       offline_dir)
        yield tracker
    except KeyboardInterrupt as err:
        name = err.args[0] if err.args else "SIGINT"
        if tracker is not None:
            _end_quietly(tracker, "KILLED", f"interrupted ({name})")
        if isinstance(err, Interrupted):
            command = sweep_job.resume_command if sweep_job is not None else tags.get("command")
            err.resume_hint = resume_hint(name, tracker, command, in_sweep=sweep_job is not None)
        raise
    except BaseException as err:
        said = as_disk_full(err, where)  # one message that says where and what to do, not a library's traceback
        if tracker is not None:
            _end_quietly(tracker, "FAILED", describe_error(said))
        if said is err:
            raise
        raise said from None
    else:
        tracker.end("FINISHED")
    finally:
        _restore_handlers(previous_handlers)


def resume_hint(signal_name: str, tracker: MlflowTracker | None, command: str | None, in_sweep: bool = False) -> str:
    """'interrupted (SIGTERM): MLflow run ... is KILLED, its last completed epoch backed up in ...;
    resume it with: <command>' (for a sweep job, the sweep's command with its sweep dir)."""
    what = "resume the sweep (finished jobs are skipped)" if in_sweep else "resume it"
    again = f"{what} with: {command}" if command else "run the same command again to resume it"
    if tracker is None:
        return f"interrupted ({signal_name}) before the MLflow run started: nothing to resume."
    backup = tracker.backup_dir
    kept = (f", its last completed epoch backed up in {backup}" if backup and os.path.isdir(backup)
            else ", before any epoch was backed up")
    return f"interrupted ({signal_name}): MLflow run {tracker.run_id} is KILLED{kept}; {again}"


def _start_or_resume(client, experiment_id: str, uri: str, launch_dir: str, run_name: str | None,
                     tags: dict[str, str], resume_key: str | None, offline_dir: str | None) -> MlflowTracker:
    interrupted = find_interrupted_run(client, experiment_id, resume_key) if resume_key else None
    close_lost_runs(client, [experiment_id], keep=interrupted.info.run_id if interrupted else None)
    tags = {**tags, **process_tags()}
    if interrupted:
        client.update_run(interrupted.info.run_id, status="RUNNING")
        tracker = MlflowTracker(client, interrupted.info.run_id, uri, launch_dir,
                                resumed_backup_dir=interrupted.data.tags[BACKUP_TAG], offline_dir=offline_dir,
                                previous_error=interrupted.data.tags.get("error"))
        tracker.set_tags(tags)
        return tracker
    run = client.create_run(experiment_id, run_name=run_name, tags=mask_secrets(tags))
    return MlflowTracker(client, run.info.run_id, uri, launch_dir, offline_dir=offline_dir)


def limit_http_retries() -> None:
    """MLflow retries a failed request 7 times with exponential backoff (minutes of stalled
    training for a server that went away); a few quick retries, then the offline journal."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


# --- Ctrl-C and SIGTERM ------------------------------------------------------------------------

INTERRUPTING_SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
SIGNAL_NUMBERS = {name: number for number, name in INTERRUPTING_SIGNALS.items()}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run. `resume_hint` (set once the run is closed KILLED) is the one
    line the user sees: what happened, where the backup is, the command that resumes."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.resume_hint: str | None = None

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130, 143)."""
        return 128 + SIGNAL_NUMBERS.get(self.signal_name, signal.SIGINT)
_deferred = {"depth": 0, "pending": None}  # uninterrupted() sections open, and a signal that waits for them


def _interrupt_on_signals() -> dict | None:
    """Turn Ctrl-C and SIGTERM (what Slurm and `kill` send before killing) into KeyboardInterrupt for
    the run's duration, so the run ends KILLED with its backup kept: at once, unless an
    `uninterrupted()` section is open, in which case when it closes. Main thread only (Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum, frame):
        name = INTERRUPTING_SIGNALS[signum]
        if _deferred["depth"]:
            _deferred["pending"] = _deferred["pending"] or name
            return
        raise Interrupted(name)
    return {signum: signal.signal(signum, interrupt) for signum in INTERRUPTING_SIGNALS}


def _restore_handlers(previous: dict | None) -> None:
    _deferred["pending"] = None  # the run is over: a signal held for it has done its work
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM until the block is done, then raise it.

    Some writes must not be cut in half: a KeyboardInterrupt inside SQLite's commit leaves the
    store locked by the dead transaction, so the run could not be marked KILLED and stayed
    RUNNING (1 in 6 signals landing in a metric write, measured); a backup cut mid-write cannot
    be resumed. Store writes and the per-epoch backup run inside this.
    """
    _deferred["depth"] += 1
    try:
        yield
    finally:
        _deferred["depth"] -= 1
    if _deferred["depth"] == 0 and _deferred["pending"]:
        name, _deferred["pending"] = _deferred["pending"], None
        raise Interrupted(name)


BACKUP_TAG = "resume.backup_dir"  # where an unfinished run keeps its per-epoch backup


# --- runs whose process died without a word ----------------------------------------------------
# A kill -9, the out-of-memory killer or a machine that went down end a process before it can close
# its run, which would stay RUNNING forever. Each run records the process that writes it: host, pid
# and the process's start time (the pid alone could have been reused). Any later command on the same
# store (a run, a sweep, reproduce) closes the RUNNING runs of this host whose process is gone. A
# heartbeat would also cover other hosts, but it costs a write per interval and a guess at how late
# is dead; runs on other nodes are closed by the sweep that launched them, when it ends.

LOST_NOTE = ("lost: its process (pid {pid} on {host}) ended without closing the run (kill -9, the out-of-memory "
             "killer, or the machine went down); closed by a later command on this store")


def process_tags() -> dict[str, str]:
    """Who writes this run: enough for a later command to tell that the writer is gone."""
    import socket

    return {"process.host": socket.gethostname(), "process.pid": str(os.getpid()),
            "process.started": f"{_process_start_time(os.getpid()):.2f}"}


def _process_start_time(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


def process_is_gone(tags: dict[str, str]) -> bool:
    """True when the run's writer ran on this host and is no longer running (or its pid is now another's)."""
    import socket

    import psutil

    if tags.get("process.host") != socket.gethostname() or "process.pid" not in tags:
        return False  # another machine's process: not ours to judge
    pid = int(tags["process.pid"])
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
            return True
        return abs(process.create_time() - float(tags.get("process.started", "0"))) > 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return not psutil.pid_exists(pid)


def close_lost_runs(client, experiment_ids: list[str], keep: str | None = None) -> list[str]:
    """End KILLED (so a backup still resumes) every RUNNING run whose process is gone; `keep` is
    the run about to be resumed. Returns the ids closed."""
    from socket import gethostname

    closed = []
    running = client.search_runs(experiment_ids, max_results=1000, filter_string=(
        f"attributes.status = 'RUNNING' and tags.`process.host` = '{gethostname()}'"))
    for run in running:
        if run.info.run_id == keep or not process_is_gone(run.data.tags):
            continue
        close_lost_run(client, run, LOST_NOTE.format(pid=run.data.tags["process.pid"], host=gethostname()))
        closed.append(run.info.run_id)
    return closed


def close_lost_run(client, run, note: str) -> None:
    from mlflow.entities import RunTag

    with uninterrupted():
        client.log_batch(run.info.run_id, tags=[RunTag("error", note), RunTag("lost", "true")])
        client.set_terminated(run.info.run_id, status="KILLED")


def find_interrupted_run(client, experiment_id: str, resume_key: str):
    """The newest unfinished run of this config whose backup is still on disk, or None."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`resume.key` = '{resume_key}'",
                              order_by=["attributes.start_time DESC"], max_results=20)
    for run in runs:
        backup = run.data.tags.get(BACKUP_TAG)
        if run.info.status in ("RUNNING", "KILLED") and backup and os.path.isdir(backup):
            return run
    return None


def finished_sweep_job(config: TrackingConfig, launch_dir: str, resume_key: str, parent_run_id: str):
    """The FINISHED child run of this sweep (same parent, i.e. the same sweep dir) with this
    config, or None: re-running an interrupted sweep skips the jobs that already finished."""
    if not config.enabled:
        return None
    uri = resolve_tracking_uri(config, launch_dir)
    client, experiment_id = open_store(uri, config.experiment, resolve_artifact_location(config, launch_dir, uri))
    runs = client.search_runs([experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
                              filter_string=f"tags.`resume.key` = '{resume_key}' and "
                              f"tags.`mlflow.parentRunId` = '{parent_run_id}' and attributes.status = 'FINISHED'")
    return runs[0] if runs else None


# --- a full disk ------------------------------------------------------------------------------

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "database or disk is full")


def full_disk_path(err: BaseException | None) -> str | None:
    """The path a disk-full error was writing ("" when it does not say), or None if `err` (or what
    caused it: h5py, TensorFlow and MLflow wrap the OSError) is not a full disk."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return str(err.filename2 or err.filename or "")
        if any(text in str(err) for text in DISK_FULL_TEXTS):
            return str(getattr(err, "filename", None) or "")
        err = err.__cause__ or err.__context__
    return None


def as_disk_full(err: BaseException, where: str) -> BaseException:
    """`err` as one DiskFull error if it is a full disk (at its own path, or `where` when it names
    none); `err` itself otherwise."""
    if isinstance(err, DiskFull):
        return err
    path = full_disk_path(err)
    return err if path is None else disk_full_error(path or where)


def disk_full_error(path: str) -> DiskFull:
    """Where it happened, how much is free there, and where else the run's files can go."""
    folder = os.path.abspath(path or ".")
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    usage = shutil.disk_usage(folder)
    mount = folder
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    return DiskFull(f"no space left on the disk writing {path or folder} ({_size(usage.free)} free of "
                    f"{_size(usage.total)} on {mount}); the run stopped, and the backup of its last completed epoch (if "
                    "one was written) is kept whole.",
                    fix=f"free space on {mount}, or write elsewhere: hydra.run.dir=/bigger/disk/outputs (the run's "
                    "files and backup), export.<name>.export_dir=..., data.cache=..., tracking.uri=... and "
                    "tracking.artifact_location=... (the MLflow store and its artifacts)")


def _size(count: float) -> str:
    unit = "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1024 or unit == "TB":
            break
        count /= 1024
    return f"{count:.0f} B" if unit == "B" else f"{count:.1f} {unit}"


def describe_error(err: BaseException) -> str:
    """'Kind: message', once (our errors already start with their kind)."""
    text = str(err)
    return text if text.startswith(f"{type(err).__name__}:") else f"{type(err).__name__}: {text}"


def _end_quietly(tracker: MlflowTracker, status: str, error: str) -> None:
    """Record the failure without hiding the error that caused it if the store fails too."""
    try:
        tracker.end(status, error)
    except Exception as err:  # the original error matters more; say what was lost
        print(f"tfx_hydra: could not mark MLflow run {tracker.run_id} {status}: {err}")
