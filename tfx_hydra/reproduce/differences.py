"""What is different now from when a run ran: packages, git state, devices, the config its
overrides compose to today, and the data its config reads today (each split's digest)."""

from __future__ import annotations

import logging
import os
import shlex

from omegaconf import OmegaConf

from tfx_hydra import tracking
from tfx_hydra.console import BARE, counted, start_tensorflow_quietly
from tfx_hydra.errors import TfxHydraError
from tfx_hydra.reproduce.source import SourceRun

log = logging.getLogger("tfx_hydra.reproduce")


def environment_differences(source: SourceRun) -> list[str]:
    """Every recorded environment value that is not what this machine has now."""
    from tfx_hydra.environment import git_state, installed_packages, software_environment

    now = software_environment()
    differences = [f"{key[len('env.'):]}: {source.tags[key]} then, {value} now"
                   for key, value in now.items() if key in source.tags and source.tags[key] != value]
    git = git_state(source.launch_dir if os.path.isdir(source.launch_dir) else os.getcwd())
    recorded_commit, dirty_then = source.tags.get("git.commit", ""), source.tags.get("git.dirty") == "True"
    if (git.commit or "none (not a git work tree)") != recorded_commit or (dirty_then and not git.dirty):
        differences.append(f"git commit: {recorded_commit}{' with uncommitted changes' if dirty_then else ''} then, "
                           f"{git.commit or 'none'}{' with uncommitted changes' if git.dirty else ''} now "
                           f"({same_code_command(source, recorded_commit, dirty_then)})")
    elif git.dirty and not dirty_then:
        differences.append("the work tree has uncommitted changes now")
    if source.tags.get("git.left_out"):
        differences.append(f"the run's untracked files over 1 MiB were not recorded ({source.tags['git.left_out']}): "
                           "a re-run cannot restore them")
    if source.packages is None:
        differences.append("packages: the run recorded no package list")
    else:
        differences += package_differences(source.packages, installed_packages())
    return differences


def same_code_command(source: SourceRun, commit: str, dirty: bool) -> str:
    """How to get back the code the run ran: its commit, and its recorded diff (new files included) on top; a
    command that works pasted where reproduce runs (in the run's folder, with its store named)."""
    here = "" if os.path.abspath(os.getcwd()) == os.path.abspath(source.launch_dir) else f"cd {source.launch_dir} && "
    if not dirty:
        return f"{here}git checkout {commit[:12]} to run the same code"
    store = f"MLFLOW_TRACKING_URI={shlex.quote(source.uri)} " if source.uri else ""
    return (f"to run the same code: {here}git checkout {commit[:12]} && {store}mlflow artifacts download -r "
            f"{source.run_id} -a environment/git.diff -d . && git apply environment/git.diff")


def code_differences(source: SourceRun) -> list[str]:
    """Each package of code the run recorded (tfx_hydra's, the user's: code_state.py) whose commit,
    uncommitted change or version is not what this machine has now."""
    from tfx_hydra.code_state import TAG_PREFIX, code_states, code_tags

    recorded = {k: v for k, v in source.tags.items() if k.startswith(TAG_PREFIX)}
    now = code_tags(code_states([k[len(TAG_PREFIX):] for k in recorded]))
    differences = []
    for key, then in sorted(recorded.items()):
        package = key[len(TAG_PREFIX):]
        if key not in now:
            differences.append(f"code {package}: {then} then; it cannot be found now (install it, or run from its "
                               "project)")
        elif now[key] != then:
            extra = " (its diff then, new files included: the artifact environment/code/" + package + ".diff)" \
                if "uncommitted" in then else ""
            left_out = source.tags.get(f"git.left_out.{package}")
            extra += f"; untracked files over 1 MiB it left out: {left_out}" if left_out else ""
            differences.append(f"code {package}: {then} then, {now[key]} now{extra}")
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

    from tfx_hydra.settings.compose import compose, composition_error

    try:
        today = compose([*source.hydra_overrides, *source.overrides])
    except HydraException as err:
        said = composition_error(err, source.overrides)
        return [f"config: the recorded overrides no longer compose: {str(said or err).splitlines()[0]}"]
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
    from tfx_hydra.settings.compose import build

    log.info("reading the run's data as its config reads it today, to compare digests ...")
    here = os.getcwd()
    try:
        if os.path.isdir(source.launch_dir):
            os.chdir(source.launch_dir)
        start_tensorflow_quietly()  # its start-up lines: the log's, not the terminal's
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
                               f"({now.source}; {counted(now.num_examples)} examples now): the data changed")
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


