"""`python -m tfx_hydra.reproduce RUN_ID` (or `tfx-hydra-reproduce RUN_ID`): run a tracked run again.

It reads the run's exact Hydra overrides from its `.hydra/overrides.yaml` artifact, lists
every difference between the environment the run recorded and this one (package versions,
git commit and uncommitted change, devices, CPU) and between its config and the config the
same overrides compose to today, then runs `python -m tfx_hydra` with those overrides into
the same store, as a new run tagged `reproduced_from=<RUN_ID>`. Before it runs, it reads the data
the run's config reads today and compares each split's digest with the one the run recorded
(its MLflow datasets), so a file that changed since is named first. Afterwards it compares the
results side by side -- training, validation and test metrics and the weights' hash -- and
lists artifact figures (an export's size in bytes) apart: SavedModel metadata differs by a few
bytes between identical models. With `trainer.deterministic=true` on the same machine the
results are bit-identical.

The run id and its records are checked before TensorFlow is imported (the data check needs
it), so a wrong run id fails at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from omegaconf import OmegaConf

from tfx_hydra import tracking
from tfx_hydra.console import BARE, render_text, use_terminal
from tfx_hydra.errors import TfxHydraError
from tfx_hydra.schemas import TrackingConfig

log = logging.getLogger("tfx_hydra.reproduce")  # by name: run as `python -m`, __name__ is "__main__"

SOURCE_TAG = "reproduced_from"
ARTIFACT_FIGURES = ("export.",)  # figures about the files written (sizes), listed apart
WEIGHTS_TAG = "model.weights_sha256"


class ReproduceError(TfxHydraError):
    """The run to reproduce cannot be found or lacks what a re-run needs."""


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
    differences: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_terminal()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # three tiny downloads, no bars
    try:
        uri = store_uri(args.tracking_uri)
        client = _client(uri)
        tracking.close_lost_runs(client, [e.experiment_id for e in client.search_experiments()])  # before reading
        source = fetch_run(client, args.run_id, uri)
        source.differences = environment_differences(source) + config_differences(source)
        source.differences += data_differences(source)
    except TfxHydraError as err:
        log.error(str(err))
        return 1
    show_differences(source)
    command = rerun_command(source, uri, args.overrides)
    log.info(("would run: " if args.dry_run else "re-running: ") + " ".join(
        ["python", *(shlex.quote(part) for part in command[1:])]))
    if args.dry_run:
        return 0
    done = subprocess.run(command, cwd=source.launch_dir if os.path.isdir(source.launch_dir) else None,
                          check=False)
    if done.returncode != 0:
        log.warning(f"the re-run failed (exit code {done.returncode}); see its MLflow run for the error.")
        return done.returncode
    return compare_metrics(client, source)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tfx_hydra.reproduce",
        description="Re-run a tracked tfx_hydra run from its MLflow record and compare the results.")
    parser.add_argument("run_id", help="the MLflow run id (the run page's URL and the run summary show it)")
    parser.add_argument("--tracking-uri", default=None,
                        help="the store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the differences and the command, without running it")
    parser.add_argument("overrides", nargs="*",
                        help="extra overrides applied after the recorded ones (the result is then no exact copy)")
    return parser.parse_args(argv)


def store_uri(given: str | None) -> str:
    """The store to read: the flag, then MLFLOW_TRACKING_URI, then the launch dir's default store."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return tracking.resolve_tracking_uri(TrackingConfig(uri=uri), os.getcwd())
    uri = tracking.resolve_tracking_uri(TrackingConfig(), os.getcwd())
    if not os.path.exists(uri[len("sqlite:///"):]):
        raise ReproduceError(f"there is no MLflow store here ({uri[len('sqlite:///'):]} does not exist).",
                             fix="run this in the directory the run was launched from, or pass "
                             "--tracking-uri sqlite:////abs/path/mlflow.db (or http://host:5000)")
    return uri


