"""datasets: the data a run read (data/lineage.py's DataReads) as MLflow datasets, so the run
page's Datasets panel lists each split with its source, digest, schema and size, and
`reproduce` can read the digests back.

Journal-friendly: the tracker sends and keeps plain dicts (`described`), turned into MLflow
entities only when sent.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

CONTEXT_TAG = "mlflow.data.context"  # MLflow's own input tag: training | validation | test


def described(reads: Iterable[Any]) -> list[dict[str, Any]]:
    """DataReads as plain dicts (what the offline journal can keep)."""
    return [dataclasses.asdict(read) | {"context": read.context} for read in reads]


def dataset_inputs(descriptions: list[dict[str, Any]]) -> list:
    """MLflow DatasetInputs: name, digest, source, a tensor schema (MLflow's `mlflow_tensorspec`, as its
    TensorFlow datasets write it) and a profile (examples, classes, how the digest was made)."""
    import numpy as np
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.types import Schema, TensorSpec

    inputs = []
    for read in descriptions:
        features = Schema([TensorSpec(np.dtype(read["input_dtype"]), (-1, *read["input_shape"]), "inputs")])
        targets = Schema([TensorSpec(np.dtype("int64"), (-1,), "label")])
        schema = {"mlflow_tensorspec": {"features": features.to_json(), "targets": targets.to_json()}}
        source = {"uri": read["source"]} if read["source_type"] == "local" else {
            "tags": {"mlflow.source.name": read["source"]}}
        profile = {"num_examples": read["num_examples"], "num_classes": read["num_classes"],
                   "digest": read["digested"], **read["details"]}
        dataset = Dataset(name=read["name"], digest=read["digest"], source_type=read["source_type"],
                          source=json.dumps(source), schema=json.dumps(schema), profile=json.dumps(profile))
        inputs.append(DatasetInput(dataset, tags=[InputTag(CONTEXT_TAG, read["context"])]))
    return inputs


def send_datasets(client, run_id: str, descriptions: list[dict[str, Any]]) -> None:
    """One `log_inputs` request. MLflow's store makes a new dataset by looking it up, then inserting
    it: two sweep jobs on the same data that log at the same moment can both miss it, and the later
    insert fails on the (experiment, name, digest) key, failing the whole request (seen with four
    joblib trials on one SQLite store). By then the dataset exists, so the same request again links
    it; any other failure is the tracker's to handle."""
    from mlflow.exceptions import MlflowException

    inputs = dataset_inputs(descriptions)
    try:
        client.log_inputs(run_id, datasets=inputs)
    except MlflowException as err:
        if not lost_the_race_to_create(err):
            raise
        client.log_inputs(run_id, datasets=inputs)


def lost_the_race_to_create(err: Exception) -> bool:
    """A unique-key failure: SQLite's, PostgreSQL's and MySQL's words for it (also through a server)."""
    text = str(err).lower()
    return any(words in text for words in ("unique constraint", "duplicate key", "duplicate entry"))


def recorded_digests(run) -> dict[str, tuple[str, str]]:
    """context -> (name, digest) of the datasets an MLflow run logged."""
    found = {}
    for entry in (run.inputs.dataset_inputs if run.inputs else []):
        context = next((t.value for t in entry.tags if t.key == CONTEXT_TAG), None)
        if context:
            found[context] = (entry.dataset.name, entry.dataset.digest)
    return found
