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
import shutil
from typing import Any

from rich.console import Console, Group
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table

from tfx_hydra.metrics import summary_names

log = logging.getLogger("tfx_hydra")
BARE = {"bare": True}  # `extra=` for a line shown as it is: an epoch line, the summary


class TerminalFormatter(logging.Formatter):
    """`tfx_hydra <message>` for our lines, `warning <message>` for any warning, errors and bare
    lines as they are. Only the prefixes are rich markup: a message's own brackets are text."""

    def format(self, record: logging.LogRecord) -> str:
        message = escape(super().format(record))
        if getattr(record, "bare", False) or record.levelno >= logging.ERROR:
            return message
        if record.levelno >= logging.WARNING:
            return f"[bold yellow]warning[/] {message}"
        if record.name.split(".")[0] == "tfx_hydra":
            return f"[bold cyan]tfx_hydra[/] {message}"
        return message


class TerminalHandler(RichHandler):
    """rich's handler, showing the message alone: the time, level and source columns are in the
    job log file, and a line is never folded to the terminal's width, so paths and commands stay
    whole for copying (also in piped logs: Slurm, nohup)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level=level, console=Console(highlight=False, soft_wrap=True), show_time=False,
                         show_level=False, show_path=False, markup=True, highlighter=NullHighlighter(), keywords=[])
        self.setFormatter(TerminalFormatter())

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
    table = Table(title="tfx_hydra: run complete", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key in summary_names(metrics):
        table.add_row(key, _format(metrics[key]))
    table.add_row("outputs", output_dir)
    for result in exports:
        table.add_row(f"export ({result.kind})", result.path)
    table.add_row("weights sha256", weights_sha256)
    table.add_row("mlflow run", run_id or "not tracked (tracking=none, or not the chief worker)")
    log.info(render_text(table), extra=BARE)
    if ui_command:  # outside the table: a narrow terminal would fold the command in two
        log.info(f"browse: {ui_command}", extra=BARE)


def render_text(renderable) -> str:
    """A rich table (or any renderable) as plain text, as wide as the terminal."""
    buffer = io.StringIO()
    Console(file=buffer, width=shutil.get_terminal_size().columns, highlight=False, color_system=None).print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())
