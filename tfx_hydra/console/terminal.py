"""The terminal's side of a run's logging: the handler Hydra's job logging (conf/hydra/job_logging/rich.yaml)
puts on the root logger, the one-word prefixes, and what stays off the terminal (but in the job log).
"""

from __future__ import annotations

import logging

from rich.console import Console, Group
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape

NATIVE_LOGGER = "tfx_hydra.native"  # what TensorFlow's C++ side wrote while it started (native_lines.py)
# Library warnings known to be harmless here (Python's warnings reach logging: see TerminalHandler).
HARMLESS_WARNINGS = ("triggered tf.function retracing",  # every job of a sweep traces its model's functions anew
                     "In the future `np.object` will be defined",  # Keras' ONNX exporter asks NumPy an old question
                     # TensorFlow, saving the graph the ONNX converter reads: a class-name lookup's initializer
                     "Issue encountered when serializing table_initializer")
# absl's INFO lines: TF Hub's "Using /tmp/tfhub_modules to cache modules.", keras.datasets' "Downloading
# data from ..." and its progress (data/keras.py routes Keras' prints there for the download)
QUIET_LIBRARY_INFO = ("absl", "matplotlib.font_manager")  # downloads; a machine's first font cache
log = logging.getLogger("tfx_hydra")


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
    """Keeps TensorFlow's native start-up lines, known-harmless library warnings and absl's info
    lines (downloads, TF Hub's cache) off the terminal; the job log file still has them.
    `hydra.verbose=true` (or naming the logger: hydra.verbose=tfx_hydra.native, hydra.verbose=absl)
    shows them."""

    def filter(self, record: logging.LogRecord) -> bool:
        quiet = (record.name == NATIVE_LOGGER or any(text in record.getMessage() for text in HARMLESS_WARNINGS)
                 or (record.name in QUIET_LIBRARY_INFO and record.levelno <= logging.INFO))
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
