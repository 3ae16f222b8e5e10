"""console: what a run tells the person watching it (rich, one line per event).

Per-epoch lines instead of Keras' per-step progress bar: printing every step costs
time at small batch sizes, and one line per epoch with examples/s says what matters.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from tfx_hydra.metrics import EPOCH_SECONDS, EPOCH_TIMING, EXAMPLES_PER_SEC, summary_names

console = Console(highlight=False, soft_wrap=True)  # long paths stay whole in logs


def info(message: str) -> None:
    console.print(f"[bold cyan]tfx_hydra[/] {message}")


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning[/] {message}")


class EpochClock:
    """Times each epoch and adds `examples_per_sec` and `epoch_seconds` to Keras' epoch logs.

    Registered before the tracking callback, so both values reach MLflow with the
    epoch's other metrics in the same batched write.
    """

    def __init__(self, num_examples: int, epochs: int, verbose: bool) -> None:
        self.num_examples = num_examples
        self.epochs = epochs
        self.verbose = verbose
        self._started = 0.0

    def start(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._started = time.perf_counter()

    def stop(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = time.perf_counter() - self._started
        if logs is not None:
            logs[EPOCH_SECONDS] = seconds
            logs[EXAMPLES_PER_SEC] = self.num_examples / seconds if seconds > 0 else 0.0
        if self.verbose:
            shown = "  ".join(f"{k} {_format(v)}" for k, v in (logs or {}).items()
                              if k not in EPOCH_TIMING)
            console.print(f"epoch {epoch + 1}/{self.epochs}  {shown}  "
                          f"[dim]{self.num_examples / max(seconds, 1e-9):,.0f} ex/s  {seconds:.1f}s[/]")
            console.file.flush()  # shows up at once in piped logs (Slurm, nohup) too


def _format(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def print_summary(metrics: dict[str, float], run_id: str | None, exports: list, ui_command: str | None,
                  output_dir: str, weights_sha256: str) -> None:
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
    console.print(table)
    if ui_command:  # outside the table: a narrow terminal would fold the command in two
        console.print(f"browse: {ui_command}", markup=False)
