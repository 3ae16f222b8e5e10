"""MlflowTracker: what a run writes to MLflow, through one object, in as few requests as it can.

A `log_batch` request costs 4-8 ms on SQLite whatever it carries, and a run's steps make a dozen
small records before training starts. So params, tags and metrics are held, and sent together when
an epoch ends (its metrics: the UI's curves stay live), when a step asks (`flush`: the config as
soon as it is recorded, everything else before training starts, so a kill -9 during training keeps
it and a resume finds the backup's tag), before the model is logged (which reads the run's metrics
back), and when the run ends. What MLflow does not take once the run has started is kept in the
offline journal.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from tfx_hydra.metrics import EPOCH, PARAMETERS, epoch_metric
from tfx_hydra.process.faults import full_disk_path
from tfx_hydra.process.signals import uninterrupted
from tfx_hydra.tracking import logged_model
from tfx_hydra.tracking.datasets import described, send_datasets
from tfx_hydra.tracking.journal import OFFLINE_DIR, OfflineJournal
from tfx_hydra.tracking.pyfunc_answers import as_text
from tfx_hydra.tracking.secrets import mask_secrets, mask_uri
from tfx_hydra.tracking.store import (
    MAX_PARAMS_PER_CALL,
    MAX_RECORDS_PER_CALL,
    MAX_TAG_LENGTH,
    MAX_TAGS_PER_CALL,
    flatten,
    now_ms,
    send_artifacts,
    send_batch,
    ui_command,
)
from tfx_hydra.tracking.tracker import BACKUP_TAG, is_result

log = logging.getLogger(__name__)


class MlflowTracker:
    """Writes one run. Params, tags and metrics are held until the next `flush` (an epoch's end, a step
    that asks, the model's logging, the run's end), then sent in as few requests as MLflow's limits allow.

    MLflow never stops training: the first failed write (a tracking server that went away,
    a locked or full disk) is reported once, and from then on every record goes to an
    OfflineJournal in the run's output dir instead, for `python -m tfx_hydra.sync` to send later.
    """

    def __init__(self, client, run_id: str, uri: str, launch_dir: str, resumed_backup_dir: str | None = None,
                 offline_dir: str | None = None, previous_error: str | None = None, resumed: bool = False,
                 output_dir: str | None = None) -> None:
        self.client, self.run_id, self.uri, self.launch_dir = client, run_id, uri, launch_dir
        self.resumed_backup_dir = resumed_backup_dir  # set when this continues an interrupted run from its backup
        self.resumed = resumed  # this continues an interrupted run, from its backup or (none kept) from the start
        self.output_dir = output_dir  # the run's folder (OUTPUTS_TAG): a resumed run's first command's
        self.offline_dir = offline_dir or os.path.join(launch_dir, OFFLINE_DIR, run_id)
        self.journal: OfflineJournal | None = None  # set once MLflow fails
        self.dropped = False  # set when the journal cannot be written either (a full disk)
        self.store_full = False  # the store stopped taking records because its disk is full
        self.backup_dir: str | None = resumed_backup_dir  # the per-epoch backup (its tag, BACKUP_TAG)
        self.previous_error = previous_error  # what ended the attempt this run resumes
        self.datasets: dict[str, tuple[str, str]] = {}  # context -> (name, digest) logged: metrics link to them
        self.epochs_logged = 0  # epochs this process logged: a kill before the first says so (lifecycle.resume_hint)
        self._held = _Held()  # records not sent yet

    @property
    def ui_command(self) -> str:
        return ui_command(self.uri, self.launch_dir)

    def log_config(self, resolved: dict[str, Any]) -> None:
        """The resolved config (records.resolved_config: a plain container), flattened to dotted params."""
        self.log_params(flatten(resolved, leave_unset=True))

    def log_params(self, params: dict[str, str]) -> None:
        self._held.params += mask_secrets(params).items()

    def set_tags(self, tags: dict[str, Any]) -> None:
        if BACKUP_TAG in tags:
            self.backup_dir = str(tags[BACKUP_TAG])
        masked = mask_secrets({k: str(v) for k, v in tags.items()})
        self._held.tags |= {k: v[:MAX_TAG_LENGTH] for k, v in masked.items()}

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        now = now_ms()
        self._held.metrics += [(k, float(v), now, step or 0) for k, v in metrics.items() if _is_number(v)]

    def log_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        """Keras' on_epoch_end signature: the epoch's metrics (step = epoch, under `epoch/<name>`: metrics.py) and
        whatever is held, one write."""
        self.log_metrics({epoch_metric(k): v for k, v in (logs or {}).items()}, step=epoch)
        self.epochs_logged += 1
        self.flush()

    def flush(self) -> None:
        """Send what is held: params, tags and metrics together, each request within MLflow's limits."""
        params, tags, metrics = self._held.params, list(self._held.tags.items()), self._held.metrics
        self._held = _Held()
        while params or tags or metrics:
            some_params, params = params[:MAX_PARAMS_PER_CALL], params[MAX_PARAMS_PER_CALL:]
            some_tags, tags = tags[:MAX_TAGS_PER_CALL], tags[MAX_TAGS_PER_CALL:]
            room = MAX_RECORDS_PER_CALL - len(some_params) - len(some_tags)
            some_metrics, metrics = metrics[:room], metrics[room:]
            self._log_batch(params=some_params, tags=some_tags, metrics=some_metrics)

    def log_missing_epochs(self, backed_up: dict[int, dict[str, float]]) -> None:
        """On resume: epochs the backup holds whose metrics never reached MLflow (the process died
        between the backup and the write) are logged now, each once."""
        if not backed_up:
            return
        try:
            logged = {m.step for m in self.client.get_metric_history(self.run_id, f"{EPOCH}loss")}
        except Exception as err:  # noqa: BLE001 - better a gap than an epoch twice
            log.warning(f"could not read which epochs MLflow holds ({type(err).__name__}); epochs "
                        f"{sorted(backed_up)} of the backup are not logged again.")
            return
        for epoch in sorted(set(backed_up) - logged):
            self.log_epoch(epoch, backed_up[epoch])

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        self._send_artifacts(local_dir, artifact_path)

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self._send_artifacts(local_path, artifact_path)

    def log_datasets(self, reads) -> None:
        """The splits the run read (data/lineage.py's DataReads) as MLflow datasets, one request."""
        descriptions = described(reads)
        self.datasets |= {d["context"]: (d["name"], d["digest"]) for d in descriptions}
        if descriptions and not self._try(lambda: send_datasets(self.client, self.run_id, descriptions)):
            self._keep(lambda: self.journal.append({"op": "log_inputs", "datasets": descriptions}))

    def log_model(self, model, example_inputs, register_as: str | None = None, metadata: dict | None = None,
                  columns: list[tuple[str, str]] | None = None) -> str:
        """Log `model` as an MLflow 3 logged model (signature and input example included) output by this run, with
        the run's final metrics linked to it and to the split they were measured on, so the run page lists it under
        *Logged models* and `mlflow models serve -m runs:/<run id>/model` (or `models:/<model id>`) answers
        /invocations; with `register_as`, also as a new version of that registered model; `metadata` goes into its
        MLmodel file (the classes' names); `columns`: a table's (name, type) in its input's order, for a signature
        of named columns. MLflow unreachable: the model is kept as the run's `model/` artifacts in the offline
        journal (runs:/ serves those too)."""
        import tempfile

        import mlflow.tensorflow
        import numpy as np
        from mlflow.models import Model, infer_signature

        self.flush()  # the logged model links the run's metrics, read back from the store
        example_inputs = logged_model.as_example(example_inputs)
        keras_model = logged_model.keras_model_of(model)  # a causal LM's generate module holds its Keras model
        # one array, or named ones (a task's decision beside it; a causal LM's text)
        outputs = model(example_inputs, training=False) if model is keras_model else model(example_inputs)
        outputs = {k: np.asarray(v) for k, v in outputs.items()} if isinstance(outputs, dict) else np.asarray(outputs)
        signature = infer_signature(example_inputs, as_text(outputs))  # names as strings, as the loader answers
        if columns:  # the rows as a DataFrame of the file's columns (load_through_answers names the signature's)
            example_inputs = logged_model.table_rows(example_inputs, columns)
        logged = None if self.journal is not None else self._try_value(self._create_logged_model)
        with tempfile.TemporaryDirectory(prefix="tfx_hydra-mlflow-model-") as folder:
            path = os.path.join(folder, "model")
            mlmodel = Model(artifact_path=logged.artifact_location, run_id=self.run_id, model_id=logged.model_id,
                            model_uuid=logged.model_id) if logged else None
            # Pinned requirements instead of MLflow's inference, which imports the model in a subprocess.
            mlflow.tensorflow.save_model(model, path, signature=signature, input_example=example_inputs,
                                         mlflow_model=mlmodel, metadata=metadata,
                                         code_paths=[*logged_model.code_paths(keras_model),
                                                     logged_model.answers_loader(folder)],
                                         pip_requirements=logged_model.requirements(keras_model))
            logged_model.load_through_answers(path, columns)
            if logged is None or not self._try(lambda: self._upload_logged_model(logged.model_id, path)):
                self.log_artifacts(path, "model")
        uri = f"runs:/{self.run_id}/model"
        tags = {"mlflow.model_uri": uri} | ({"mlflow.logged_model_id": logged.model_id} if logged else {})
        if register_as and self.journal is None:
            tags["mlflow.registered_model"] = f"{register_as}/{self._register(register_as)}"
        elif register_as:
            log.warning(f"export.register_as={register_as}: not registered, MLflow is unreachable; register "
                        f"runs:/{self.run_id}/model once the run is synced.")
        self.set_tags(tags)
        return uri

    def _create_logged_model(self):
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        return self.client.create_logged_model(experiment_id, name="model", source_run_id=self.run_id,
                                               model_type="keras")

    def _upload_logged_model(self, model_id: str, path: str) -> None:
        """The model's files, then READY, then the run's output, then its metrics linked to it."""
        from mlflow.entities import LoggedModelOutput, Metric

        self.client.log_model_artifacts(model_id, path)
        self.client.finalize_logged_model(model_id, "READY")
        self.client.log_outputs(self.run_id, [LoggedModelOutput(model_id, step=0)])
        results = [key for key in self.client.get_run(self.run_id).data.metrics if is_result(key)]
        final = [max(self.client.get_metric_history(self.run_id, key), key=lambda m: (m.step, m.timestamp))
                 for key in results]  # each result's last value, with its own step and timestamp
        self.client.log_batch(self.run_id, metrics=[
            Metric(m.key, m.value, m.timestamp, m.step, run_id=self.run_id, model_id=model_id,
                   **self._measured_on(m.key)) for m in final])

    def _measured_on(self, metric: str) -> dict[str, str]:
        """The dataset a final metric was measured on (test_*: test, val_*: validation, else training)."""
        if metric == PARAMETERS:  # the model's size: measured on no data
            return {}
        context = "test" if metric.startswith("test_") else "validation" if metric.startswith("val_") else "training"
        name, digest = self.datasets.get(context, (None, None))
        return {"dataset_name": name, "dataset_digest": digest} if name else {}

    def _try_value(self, make):
        """`make()` if MLflow takes it, else None (and the journal open, as _try)."""
        made = []
        return made[0] if self._try(lambda: made.append(make())) else None

    def _register(self, name: str) -> str:
        return logged_model.register_model(self.client, self.run_id, name)

    def end(self, status: str, error: str | None = None) -> None:
        with uninterrupted():  # a second Ctrl-C must not leave the run RUNNING
            if error:
                self.set_tags({"error": error})
            elif status == "FINISHED" and self.previous_error:  # the interruption is history, not the outcome
                self.set_tags({"resume.interrupted_by": self.previous_error})
                self._try(lambda: self.client.delete_tag(self.run_id, "error"))
            self.flush()
            end_time = now_ms()
            if not self._try(lambda: self.client.set_terminated(self.run_id, status=status, end_time=end_time)):
                self._keep(lambda: self.journal.append({"op": "set_terminated", "status": status,
                                                        "end_time": end_time}))
        if self.dropped:
            log.warning(f"MLflow run {self.run_id} could not be closed {status}: neither the store nor the offline "
                        f"journal in {self.offline_dir} could be written. Once there is room, the next run on this "
                        "store closes it (as lost).")
        elif self.journal is not None:
            when = "once the store's disk has room again" if self.store_full else "once the tracking server is back"
            log.warning(f"MLflow did not take everything this run logged. It is kept in {self.journal.folder}; "
                        f"{when}: python -m tfx_hydra.sync {os.path.dirname(self.journal.folder)}")

    # --- sending, or keeping for later -------------------------------------------------------

    def _log_batch(self, params=(), tags=(), metrics=()) -> None:
        if not self._try(lambda: send_batch(self.client, self.run_id, params, tags, metrics)):
            self._keep(lambda: self.journal.append({"op": "log_batch", "params": list(params), "tags": list(tags),
                                                    "metrics": list(metrics)}))

    def _send_artifacts(self, local_path: str, artifact_path: str | None) -> None:
        if not self._try(lambda: send_artifacts(self.client, self.run_id, local_path, artifact_path)):
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
            log.warning(f"MLflow at {mask_uri(self.uri)} stopped taking this run's records{why} "
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
            log.warning(f"the offline journal in {self.offline_dir} cannot be written either ({err.strerror}): "
                        "MLflow records of this run are lost from here on.")


@dataclass
class _Held:
    """Records made and not sent yet. Tags by key: a tag set twice is sent once, with its last value."""

    params: list[tuple[str, str]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)  # key, value, timestamp ms, step


def _is_number(value: Any) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False

