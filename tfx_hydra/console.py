"""console: what a run tells the person watching it, through Python logging.

Every line a run shows goes to a `tfx_hydra.*` logger. Hydra's job logging
(conf/hydra/job_logging/rich.yaml, the default) sends each record to the terminal through
rich (`TerminalHandler`) and to the job's log file (`<output dir>/<job name>.log`), so the
file holds every line the user saw, and `hydra.verbose` / `hydra/job_logging=...` work as
Hydra users expect. The commands that run outside Hydra (sync, reproduce, the converter)
call `use_terminal()`.

Per-epoch lines instead of Keras' per-step progress bar: printing every step costs time at
small batch sizes, and one line per epoch with examples/s says what matters.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console, Group
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table

from tfx_hydra.metrics import summary_names

log = logging.getLogger("tfx_hydra")
BARE = {"bare": True}  # `extra=` for a line shown as it is: an epoch line, the summary
NATIVE_LOGGER = "tfx_hydra.native"  # what TensorFlow's C++ side wrote while it started
# Library warnings known to be harmless here (Python's warnings reach logging: see TerminalHandler).
HARMLESS_WARNINGS = ("triggered tf.function retracing",  # every job of a sweep traces its model's functions anew
                     "In the future `np.object` will be defined")  # Keras' ONNX exporter asks NumPy an old question


class TerminalFormatter(logging.Formatter):
    """`tfx_hydra <message>` for our lines, `warning <message>` for any warning, errors and bare
    lines as they are; each line after `label` (a parallel sweep's job number). Only the prefixes
    are rich markup: a message's own brackets are text."""

    def __init__(self, label: str = "") -> None:
        super().__init__()
        self.label = escape(label)

    def format(self, record: logging.LogRecord) -> str:
        text = message = escape(super().format(record))
        if getattr(record, "bare", False) or record.levelno >= logging.ERROR:
            pass
        elif record.levelno >= logging.WARNING:
            text = f"[bold yellow]warning[/] {message}"
        elif record.name.split(".")[0] == "tfx_hydra":
            text = f"[bold cyan]tfx_hydra[/] {message}"
        return "\n".join(self.label + line for line in text.split("\n")) if self.label else text


class QuietUnlessVerbose(logging.Filter):
    """Keeps TensorFlow's native start-up lines and known-harmless library warnings off the
    terminal; the job log file still has them. `hydra.verbose=true` (or naming the logger:
    hydra.verbose=tfx_hydra.native, hydra.verbose=tensorflow) shows them."""

    def filter(self, record: logging.LogRecord) -> bool:
        quiet = record.name == NATIVE_LOGGER or any(text in record.getMessage() for text in HARMLESS_WARNINGS)
        return not quiet or logging.getLogger().isEnabledFor(logging.DEBUG) or \
            logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


class TerminalHandler(RichHandler):
    """rich's handler, showing the message alone: the time, level and source columns are in the
    job log file, and a line is never folded to the terminal's width, so paths and commands stay
    whole for copying (also in piped logs: Slurm, nohup)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level=level, console=Console(highlight=False, soft_wrap=True), show_time=False,
                         show_level=False, show_path=False, markup=True, highlighter=NullHighlighter(), keywords=[])
        self.setFormatter(TerminalFormatter(parallel_job_label()))
        self.addFilter(QuietUnlessVerbose())
        logging.captureWarnings(True)  # Python's warnings as `py.warnings` records: in the job log, and filtered

    def render(self, *, record, traceback, message_renderable):
        return message_renderable if traceback is None else Group(message_renderable, traceback)


def use_terminal(level: int = logging.INFO) -> None:
    """Show our lines on the terminal when no Hydra job logging does (our other commands: sync,
    reproduce, the converter): a TerminalHandler on the root logger, our loggers at `level`,
    everything else as Python leaves it (warnings)."""
    root = logging.getLogger()
    if not any(isinstance(handler, TerminalHandler) for handler in root.handlers):
        root.addHandler(TerminalHandler())
    log.setLevel(level)


@contextmanager
def native_lines_to_log() -> Iterator[None]:
    """TensorFlow's C++ side writes its start-up lines (oneDNN, "Could not find cuda drivers",
    cuInit's error on a machine without a GPU) straight to file descriptor 2, where neither
    Python's logging nor TF_CPP_MIN_LOG_LEVEL reaches all of them. Around TensorFlow's import and
    its first device listing, descriptor 2 points at a temporary file; its lines then go to the
    `tfx_hydra.native` logger: in the job log, off the terminal unless asked for (QuietUnlessVerbose)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 to borrow (a closed stderr): leave it alone
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            native = logging.getLogger(NATIVE_LOGGER)
            for line in sink.read().decode(errors="replace").splitlines():
                if line.strip():
                    native.info(line, extra=BARE)


def epoch_line(epoch: int, epochs: int, logs: dict[str, Any], num_examples: int, seconds: float,
               hidden: tuple[str, ...]) -> None:
    """'epoch 2/5  loss 0.4121  accuracy 0.8815  ...  30,512 ex/s  0.2s'"""
    shown = "  ".join(f"{k} {_format(v)}" for k, v in logs.items() if k not in hidden)
    log.info(f"epoch {epoch + 1}/{epochs}  {shown}  {num_examples / max(seconds, 1e-9):,.0f} ex/s  {seconds:.1f}s",
             extra=BARE)


def _format(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def print_summary(metrics: dict[str, float], run_id: str | None, exports: list, ui_command: str | None,
                  output_dir: str, weights_sha256: str) -> None:
    """The run's results as one table, then the command that opens its MLflow store."""
    rows = [(key, _format(metrics[key])) for key in summary_names(metrics)]
    rows.append(("outputs", output_dir))
    rows += [(f"export ({result.kind})", result.path) for result in exports]
    rows.append(("weights sha256", weights_sha256))
    rows.append(("mlflow run", run_id or "not tracked (tracking=none, or not the chief worker)"))
    log.info(render_text(key_value_table("tfx_hydra: run complete", rows)), extra=BARE)
    if ui_command:  # outside the table: a narrow terminal would fold the command in two
        log.info(f"browse: {ui_command}", extra=BARE)


def key_value_table(title: str, rows: list[tuple[str, str]]) -> Table:
    """Two columns, neither ever wrapped: a path or a run id stays one piece of text to copy."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(no_wrap=True)
    for key, value in rows:
        table.add_row(key, value)
    return table


def render_text(renderable) -> str:
    """A rich table (or any renderable) as plain text, as wide as it needs: never cut or folded to
    the terminal's width (a wider line wraps on screen, but is still one line in a log or a copy)."""
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, highlight=False, color_system=None).print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


JOB_ERROR_LINE = "Error executing job with overrides:"


class HeldJobErrorLine:
    """sys.stderr, holding back the line Hydra writes before it re-raises a failed job's error
    ("Error executing job with overrides: [...]"). A user error is said in one message and its
    Fix, so the line is dropped; a programming error gets it back (`release`) above its traceback."""

    def __init__(self, stream) -> None:
        self.stream, self.held = stream, ""

    def write(self, text: str) -> int:
        if text.startswith(JOB_ERROR_LINE):
            self.held += text
            return len(text)
        return self.stream.write(text)

    def release(self) -> None:
        if self.held:
            self.stream.write(self.held)
            self.held = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def held_job_error_line() -> Iterator[HeldJobErrorLine]:
    holder = HeldJobErrorLine(sys.stderr)
    sys.stderr = holder
    try:
        yield holder
    finally:
        sys.stderr = holder.stream


SWEEP_ROWS_SHOWN = 20  # a longer sweep lists its best jobs; sweep_summary.csv has them all


def sweep_summary(jobs: list[dict[str, Any]], counts: dict[str, int], metric: str, direction: str,
                  best: dict[str, Any] | None, parent_run_id: str, sweep_dir: str, status: str,
                  planned: int | None) -> str:
    """A sweep's end, as a single run's: the counts (by status), the best job and its objective, the
    parent run, where the sweep dir is; then one line per job (number, status, objective, what sets it apart)."""
    pruned = sum(j.get("state") == "PRUNED" for j in jobs)
    done = (f"{counts['FINISHED']} finished" + (f" ({pruned} pruned)" if pruned else "")
            + f", {counts['FAILED']} failed, {counts['KILLED']} killed")
    rows = [("jobs", done + (f" (of {planned} planned)" if planned is not None and planned != len(jobs) else ""))]
    if best is not None:
        rows += [("best job", best["name"]), (f"best {metric}", _format(best["objective"])),
                 ("best run", best["run_id"])]
    else:
        rows.append(("best job", f"none: no job finished with a {metric}"))
    rows += [("parent run", parent_run_id), ("sweep dir", sweep_dir)]
    title = "tfx_hydra: sweep complete" if status == "FINISHED" else f"tfx_hydra: sweep ended {status}"
    listed = jobs if len(jobs) <= SWEEP_ROWS_SHOWN else _best_first(jobs, direction)[:SWEEP_ROWS_SHOWN]
    table = Table(show_header=True, box=None, pad_edge=False)
    epochs = any(j.get("epochs") for j in jobs)  # a search's trials: how far each trained (pruned ones stop early)
    for column in ("job", "status", *(["epochs"] if epochs else []), metric, "name"):
        table.add_column(column, no_wrap=True)
    for job in listed:
        mark = " *" if best is not None and job["run_id"] == best["run_id"] else ""
        objective = "" if job["objective"] is None else _format(job["objective"]) + mark
        status = "PRUNED" if job.get("state") == "PRUNED" else job["status"]
        table.add_row(str(job["job"]), status, *([job.get("epochs") or ""] if epochs else []), objective,
                      job["name"] or "")
    more = f"\n({len(jobs) - len(listed)} more jobs in sweep_summary.csv)" if len(listed) < len(jobs) else ""
    return render_text(key_value_table(title, rows)) + "\n" + render_text(table) + more


def _best_first(jobs: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    scored = sorted((j for j in jobs if j["objective"] is not None), key=lambda j: j["objective"],
                    reverse=direction == "maximize")
    return scored + [j for j in jobs if j["objective"] is None]


def parallel_job_label() -> str:
    """'[job 3] ' in a sweep job whose lines can meet another job's on one terminal (joblib's and
    submitit's launchers run jobs side by side); '' in a single run or under the basic launcher."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return ""
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN or str(hydra.launcher.get("_target_", "")).endswith("BasicLauncher"):
        return ""
    return f"[job {hydra.job.num}] "
