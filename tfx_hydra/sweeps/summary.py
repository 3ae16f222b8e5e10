"""A sweep's summary: the table it ends with (on the terminal and in sweep_summary.txt), one CSV
row per job (sweep_summary.csv) and the objective per job as a bar chart (sweep_summary.png).

Only rendering here: the rows come from the parent run's children (parent.py).
"""

from __future__ import annotations

import csv
import math
import os
import sys
from typing import Any

from rich.table import Table

from tfx_hydra.console import format_value, key_value_table, render_text
from tfx_hydra.plots import pyplot

SUMMARY_CSV = "sweep_summary.csv"
SUMMARY_PNG = "sweep_summary.png"
SUMMARY_TXT = "sweep_summary.txt"  # the table the sweep ends with, as the terminal showed it


def say(text: str) -> None:
    """A line of the launching process. It has no job log and no job logging (each job configures
    its own), so its few lines are printed as they are; the summary is also in sweep_summary.txt."""
    print(text, flush=True)


LOST = ("the sweep lost {count} job(s) whose process died without a word (a killed worker, e.g. kill -9 or the "
        "out-of-memory killer)")
STOPPED = ("{count} job(s) of the sweep were stopped by SIGTERM (Slurm's scancel, a pre-emption or time limit, "
           "or a kill)")


def report_jobs_to_resume(what: str, jobs: list[dict[str, Any]], never_ran: int, resume: str, closed: str) -> None:
    """One message for a sweep whose jobs ended unfinished (`what`: LOST or STOPPED): which, how many never
    ran, and the command that resumes them."""
    named = "; ".join(f"{j['name']} (MLflow run {j['run_id']})" for j in jobs)
    print(f"tfx_hydra: {what.format(count=len(jobs))}: {named}. {never_ran} job(s) never ran. Their runs are "
          f"{closed} with their backups kept; resume the sweep (finished jobs are skipped) with: {resume}",
          file=sys.stderr, flush=True)


def best_job(jobs: list[dict[str, Any]], direction: str) -> dict[str, Any] | None:
    scored = [j for j in jobs if j["status"] == "FINISHED" and j["objective"] is not None]
    if not scored:
        return None
    pick = max if direction == "maximize" else min
    return pick(scored, key=lambda j: j["objective"])


SWEEP_ROWS_SHOWN = 20  # a longer sweep lists its best jobs; sweep_summary.csv has them all


def summary_table(jobs: list[dict[str, Any]], counts: dict[str, int], metric: str, direction: str,
                  best: dict[str, Any] | None, parent_run_id: str, sweep_dir: str, status: str,
                  planned: int | None, folds: dict[str, dict] | None = None) -> str:
    """A sweep's end, as a single run's: the counts (by status), the best job and its objective, the
    parent run, where the sweep dir is; then one line per job (number, status, objective, what sets it apart)."""
    pruned = sum(j.get("state") == "PRUNED" for j in jobs)
    done = (f"{counts['FINISHED']} finished" + (f" ({pruned} pruned)" if pruned else "")
            + f", {counts['FAILED']} failed, {counts['KILLED']} killed")
    rows = [("jobs", done + (f" (of {planned} planned)" if planned is not None and planned != len(jobs) else ""))]
    if best is not None:
        rows += [("best job", best["name"]), (f"best {metric}", format_value(best["objective"])),
                 ("best run", best["run_id"])]
    elif not folds:  # k-fold's result is the folds' mean and std (below), no one fold is "best"
        rows.append(("best job", f"none: no job finished with a {metric}"))
    rows += cross_validation_rows(folds or {}, metric, direction)
    rows += [("parent run", parent_run_id), ("sweep dir", sweep_dir)]
    title = "tfx_hydra: sweep complete" if status == "FINISHED" else f"tfx_hydra: sweep ended {status}"
    listed = jobs if len(jobs) <= SWEEP_ROWS_SHOWN else _best_first(jobs, direction)[:SWEEP_ROWS_SHOWN]
    table = Table(show_header=True, box=None, pad_edge=False)
    epochs = any(j.get("epochs") for j in jobs)  # a search's trials: how far each trained (pruned ones stop early)
    for column in ("job", "status", *(["epochs"] if epochs else []), metric, "name"):
        table.add_column(column, no_wrap=True)
    for job in listed:
        mark = " *" if best is not None and job["run_id"] == best["run_id"] else ""
        objective = "" if job["objective"] is None else format_value(job["objective"]) + mark
        status = "PRUNED" if job.get("state") == "PRUNED" else job["status"]
        if status == "PRUNED" and job.get("last") is not None:  # no objective: what it last reported
            objective = f"{format_value(job['last'])} (last)"
        table.add_row(str(job["job"]), status, *([job.get("epochs") or ""] if epochs else []), objective,
                      job["name"] or "")
    more = f"\n({len(jobs) - len(listed)} more jobs in sweep_summary.csv)" if len(listed) < len(jobs) else ""
    return render_text(key_value_table(title, rows)) + "\n" + render_text(table) + more


