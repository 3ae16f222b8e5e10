"""The run to reproduce, as it recorded itself: its overrides, config, tags, metrics, datasets and
packages, read from the store before anything runs."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from omegaconf import OmegaConf

from tfx_hydra import tracking
from tfx_hydra.errors import ReproduceError


@dataclass
class SourceRun:
    """What the original run recorded."""

    run_id: str
    experiment_id: str
    launch_dir: str
    overrides: list[str]
    config: dict
    tags: dict[str, str]
    metrics: dict[str, float]
    datasets: dict[str, tuple[str, str]] = field(default_factory=dict)  # context -> (name, digest)
    data_config: dict | None = None  # the resolved data node it read with
    packages: str | None = None
    hydra_overrides: list[str] = field(default_factory=list)  # of Hydra's own config: hydra.searchpath=...
    project: str | None = None  # the user's project folder it found its options and code in
    uri: str = ""  # the store it was found in
    differences: list[str] = field(default_factory=list)


def fetch_run(client, run_id: str, uri: str) -> SourceRun:
    """The run's overrides, config, tags, metrics and package list, or a clear error."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ReproduceError(f"run {run_id} is not in the MLflow store at {tracking.mask_uri(uri)}.",
                             fix="check the run id (the run page's URL shows it), or point at the store that "
                             "holds it: --tracking-uri sqlite:////abs/path/mlflow.db (or http://host:5000)") from None
    tags = run.data.tags
    if "sweep.dir" in tags and "hydra.overrides" not in tags:
        raise ReproduceError(f"run {run_id} is a sweep's parent run; reproduce one of its jobs.",
                             fix=f"pick a child run of the sweep, or run the sweep again: {tags.get('command', '')}")
    with tempfile.TemporaryDirectory(prefix="tfx_hydra-reproduce-") as folder:
        overrides = _download_yaml(client, run_id, ".hydra/overrides.yaml", folder)
        config = _download_yaml(client, run_id, ".hydra/config.yaml", folder)
        hydra = _download_yaml(client, run_id, ".hydra/hydra.yaml", folder)
        packages = _download_text(client, run_id, "environment/packages.txt", folder)
        resolved = _download_text(client, run_id, "config_resolved.yaml", folder)
    launch_dir = str(run.data.params.get("paths.launch_dir") or os.getcwd())
    data_config = OmegaConf.to_container(OmegaConf.create(resolved)).get("data") if resolved else None
    return SourceRun(run_id=run_id, experiment_id=run.info.experiment_id, launch_dir=launch_dir,
                     overrides=[str(o) for o in overrides], config=config, tags=dict(tags),
                     metrics=dict(run.data.metrics), datasets=tracking.recorded_digests(run),
                     data_config=data_config, packages=packages, project=tags.get("project.root"),
                     hydra_overrides=rerun_hydra_overrides(hydra), uri=uri)


def rerun_hydra_overrides(hydra: dict) -> list[str]:
    """The overrides of Hydra's own config the run was started with that a re-run needs again; its
    output folder (`hydra.run.dir`) is not one of them: the re-run gets its own."""
    from tfx_hydra.settings.compose import single_run_hydra_overrides

    given = ((hydra.get("hydra") or {}).get("overrides") or {}).get("hydra") or []
    return [o for o in single_run_hydra_overrides(given) if not o.startswith("hydra.run.dir=")]


def _download_yaml(client, run_id: str, path: str, folder: str):
    from mlflow.exceptions import MlflowException

    try:
        local = client.download_artifacts(run_id, path, folder)
    except (MlflowException, OSError):
        raise ReproduceError(f"run {run_id} has no '{path}' artifact, so its config cannot be recovered.",
                             fix="only runs started by tfx_hydra (which log .hydra/ first) can be reproduced; "
                             "check that the run's artifacts were not deleted") from None
    return OmegaConf.to_container(OmegaConf.load(local), resolve=False)


def _download_text(client, run_id: str, path: str, folder: str) -> str | None:
    try:
        with open(client.download_artifacts(run_id, path, folder), encoding="utf-8") as text:
            return text.read()
    except Exception:  # noqa: BLE001 - older runs may lack it; the comparison then says so
        return None
