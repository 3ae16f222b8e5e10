"""What a search leaves behind once its trials are told: Optuna's result file and plots in the
sweep dir, and on the parent run the study's name and storage, its state counts, the best trial
(or, with several metrics, the Pareto-optimal trials, each child tagged `optuna.pareto`), the
plots, and the best trial's model registered when `export.register_as` names it.

The table of jobs, and the parent's closing, are every sweep's (sweeps/parent.py, summary.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import yaml
from omegaconf import DictConfig

from tfx_hydra import tracking
from tfx_hydra.sweeps.parent import TRIAL_TAG, children, read_parent_record
from tfx_hydra.sweeps.summary import say

log = logging.getLogger(__name__)
RESULTS_FILE = "optimization_results.yaml"
PLOTS_TAG = "plots"  # on a trial that led: whether the search drew its plots at its end
PLOTS = ("optimization_history", "param_importances", "intermediate_values", "pareto_front")


def finish(study, plan, sweep_dir: str, config: DictConfig, idle_seconds: float) -> None:
    from tfx_hydra.sweeps.hparams_search import study as studies

    best = best_trials(study)
    write_results(study, best, plan, os.path.join(sweep_dir, RESULTS_FILE))
    plots = write_plots(study, sweep_dir, multi_objective=len(plan.directions) > 1)
    counts = studies.state_counts(study)
    shown = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    say(f"tfx_hydra search: study '{plan.settings.study_name}' holds {shown}; best trial(s): "
        f"{', '.join(str(t.number) for t in best) or 'none yet'}")
    record = read_parent_record(sweep_dir)
    if record is None:  # tracking=none
        return
    client = tracking.client_for(record["uri"])
    parent = record["run_id"]
    children = child_runs(client, parent)
    tags = {"optuna.study": plan.settings.study_name, "optuna.storage": plan.shown_storage,
            "optuna.states": json.dumps(counts, sort_keys=True),
            "optuna.dashboard": f"optuna-dashboard {plan.shown_storage}",
            "optuna.sampler": plan.settings.sampler, "optuna.pruner": plan.settings.pruner}
    if len(plan.directions) > 1:
        tags["optuna.pareto_trials"] = ",".join(str(t.number) for t in best)
        for trial in best:  # log_batch: its tags retry when a second command finishing the study marks them too
            if trial.number in children:   # (set_tag raced it into SQLite's UNIQUE constraint)
                tracking.send_batch(client, children[trial.number].info.run_id, tags=[("optuna.pareto", "true")])
    elif best:
        tags |= {"optuna.best_trial": str(best[0].number), "optuna.best_params": json.dumps(best[0].params)}
    if len(plan.directions) == 1 and best:
        draw_best_trials_plots(client, children, best[0].number, config)
    register_as = (config.get("export") or {}).get("register_as")
    if register_as and best and best[0].number in children:
        version = tracking.register_model(client, children[best[0].number].info.run_id, register_as)
        tags["sweep.registered_model"] = f"{register_as}/{version}"
        say(f"tfx_hydra search: the best trial's model is {register_as} version {version} (models:/{register_as}/"
            f"{version})")
    tracking.send_batch(client, parent, tags=tracking.mask_secrets(tags).items(),
                        metrics=[("sweep.idle_worker_seconds", idle_seconds, tracking.now_ms(), 0)])
    for path in plots:
        client.log_artifact(parent, path, "optuna")


def draw_best_trials_plots(client, trial_runs: dict, best: int, config: DictConfig) -> None:
    """hparams_search.trial_artifacts=leading: each trial that led kept its plots' inputs (reports.
    record_plots); the best one's are drawn now and logged to its run, the others' dropped. Every
    command of a study does this at its end; the first to come draws."""
    from tfx_hydra import reports, task

    for number, run in trial_runs.items():
        folder = run.data.tags.get(reports.PLOTS_PENDING)
        if not folder or run.data.tags.get(PLOTS_TAG):
            continue
        if number == best:
            if not reports.draw_pending_plots(folder, task.from_config(config.task)):
                log.info(f"the best trial's plots were not drawn here: another command of the study drew them, "
                         f"or {folder} is not on this machine")
                continue
            client.log_artifacts(run.info.run_id, folder, "plots")
            client.set_tag(run.info.run_id, PLOTS_TAG, "drawn at the search's end: the best trial")
            say(f"tfx_hydra search: the best trial's plots are in {folder}")
        else:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, reports.PENDING_FILE))
                os.rmdir(folder)  # left empty: the trial has no plots
            client.set_tag(run.info.run_id, PLOTS_TAG, f"skipped: trial {best} ended the search best")


def best_trials(study) -> list:
    """The best trial (one metric) or the Pareto-optimal trials (several); [] before any completed."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    return list(study.best_trials) if len(study.directions) > 1 else [study.best_trial]


def write_results(study, best: list, plan, path: str) -> None:
    """optimization_results.yaml: the best parameters and value(s), as Hydra's Optuna sweeper wrote it."""
    if len(plan.directions) > 1:
        results = {"name": "optuna", "solutions": [{"params": t.params, "values": t.values, "number": t.number}
                                                   for t in best]}
    else:
        results = {"name": "optuna", "best_params": best[0].params if best else {},
                   "best_value": best[0].value if best else None, "best_trial": best[0].number if best else None}
    with open(path, "w", encoding="utf-8") as out:
        yaml.safe_dump(results, out, sort_keys=False)


def write_plots(study, sweep_dir: str, multi_objective: bool) -> list[str]:
    """Optuna's own plots (matplotlib) as PNGs in the sweep dir; a plot the study cannot have yet
    (importances need two completed trials) is skipped with a note in the log."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as optuna_plots

    warnings.filterwarnings("ignore", category=ExperimentalWarning)  # Optuna's matplotlib plots, since v2.2

    wanted = ("pareto_front",) if multi_objective else PLOTS[:3]
    written = []
    for name in wanted:
        try:
            axes = getattr(optuna_plots, f"plot_{name}")(study)
            figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
            figure.set_size_inches(9, 5)
            figure.tight_layout()
            path = os.path.join(sweep_dir, f"optuna_{name}.png")
            figure.savefig(path, dpi=90)
            written.append(path)
        except Exception as err:  # noqa: BLE001 - a plot is a view; the study is kept either way
            log.info(f"Optuna plot {name} skipped: {err}")
        finally:
            plt.close("all")
    return written


def child_runs(client, parent_run_id: str) -> dict:
    """trial number -> its child run (tags included)."""
    return {int(run.data.tags[TRIAL_TAG]): run for run in children(client, parent_run_id)
            if TRIAL_TAG in run.data.tags}
