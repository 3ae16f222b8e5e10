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
it), so a wrong run id fails at once. What differs between then and now is differences.py's.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys

from tfx_hydra import tracking
from tfx_hydra.console import BARE, quiet_libraries, render_text, use_terminal
from tfx_hydra.errors import ReproduceError, TfxHydraError
from tfx_hydra.models.presets import preset_changed
from tfx_hydra.reproduce.differences import (
    code_differences,
    config_differences,
    data_differences,
    environment_differences,
    package_differences,
    show_differences,
)
from tfx_hydra.reproduce.source import SourceRun, fetch_run
from tfx_hydra.settings.project import ENV_VAR, activate, find_project

log = logging.getLogger("tfx_hydra.reproduce")  # by name: run as `python -m`, __name__ is "__main__"

SOURCE_TAG = "reproduced_from"
ARTIFACT_FIGURES = ("max_abs_diff", "size_bytes", "version", "weights")  # export.<kind>.<figure> tags: the files
WEIGHTS_TAG = "model.weights_sha256"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_terminal()
    quiet_libraries()  # TensorFlow (the data check) and MLflow (its downloads) say less, here and in the re-run
    try:
        uri = tracking.store_to_read(args.tracking_uri, args.run_id)
        client = _client(uri)
        tracking.close_lost_runs(client, [e.experiment_id for e in client.search_experiments()])  # before reading
        source = fetch_run(client, args.run_id, uri)
        use_project(source, args.project)
        source.differences = environment_differences(source) + code_differences(source)
        source.differences += config_differences(source)
        source.differences += data_differences(source)
        refuse_another_preset(source)
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


def refuse_another_preset(source: SourceRun) -> None:
    """A run that fine-tuned a keras-hub preset re-runs only from the same files: another preset (a changed or
    missing folder) would train another model, which no comparison afterwards can call a reproduction."""
    changed = preset_changed(source.tags)
    if changed:
        raise ReproduceError(f"run {source.run_id} cannot be reproduced: {changed}.",
                             fix=f"put the preset's files back as they were (the run's model.preset.digest tag is "
                             f"{source.tags['model.preset.digest'][:12]}...), or train it anew: python -m tfx_hydra "
                             + " ".join(shlex.quote(o) for o in source.overrides))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tfx_hydra.reproduce",
        description="Re-run a tracked tfx_hydra run from its MLflow record and compare the results.")
    parser.add_argument("run_id", help="the MLflow run id (the run page's URL and the run summary show it)")
    parser.add_argument("--tracking-uri", default=None,
                        help="the store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db or the "
                        "store this machine recorded the run in)")
    parser.add_argument("--project", default=None,
                        help="the user's project the run's options and code come from (default: the folder it "
                        "recorded, project.root)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the differences and the command, without running it")
    parser.add_argument("overrides", nargs="*",
                        help="extra overrides applied after the recorded ones (the result is then no exact copy)")
    return parser.parse_args(argv)


def use_project(source: SourceRun, given: str | None) -> None:
    """Compose, read data and re-run inside the project the run found its options and code in (the
    folder it recorded, or --project's): from whatever directory reproduce is started."""
    folder = given or source.project
    if folder is None:
        return
    if not os.path.isdir(folder):
        raise ReproduceError(f"run {source.run_id} took its options and code from the project at {folder}, which is "
                             "not on this machine.",
                             fix="check the project out (at the commit the run's code.* tags name) and pass "
                             "--project /path/to/it")
    os.environ[ENV_VAR] = os.path.abspath(folder)  # the re-run's process inherits it
    activate(find_project())


def _client(uri: str):
    tracking.check_store_reachable(uri, timeout=5.0)
    return tracking.client_for(uri)


# --- the re-run -------------------------------------------------------------------------

def rerun_command(source: SourceRun, uri: str, extra: list[str]) -> list[str]:
    """`python -m tfx_hydra <recorded overrides>` into the same store, tagged with the source run."""
    kept = [o for o in source.overrides
            if not o.lstrip("+~").startswith(("tracking.uri=", f"tracking.tags.{SOURCE_TAG}="))]
    return [sys.executable, "-m", "tfx_hydra", *source.hydra_overrides, *kept, *extra, f"tracking.uri={uri}",
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
    results, artifacts = result_keys(source.metrics), artifact_figures(source.tags)
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
    changed_files = [f"{key}: {source.tags[key]} then, {rerun.data.tags.get(key, 'absent')} now"
                     for key in artifacts if source.tags[key] != rerun.data.tags.get(key)]
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
        log.warning(why_they_differ(len(different), source.tags))
    else:
        log.info(f"all {len(rows)} results are bit-identical (timings and artifact sizes aside).")
    return 0


def why_they_differ(count: int, tags: dict[str, str]) -> str:
    """The warning for results that differ: what bit-identical re-runs need, and a run read from tf.data service,
    whose order is the workers' (data.service), said as the reason."""
    served = (" The run read its training split from tf.data service (data.service): the workers' order differs "
              "between runs, so its results are not bit-identical by design.") if "data.service" in tags else ""
    return (f"{count} result(s) differ. Bit-identical re-runs need trainer.deterministic=true, the same code, "
            f"packages, data and devices (see the differences above).{served}")


def result_keys(metrics: dict[str, float]) -> list[str]:
    """The run's results (training, validation and test metrics), sorted. Timings and the machine's load
    (system/...) differ between runs by nature: not results."""
    return [k for k in sorted(metrics) if tracking.is_result(k)]


def artifact_figures(tags: dict[str, str]) -> list[str]:
    """The tags that describe the files a run exported (export.<kind>.size_bytes, max_abs_diff, ...), sorted:
    an export's metadata differs by bytes between identical models, so they are listed apart."""
    return sorted(k for k in tags if k.startswith("export.") and k.rsplit(".", 1)[-1] in ARTIFACT_FIGURES)


def _shown(value) -> str:
    return "absent" if value is None else repr(value) if isinstance(value, float) else str(value)


__all__ = ["ReproduceError", "SourceRun", "config_differences", "data_differences", "environment_differences",
           "fetch_run", "main", "package_differences", "rerun_command", "show_differences"]