def _client(uri: str):
    tracking.check_store_reachable(uri, timeout=5.0)
    return tracking.client_for(uri)


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
        packages = _download_text(client, run_id, "environment/packages.txt", folder)
        resolved = _download_text(client, run_id, "config_resolved.yaml", folder)
    launch_dir = str(run.data.params.get("paths.launch_dir") or os.getcwd())
    data_config = OmegaConf.to_container(OmegaConf.create(resolved)).get("data") if resolved else None
    return SourceRun(run_id=run_id, experiment_id=run.info.experiment_id, launch_dir=launch_dir,
                     overrides=[str(o) for o in overrides], config=config, tags=dict(tags),
                     metrics=dict(run.data.metrics), datasets=tracking.recorded_digests(run),
                     data_config=data_config, packages=packages)


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


# --- what is different now -------------------------------------------------------------

def environment_differences(source: SourceRun) -> list[str]:
    """Every recorded environment value that is not what this machine has now."""
    from tfx_hydra.environment import git_state, installed_packages, software_environment

    now = software_environment()
    differences = [f"{key[len('env.'):]}: {source.tags[key]} then, {value} now"
                   for key, value in now.items() if key in source.tags and source.tags[key] != value]
    git = git_state(source.launch_dir if os.path.isdir(source.launch_dir) else os.getcwd())
    recorded_commit = source.tags.get("git.commit", "")
    if (git.commit or "none (not a git work tree)") != recorded_commit:
        differences.append(f"git commit: {recorded_commit} then, {git.commit or 'none'} now "
                           f"(git checkout {recorded_commit[:12]} to run the same code)")
    if source.tags.get("git.dirty") == "True":
        differences.append("the run used uncommitted changes: its diff is the artifact environment/git.diff "
                           "(git apply it on that commit)")
    if git.dirty:
        differences.append("the work tree has uncommitted changes now")
    if source.packages is None:
        differences.append("packages: the run recorded no package list")
    else:
        differences += package_differences(source.packages, installed_packages())
    return differences


def package_differences(then: str, now: str) -> list[str]:
    """'numpy: 2.4.6 then, 2.4.7 now' for each package whose version changed, came or went."""
    def parse(listing: str) -> dict[str, str]:
        return dict(line.split("==", 1) for line in listing.splitlines() if "==" in line)

    before, after = parse(then), parse(now)
    return [f"package {name}: {before.get(name, 'absent')} then, {after.get(name, 'absent')} now"
            for name in sorted(set(before) | set(after))
            if before.get(name) != after.get(name) and name != "tfx_hydra"]


def config_differences(source: SourceRun) -> list[str]:
    """Keys whose value the recorded overrides compose to differently today (the code's
    defaults changed since the run)."""
    from hydra.errors import HydraException

    from tfx_hydra.config import compose

    try:
        today = compose(source.overrides)
    except HydraException as err:
        return [f"config: the recorded overrides no longer compose ({err})"]
    now = tracking.flatten(_without_hydra(OmegaConf.to_container(today, resolve=False)))
    then = tracking.flatten(_without_hydra(source.config))
    return [f"config {key}: {then.get(key, 'absent')} then, {now.get(key, 'absent')} now"
            for key in sorted(set(then) | set(now)) if then.get(key) != now.get(key)]


def data_differences(source: SourceRun) -> list[str]:
    """Each split whose digest differs between what the run read and what its data config reads
    today (read from the launch dir, where its relative paths start)."""
    if not source.datasets or not source.data_config:
        return ["data: the run recorded no dataset digests (runs before tfx_hydra 0.1's datasets): the data "
                "it read cannot be compared"]
    from tfx_hydra.config import build

    log.info("reading the run's data as its config reads it today, to compare digests ...")
    here = os.getcwd()
    try:
        if os.path.isdir(source.launch_dir):
            os.chdir(source.launch_dir)
        datasets = build(OmegaConf.create(source.data_config), "data", batch_size=DIGEST_BATCH)
    except TfxHydraError as err:  # a missing file, a bad value: said as a difference
        return [f"data: what the run read cannot be read today ({str(err).splitlines()[0]})"]
    finally:
        os.chdir(here)
    today = {read.context: read for read in datasets.reads.values()}
    differences = []
    for context, (name, digest) in sorted(source.datasets.items()):
        now = today.get(context)
        if now is None:
            differences.append(f"data {context} split ({name}): recorded, but the config reads no such split today")
        elif now.digest != digest:
            differences.append(f"data {context} split ({name}): digest {digest} then, {now.digest} now "
                               f"({now.source}; {now.num_examples:,} examples now): the data changed")
    return differences


