"""What a run shows as lines and tables: the epoch line, the end-of-run summary, and tables whose
words never break (a path or a run id stays one piece of text to copy).

Per-epoch lines instead of Keras' per-step progress bar: printing every step costs time at small
batch sizes, and one line per epoch with examples/s says what matters.
"""

from __future__ import annotations

import io
import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console
from rich.table import Table

from tfx_hydra.metrics import summary_names

log = logging.getLogger("tfx_hydra")
BARE = {"bare": True}  # `extra=` for a line shown as it is: an epoch line, the summary


def epoch_line(epoch: int, epochs: int, logs: dict[str, Any], num_examples: int, seconds: float,
               hidden: tuple[str, ...], note: str = "") -> None:
    """'epoch 2/5  loss 0.4121  accuracy 0.8815  ...  30,512 ex/s  0.2s', then the `note` if any."""
    shown = "  ".join(f"{k} {format_value(v)}" for k, v in logs.items() if k not in hidden)
    log.info(f"epoch {epoch + 1}/{epochs}  {shown}  {num_examples / max(seconds, 1e-9):,.0f} ex/s  {seconds:.1f}s"
             f"{'  ' + note if note else ''}", extra=BARE)


def format_value(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def print_summary(metrics: dict[str, float], run_id: str | None, exports: list, ui_command: str | None,
                  output_dir: str, weights_sha256: str, classes: str | None = None, kept: str | None = None,
                  input_bound: str | None = None, compute: str | None = None) -> None:
    """The run's results as one table, then the command that opens its MLflow store. `classes`: the names
    the served model answers with, where the data names its classes; `kept`: which weights the run ended
    with (trainer/kept_weights.py), the ones its val_* and test_* figures are of; `input_bound`: where the pipeline
    bound training, how much and the levers (trainer/callbacks/input_wait.py); `compute`: the training's TFLOP/s and
    MFU against the device's peak (trainer/callbacks/compute_rate.py)."""
    rows = [(key, format_value(metrics[key])) for key in summary_names(metrics)]
    if kept:
        rows.append(("measured on", f"the weights kept: {kept}"))
    if classes:
        rows.append(("classes", classes))
    if input_bound:
        rows.append(("input-bound", input_bound))
    if compute:
        rows.append(("compute", compute))
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


def counted(number: int | None) -> str:
    """A count as the terminal says it: 1,234; or `?` for a user's pipeline of unknown length."""
    return "?" if number is None else f"{number:,}"


def shown_names(names, most: int = 12) -> str:
    """'cooking, sports, tech' (the first `most`, then how many more)."""
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


@contextmanager
def terminal_columns(columns: int) -> Iterator[None]:
    """COLUMNS (which rich and shutil read for the terminal's width) set for the block."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
