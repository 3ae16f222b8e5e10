"""console: what a run tells the person watching it, through Python logging, a module per job:

Every line a run shows goes to a `tfx_hydra.*` logger. Hydra's job logging
(conf/hydra/job_logging/rich.yaml, the default) sends each record to the terminal through
rich (`TerminalHandler`) and to the job's log file (`<output dir>/<job name>.log`), so the
file holds every line the user saw, and `hydra.verbose` / `hydra/job_logging=...` work as
Hydra users expect. The commands that run outside Hydra (sync, reproduce, the converter)
call `use_terminal()`.

    terminal.py      the terminal handler, its prefixes, what stays off it; a parallel job's label
    native_lines.py  TensorFlow's C++ start-up lines taken off descriptor 2 into the job log
    library_lines.py a library's own lines (MLflow's, Optuna's) and warnings into a log file
    tables.py        the epoch line, the run's summary, tables that never break a word
    held_error.py    Hydra's "Error executing job" line held back for user errors
"""

from tfx_hydra.console.held_error import HeldJobErrorLine, held_job_error_line
from tfx_hydra.console.library_lines import library_lines_to
from tfx_hydra.console.native_lines import (
    native_lines_streamed,
    native_lines_to_log,
    quiet_libraries,
    start_tensorflow_quietly,
)
from tfx_hydra.console.tables import (
    BARE,
    counted,
    epoch_line,
    format_value,
    key_value_table,
    print_summary,
    render_text,
    shown_names,
    terminal_columns,
)
from tfx_hydra.console.terminal import (
           NATIVE_LOGGER,
           QuietUnlessVerbose,
           TerminalFormatter,
           TerminalHandler,
           parallel_job_label,
           use_terminal,
)

__all__ = ["BARE", "HeldJobErrorLine", "NATIVE_LOGGER", "QuietUnlessVerbose", "TerminalFormatter", "TerminalHandler",
           "counted", "epoch_line", "format_value", "held_job_error_line", "key_value_table", "library_lines_to",
           "native_lines_streamed", "native_lines_to_log", "quiet_libraries", "start_tensorflow_quietly",
           "parallel_job_label", "print_summary", "render_text", "shown_names", "terminal_columns", "use_terminal"]