DIGEST_BATCH = 32  # the batch size does not enter a digest


def _without_hydra(container: dict) -> dict:
    return {k: v for k, v in container.items() if k != "hydra"}


def show_differences(source: SourceRun) -> None:
    if not source.differences:
        log.info(f"run {source.run_id}: this environment and config match what it recorded.")
        return
    log.warning(f"run {source.run_id} ran in a different environment or config; {len(source.differences)} "
                 "difference(s):")
    for line in source.differences:
        log.info(f"  - {line}", extra=BARE)


# --- the re-run -------------------------------------------------------------------------

def rerun_command(source: SourceRun, uri: str, extra: list[str]) -> list[str]:
    """`python -m tfx_hydra <recorded overrides>` into the same store, tagged with the source run."""
    kept = [o for o in source.overrides
            if not o.lstrip("+~").startswith(("tracking.uri=", f"tracking.tags.{SOURCE_TAG}="))]
    return [sys.executable, "-m", "tfx_hydra", *kept, *extra, f"tracking.uri={uri}",
            f"+tracking.tags.{SOURCE_TAG}={source.run_id}"]


def compare_metrics(client, source: SourceRun) -> int:
    """Print the original's and the re-run's results side by side (metrics and the weights' hash),
    then the artifact figures apart; tag the re-run with the verdict on the results."""
    from rich.table import Table

    runs = client.search_runs([source.experiment_id], filter_string=f"tags.{SOURCE_TAG} = '{source.run_id}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise ReproduceError("the re-run finished but its MLflow run cannot be found.",
                             fix="check that tracking is enabled in the recorded config")
    rerun = runs[0]
    results, artifacts = result_keys(source.metrics)
    table = Table(title=f"run {source.run_id} reproduced as {rerun.info.run_id}", title_justify="left")
    for column in ("result", "original", "reproduced", "identical"):
        table.add_column(column)
    rows = [(key, source.metrics[key], rerun.data.metrics.get(key)) for key in results]
    if WEIGHTS_TAG in source.tags:
        rows.append(("weights sha256", source.tags[WEIGHTS_TAG], rerun.data.tags.get(WEIGHTS_TAG)))
    different = [key for key, then, now in rows if then != now]
    for key, then, now in rows:
        table.add_row(key, _shown(then), _shown(now), "no" if key in different else "yes")
    log.info(render_text(table), extra=BARE)
    changed_files = [f"{key}: {_shown(source.metrics[key])} then, {_shown(rerun.data.metrics.get(key))} now"
                     for key in artifacts if source.metrics[key] != rerun.data.metrics.get(key)]
    if changed_files:
        log.info("artifacts (not results: an export's metadata differs by bytes between identical models):",
                 extra=BARE)
        for line in changed_files:
            log.info(f"  - {line}", extra=BARE)
    client.set_tag(rerun.info.run_id, "reproduce.identical_metrics", str(not different).lower())
    if changed_files:
        client.set_tag(rerun.info.run_id, "reproduce.different_artifacts", ", ".join(k.split(":")[0]
                                                                                    for k in changed_files))
    if different:
        client.set_tag(rerun.info.run_id, "reproduce.different_metrics", ", ".join(different))
        log.warning(f"{len(different)} result(s) differ. Bit-identical re-runs need trainer.deterministic=true, "
                    "the same code, packages, data and devices (see the differences above).")
    else:
        log.info(f"all {len(rows)} results are bit-identical (timings and artifact sizes aside).")
    return 0


def result_keys(metrics: dict[str, float]) -> tuple[list[str], list[str]]:
    """(the run's results: training, validation and test metrics; its artifact figures), sorted.
    Timings and the machine's load (system/...) differ between runs by nature: neither."""
    results = [k for k in sorted(metrics) if tracking.is_result(k)]
    figures = [k for k in sorted(metrics) if k.startswith(ARTIFACT_FIGURES) and "seconds" not in k]
    return results, figures


def _shown(value) -> str:
    return "absent" if value is None else repr(value) if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
