"""records: what a run records and says beside its metrics, step by step (ARCHITECTURE.md's tracking
contract). Step-level, not tracking plumbing: it reads what the steps chose and hands it to the Tracker.

    launch_tags    before anything runs: the overrides and the command that launches this run again
    run_name       what the MLflow UI lists the run as: 'mlp-digits 13:42:07'
    record_launch  the config, Hydra's saved configs, git state and packages: before any training
    record_setup   what the hardware, precision and strategy steps chose (and why), the environment
    record_model   the model summary and its parameter counts

TensorFlow and MLflow are imported inside the functions (through the tracker).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import time
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from tfx_hydra.console import counted, shown_names, terminal_columns
from tfx_hydra.models.presets import preset_record
from tfx_hydra.settings.compose import choice, single_run_hydra_overrides
from tfx_hydra.tracking import OUTPUTS_TAG, Tracker, backed_up_at, mask_files

if TYPE_CHECKING:  # for the annotation only: importing records must not import the strategy step
    from tfx_hydra.strategy import BatchPlan, Setup

log = logging.getLogger(__name__)


def launch_tags(cfg: DictConfig) -> dict[str, str]:
    """Tags known before anything runs: how to launch this exact run again (Hydra's own overrides
    included: a `hydra.searchpath` the run's options came from)."""
    overrides = task_overrides()
    command = " ".join(["python -m tfx_hydra", *(shlex.quote(o) for o in [*hydra_overrides(), *overrides])])
    return {
        "hydra.overrides": " ".join(overrides),
        "command": command,
        OUTPUTS_TAG: str(cfg.paths.output_dir),
        "hardware.requested": cfg.hardware.name,
        "mlflow.note.content": f"Reproduce with `{command}`",
    }


def run_name(cfg: DictConfig) -> str:
    """'mlp-digits 13:42:07': the model and data options and the local start time, so single runs in
    the MLflow UI's list tell themselves apart (its Created column has the date). Outside a Hydra app
    the model's `name` and the data source's function name stand in for the options."""
    model = choice("model") or str(cfg.model.get("name") or "model")
    data = choice("data") or str(cfg.data.get("_target_", "data")).rsplit(".", 1)[-1]
    return f"{model}-{data} {time.strftime('%H:%M:%S')}"


def task_overrides() -> list[str]:
    """The task overrides of this Hydra job ([] when called from Python, outside an app)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def hydra_overrides() -> list[str]:
    """The overrides of Hydra's own config this job needs when run again alone ([] outside an app)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return single_run_hydra_overrides(HydraConfig.get().overrides.hydra)
    except ValueError:
        return []


def resume_key(cfg: DictConfig) -> str:
    """A fingerprint of the config as written (interpolations unresolved, so the run's own
    output folder does not enter it): the same command gives the same key."""
    container = OmegaConf.to_container(cfg, resolve=False)
    container.pop("hydra", None)
    return hashlib.sha256(json.dumps(container, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolved_config(cfg: DictConfig) -> dict:
    """The config with every interpolation resolved, as plain containers, without Hydra's own node:
    what a run records as its params and config_resolved.yaml."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.pop("hydra", None)
    return resolved


def run_folder(cfg: DictConfig, tracker: Tracker) -> str:
    """The run's folder: a resumed run's first command's (its backup, exports and plots in one place; this command's
    keeps its log, the two linked: `run` here, `resumed/<date>_<time>` there; paths.output_dir), else this one's."""
    own, first = str(cfg.paths.output_dir), tracker.output_dir
    if not first or os.path.abspath(first) == os.path.abspath(own) or not os.path.isdir(first):
        return own
    _link(os.path.join(own, "run"), first)
    _link(os.path.join(first, "resumed", "_".join(os.path.normpath(own).split(os.sep)[-2:])), own)
    cfg.paths.output_dir = first
    log.info(f"outputs: in {first}, where this run began ({os.path.join(own, 'run')} links there)")
    return first


def _link(path: str, target: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.path.lexists(path) or os.symlink(target, path, target_is_directory=True)


def record_launch(tracker: Tracker, cfg: DictConfig, output_dir: str, launch_dir: str) -> None:
    """Config, overrides, git state and packages: recorded before any training."""
    from tfx_hydra.environment import git_state, installed_packages

    tracked = f"MLflow run {tracker.run_id}" if tracker.run_id else "not tracked"
    shown = os.path.relpath(output_dir, launch_dir)  # as the user would type it from where they launched
    log.info(f"run: {tracked}, outputs in {output_dir if shown.startswith(os.pardir) else shown}")
    resolved = resolved_config(cfg)
    if tracker.resumed_backup_dir:
        where = backed_up_at(tracker.resumed_backup_dir)
        log.info(f"resuming MLflow run {tracker.run_id} from its backup ({where}) in {tracker.resumed_backup_dir}")
    elif tracker.resumed:
        log.info(f"starting MLflow run {tracker.run_id} again: it was stopped before its first epoch ended")
    if not tracker.resumed:  # params are write-once in MLflow: a resumed run keeps those of its first attempt
        tracker.log_config(resolved)
    git = git_state(launch_dir)
    tags = {"git.commit": git.commit or "none (not a git work tree)", "git.dirty": git.dirty,
            "git.branch": git.branch or "none", **left_out_tag("git.left_out", git.left_out, "git")}
    if git.commit:
        tags["mlflow.source.git.commit"] = git.commit  # shown by the MLflow UI's run page
    tracker.set_tags(tags)
    os.makedirs(output_dir, exist_ok=True)
    # a Hydra job's cfg has no hydra node: saved resolved as it is, not rebuilt from `resolved` (~6 ms)
    OmegaConf.save(OmegaConf.create(resolved) if "hydra" in cfg else cfg, os.path.join(output_dir,
                   "config_resolved.yaml"), resolve=True)
    mask_files(output_dir)  # credentials never reach the saved configs (nor MLflow)
    tracker.log_artifact(os.path.join(output_dir, "config_resolved.yaml"))
    hydra_dir = os.path.join(output_dir, ".hydra")
    if os.path.isdir(hydra_dir):
        mask_files(hydra_dir)  # Hydra's own copies: config, overrides, hydra.yaml
        tracker.log_artifacts(hydra_dir, ".hydra")
    environment_dir = os.path.join(output_dir, "environment")
    os.makedirs(environment_dir, exist_ok=True)
    with open(os.path.join(environment_dir, "packages.txt"), "w", encoding="utf-8") as packages:
        packages.write(installed_packages())
    if git.dirty:
        with open(os.path.join(environment_dir, "git.diff"), "w", encoding="utf-8") as diff:
            diff.write(git.diff)
    tracker.set_tags(record_code(cfg, environment_dir))
    tracker.log_artifacts(environment_dir, "environment")
    tracker.flush()  # the config in the store now: the next steps can take long (a dataset's download)


def record_code(cfg: DictConfig, environment_dir: str) -> dict[str, str]:
    """The tags saying which code ran (tfx_hydra's and each package a `_target_` names: its git
    commit or version) and which project and PYTHONPATH it was found through; each uncommitted
    diff into environment/code/<package>.diff."""
    from tfx_hydra.code_state import code_states, code_tags, target_packages
    from tfx_hydra.settings.project import find_project

    states = code_states(target_packages(cfg))
    left_out = {}
    for state in states:
        left_out |= left_out_tag(f"git.left_out.{state.package}", state.left_out, f"code {state.package}")
        if state.dirty:
            os.makedirs(os.path.join(environment_dir, "code"), exist_ok=True)
            with open(os.path.join(environment_dir, "code", f"{state.package}.diff"), "w", encoding="utf-8") as diff:
                diff.write(state.diff)
    project = find_project(cfg.paths.launch_dir)
    tags = code_tags(states) | left_out | {"environment.pythonpath": os.environ.get("PYTHONPATH") or "none"}
    if project is not None:
        tags |= {"project.root": project.root, "project.config_dir": project.config_dir}
    return tags


def left_out_tag(tag: str, paths: tuple[str, ...], what: str) -> dict[str, str]:
    """`tag`: untracked files too large to record (a re-run cannot restore them), said once."""
    if not paths:
        return {}
    shown = ", ".join(paths[:5]) + (f", ... ({len(paths)} in all)" if len(paths) > 5 else "")
    log.warning(f"{what}: {len(paths)} untracked file(s) over 1 MiB are not in the recorded diff: {shown}. "
                "A re-run cannot restore them: commit them, or name them in .gitignore if they are data.")
    return {tag: shown}


def record_setup(tracker: Tracker, setup: Setup, precision_warnings: list[str]) -> None:
    """What the hardware, precision and strategy steps chose (and why), plus the software environment."""
    from tfx_hydra.environment import collect_environment
    from tfx_hydra.hardware import describe_gpus
    from tfx_hydra.strategy import cluster_workers

    hardware, plan = setup.hardware, setup.plan
    strategy = type(setup.strategy).__name__
    for line in setup_lines(setup):
        log.info(line)
    if hardware.mismatch:
        log.warning(f"{hardware.mismatch} Carrying on with the {hardware.profile} profile's settings on what is "
                    "here (hardware.strict=true makes this an error).")
    if plan.global_size % plan.replicas:
        log.warning(f"trainer.batch_size={plan.global_size} does not divide over {plan.replicas} replicas: "
                    "the replicas get uneven batches.")
    for warning in precision_warnings:
        log.warning(warning)
    tags = {"hardware.profile": hardware.profile, "hardware.profile_reason": hardware.reason,
            "hardware.devices": describe_gpus(hardware.gpus), "hardware.mismatch": hardware.mismatch or "none",
            "precision.policy": setup.policy, "precision.warning": " ".join(precision_warnings) or "none",
            "strategy": strategy, "strategy.replicas": plan.replicas}
    workers = cluster_workers(setup.strategy)
    if workers:  # where each task of a multi-worker run listened: host:port, task 0 (the chief) first
        tags["strategy.workers"] = workers
    tracker.set_tags(tags | collect_environment(hardware))


def setup_lines(setup: Setup) -> list[str]:
    """What the hardware, precision and strategy steps chose, and why, in the words of the options."""
    from tfx_hydra.hardware import describe_gpus
    from tfx_hydra.strategy import auto_strategy_reason, describe_strategy

    hardware, plan = setup.hardware, setup.plan
    on = f" on {describe_gpus(hardware.gpus)}" if hardware.gpus else ""
    precision = choice("precision")
    because = f": {hardware.precision_reason}" if hardware.precision_reason else ""  # the cpu profile's, by the CPU
    why_policy = "" if precision is None else f" (precision=auto: the {hardware.profile} profile's{because})" \
        if precision == "auto" else f" (precision={precision})"
    why_strategy = f" (strategy=auto: {auto_strategy_reason(hardware)})" if choice("strategy") == "auto" else ""
    return [f"hardware: the {hardware.profile} profile ({hardware.reason}){on}",
            f"precision: {setup.policy}{why_policy}",
            f"strategy: {describe_strategy(setup.strategy)}, {plan.replicas} replica{'s' if plan.replicas > 1 else ''}"
            f"{why_strategy}"]


def record_batches(tracker: Tracker, plan: BatchPlan) -> None:
    """How the batches run (strategy.plan_batches, settled by steps_for_run once the data is known)."""
    steps = f"{plan.steps_per_execution} step{'s' if plan.steps_per_execution > 1 else ''} per call"
    log.info(f"batches: {plan.global_size} examples per step ({plan.per_replica:g} per replica), {steps}"
             + (f" ({plan.steps_reason})" if plan.steps_reason else ""))
    tracker.set_tags({"batch.global": plan.global_size, "batch.per_replica": f"{plan.per_replica:g}",
                      "steps_per_execution": plan.steps_per_execution})


def record_data(tracker: Tracker, datasets, fold_tags: dict[str, str] | None = None) -> None:
    """What the data step read: the split sizes, the inputs and the classes, said and tagged; each
    split as an MLflow dataset with its digest (the run page's Datasets). `fold_tags`: a cv=kfold job's fold."""
    spec, fold_tags, named = datasets.spec, fold_tags or {}, choice("data") or "data"
    fold = f" (cv fold {fold_tags['cv.fold']} of {fold_tags['cv.folds']})" if fold_tags else ""
    read = {key: " (read from the file)" * (key in spec.read_from_file) for key in ("input_shape", "num_classes")}
    log.info(f"data: {named}, {counted(datasets.num_train)} train / {counted(datasets.num_validation)} "
             f"validation{fold} / {counted(datasets.num_test)} test examples; inputs {tuple(spec.input_shape)}"
             f"{read['input_shape']}, {spec.task.describe(spec.num_classes)}{read['num_classes']}"
             + (f"; {datasets.cache}" if datasets.cache else ""))
    if spec.class_names:
        log.info(f"classes: {shown_names(spec.class_names)}")
    sizes = {f"data.num_{split}": "?" if size is None else size for split, size in  # ? : a pipeline of unknown length
             (("train", datasets.num_train), ("validation", datasets.num_validation), ("test", datasets.num_test))}
    tracker.set_tags({**fold_tags, "task": spec.task.name, **sizes,
                      "data.input_shape": str(tuple(spec.input_shape)),
                      "data.num_classes": spec.num_classes, **class_names_tag(spec.names)})
    tracker.log_datasets(datasets.reads.values())


CLASS_NAMES_TAG = "data.class_names"
TAG_ROOM = 5000  # characters of an MLflow tag the names may fill (its limit is 8000)


def class_names_tag(names: tuple[str, ...]) -> dict[str, str]:
    """`data.class_names`: the names as a JSON list in index order (numbered where the data names none); one
    that would not fit a tag keeps the first names and says how many there are."""
    if not names:
        return {}
    text = json.dumps(list(names), ensure_ascii=False)
    if len(text) > TAG_ROOM:
        kept = json.dumps(list(names), ensure_ascii=False)[:TAG_ROOM].rsplit('", "', 1)[0] + '"'
        text = f"{kept}, ... ({len(names)} names in all; every export holds them: labels.txt)]"
    return {CLASS_NAMES_TAG: text}


def record_model(tracker: Tracker, model, output_dir: str) -> None:
    """The model summary (model_summary/summary.txt here and in MLflow) and its parameter counts as tags."""
    from tfx_hydra.models import count_params

    folder = os.path.join(output_dir, "model_summary")
    os.makedirs(folder, exist_ok=True)
    lines: list[str] = []
    with terminal_columns(SUMMARY_WIDTH + 10):  # Keras draws it with rich, as wide as the terminal: 80 in a pipe
        model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line), line_length=SUMMARY_WIDTH,
                      expand_nested=True)
    with open(os.path.join(folder, "summary.txt"), "w", encoding="utf-8") as summary:
        summary.write("\n".join(lines) + "\n")
    trainable, frozen = count_params(model.trainable_weights), count_params(model.non_trainable_weights)
    preset, preset_tags = preset_record(model)  # model=keras_hub: the preset it was built from, for reproduce
    log.info(f"model: {choice('model') or model.name}, {trainable + frozen:,} parameters"
             + (f" ({trainable:,} trainable)" if frozen else "") + preset)
    tracker.set_tags({"model.params.total": trainable + frozen, "model.params.trainable": trainable,
                      "model.params.non_trainable": frozen, **preset_tags})
    tracker.log_artifacts(folder, "model_summary")


SUMMARY_WIDTH = 110  # the model summary's width, whether or not a terminal is attached
