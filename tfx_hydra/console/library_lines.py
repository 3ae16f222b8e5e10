"""A library's own log lines (and Python warnings) into a log file instead of the terminal."""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Iterator

FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@contextmanager
def library_lines_to(log_file: str, *loggers: str, level: int = logging.INFO,
                     capture_warnings: bool = False) -> Iterator[None]:
    """For the block, the records of `loggers` go to `log_file` only. Libraries such as MLflow and
    Optuna give their logger a stderr handler of their own and stop propagation, so neither Hydra's
    logging nor ours sees them: in a sweep's launching process (which has no job log) their lines
    landed on the terminal. With `capture_warnings`, Python warnings raised in the block go there too."""
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    saved = []
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate, logger.level))
        logger.handlers = [handler]  # the library's own stderr handler too: off for the block
        logger.propagate = False
        logger.setLevel(level)
    try:
        if capture_warnings:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                yield
            for warning in caught:
                handler.emit(logging.LogRecord("py.warnings", logging.WARNING, warning.filename, warning.lineno,
                                               f"{warning.category.__name__}: {warning.message}", None, None))
        else:
            yield
    finally:
        for logger, handlers, propagate, old_level in saved:
            logger.handlers, logger.propagate, logger.level = handlers, propagate, old_level
        handler.close()