def cross_validation_rows(folds: dict[str, dict], metric: str, direction: str = "maximize") -> list[tuple[str, str]]:
    """A cv=kfold sweep's result: `metric` and its test_ twin as mean ± std over the folds, a row per
    configuration, named by the overrides that set it apart (cv.fold left out); of several, the one whose mean
    is best is marked."""
    shared = set.intersection(*(set(key.split()) for key in folds)) if folds else set()
    means = {key: figures[metric][0] for key, figures in folds.items() if metric in figures}
    best = (max if direction == "maximize" else min)(means, key=means.get) if len(means) > 1 else None
    rows = []
    for configuration, figures in folds.items():
        shown = [f"{name} {format_value(figures[name][0])} ± {format_value(figures[name][1])}"
                 for name in dict.fromkeys([metric, metric.replace("val_", "test_", 1)]) if name in figures]
        count = max((n for _, _, n in figures.values()), default=0)
        own = " ".join(o for o in configuration.split() if o not in shared)
        label = "cross-validation" if len(folds) == 1 else f"cv {own}"
        rows.append((label, ", ".join(shown) + f" ({count} folds)" + (" (best)" if configuration == best else "")))
    return rows


def _best_first(jobs: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    scored = sorted((j for j in jobs if j["objective"] is not None), key=lambda j: j["objective"],
                    reverse=direction == "maximize")
    return scored + [j for j in jobs if j["objective"] is None]


def write_summary(jobs: list[dict[str, Any]], folder: str, metric: str, best: dict[str, Any] | None) -> None:
    """sweep_summary.csv (one row per job) and sweep_summary.png (the objective per job, best in green)."""
    with open(os.path.join(folder, SUMMARY_CSV), "w", newline="", encoding="utf-8") as table:
        writer = csv.DictWriter(table, fieldnames=["job", "name", "run_id", "status", "objective", "error", "state",
                                                   "epochs", "last"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(jobs)
    plot_objectives(jobs, metric, best["run_id"] if best else None, os.path.join(folder, SUMMARY_PNG))


def plot_objectives(jobs: list[dict[str, Any]], metric: str, best_run_id: str | None, path: str) -> str:
    """A bar per job: its objective, the best in green; a pruned trial's bar is what it last reported,
    hatched and labelled PRUNED; a job without a value is labelled with its status. The labels are also
    the PNG's Description (one line per job), for a reader without eyes on the image."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(max(6, 0.8 * len(jobs) + 2), 4.5))
    drawn = []
    for x, job in enumerate(jobs):
        label, value, style = _bar(job, best_run_id)
        axis.bar(x, value if value is not None else 0.0, **style)
        if label != "FINISHED":
            axis.text(x, 0, label, rotation=90, ha="center", va="bottom", color=style["edgecolor"])
        shown = "no value" if value is None else f"{value:.4g}" + (" (last reported)" if label == "PRUNED" else "")
        drawn.append(f"{job['name']}: {label}, {shown}" + (" (best)" if job["run_id"] == best_run_id else ""))
    axis.set_xticks(range(len(jobs)), [str(j["name"])[:40] for j in jobs], rotation=30, ha="right", fontsize=8)
    axis.set(ylabel=metric, title=f"sweep: {metric} per job (best in green, pruned hatched)")
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100, metadata={"Description": "\n".join(drawn)})
    plt.close(figure)
    return path


def _bar(job: dict[str, Any], best_run_id: str | None) -> tuple[str, float | None, dict[str, Any]]:
    """(the job's label, the value its bar shows or None, the bar's style)."""
    def finite(value):
        return value if value is not None and math.isfinite(value) else None

    if job.get("state") == "PRUNED":
        return "PRUNED", finite(job.get("last")), {"color": "none", "edgecolor": "tab:orange", "hatch": "//"}
    objective = finite(job["objective"])
    if job["status"] == "FINISHED" and objective is not None:
        color = "tab:green" if job["run_id"] == best_run_id else "tab:blue"
        return "FINISHED", objective, {"color": color, "edgecolor": color}
    return job["status"], objective, {"color": "tab:red", "edgecolor": "tab:red"}
