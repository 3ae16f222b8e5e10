"""TensorFlow's C++ lines: fewer of them (quiet_libraries), and those at its start-up taken off file
descriptor 2 and handed to logging."""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager
from typing import Iterator

from tfx_hydra.console.tables import BARE
from tfx_hydra.console.terminal import NATIVE_LOGGER


def quiet_libraries() -> None:
    """Set before TensorFlow or MLflow is imported, by every command (and so for the processes it
    starts: sweep jobs, reproduce's re-run); a value the user set wins."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's INFO lines drown the run's own output
    # MLflow draws a progress bar for every artifact it downloads (mode=evaluate, reproduce): noise in a log
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # hydra/launcher=ray is ours (conf/hydra/launcher/ray.yaml) and has the name of Hydra's Ray launcher's schema,
    # which Hydra merges into it (the same keys) with a deprecation warning at every compose
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/ray' is validated against ConfigStore schema")


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


# a line of TensorFlow's C++ logging (absl's format): 'E0000 00:00:1796421228.283298   31648 cuda_platform.cc:52] ...'
ABSL_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:[\d.]+\s+\d+ [\w./-]+:\d+\]")


@contextmanager
def native_lines_streamed() -> Iterator[None]:
    """`native_lines_to_log` for a long block (training): descriptor 2 points into a pipe whose lines a thread
    sorts as they come. TensorFlow's own log lines (absl's format: oneDNN's "supports DT_BOOL only on platforms
    with AVX-512" at a multilabel model's first step) go to the `tfx_hydra.native` logger: the job log, off the
    terminal. Every other line -- a user's `tf.print` (it writes to stderr), a Python warning -- and a line the
    process dies on (absl's `F...`) reach the terminal's descriptor 2 as they were written."""
    import threading

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    reading, writing = os.pipe()
    native = logging.getLogger(NATIVE_LOGGER)

    def forward() -> None:  # logged at INFO (job log only): a handler writing it back to descriptor 2 would loop
        carry, block = b"", False
        while chunk := os.read(reading, 65536):
            if not carry:  # a new write begins: its first line says whose it is (one absl message may span lines)
                block = False
            *lines, carry = (carry + chunk).split(b"\n")
            for raw in lines:
                block = sort_line(raw, block)
        if carry:
            sort_line(carry, block)
        os.close(reading)

    def sort_line(raw: bytes, block: bool) -> bool:
        line = raw.decode(errors="replace").rstrip()
        block = block or bool(ABSL_LINE.match(line))
        if block and line.strip():
            native.info(line, extra=BARE)
        if not block or line.startswith("F"):  # not TensorFlow's, or the line it dies on
            os.write(saved, raw + b"\n")
        return block

    reader = threading.Thread(target=forward, name="tfx_hydra-native-lines", daemon=True)
    reader.start()
    os.dup2(writing, 2)
    os.close(writing)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer gone: the reader sees its end
        reader.join(timeout=10)
        os.close(saved)


def start_tensorflow_quietly() -> None:
    """TensorFlow imported and its devices probed (cuInit's error on a machine without a GPU comes then)
    with its start-up lines to the log, and its objects frozen out of the garbage collector
    (process/long_lived.py): a run's hardware step, reproduce's data check, the TFRecord converter."""
    from tfx_hydra.process.long_lived import long_lived_imports

    with native_lines_to_log(), long_lived_imports():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")
