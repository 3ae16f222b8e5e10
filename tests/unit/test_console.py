"""console: what the user sees goes through logging: on the terminal (rich) and in the job's log file."""

from __future__ import annotations

import logging
import logging.config
import os
import re
import sys
import types

import pytest
from omegaconf import OmegaConf

from tests.helpers import REPO
from tfx_hydra.console import (
    BARE,
    NATIVE_LOGGER,
    TerminalFormatter,
    epoch_line,
    held_job_error_line,
    native_lines_streamed,
    native_lines_to_log,
    print_summary,
)


@pytest.fixture
def job_logging(tmp_path):
    """conf/hydra/job_logging/rich.yaml applied as Hydra applies it, the log file in tmp_path."""
    config = OmegaConf.load(REPO / "conf" / "hydra" / "job_logging" / "rich.yaml")
    config.handlers.file.filename = str(tmp_path / "tfx_hydra.log")
    before = logging.getLogger().handlers[:]
    logging.config.dictConfig(OmegaConf.to_container(config))
    yield tmp_path / "tfx_hydra.log"
    for handler in logging.getLogger().handlers[:]:
        if handler not in before:
            logging.getLogger().removeHandler(handler)
            handler.close()


def test_the_terminal_and_the_job_log_get_the_same_lines(job_logging, capsys):
    logging.getLogger("tfx_hydra.trainer").info("fine-tuning: [backbone] unfrozen")  # brackets are text, not markup
    logging.getLogger("tfx_hydra.hardware").warning("hardware.intra_op_threads=7 not applied")
    epoch_line(1, 5, {"loss": 0.25, "epoch_seconds": 0.5}, num_examples=1000, seconds=0.5, hidden=("epoch_seconds",))
    shown = capsys.readouterr().out.splitlines()
    assert shown == ["tfx_hydra fine-tuning: [backbone] unfrozen", "warning hardware.intra_op_threads=7 not applied",
                     "epoch 2/5  loss 0.2500  2,000 ex/s  0.5s"]
    logged = job_logging.read_text().splitlines()
    assert [line.split(" - ", 1)[1] for line in logged] == ["fine-tuning: [backbone] unfrozen",
                                                             "hardware.intra_op_threads=7 not applied",
                                                             "epoch 2/5  loss 0.2500  2,000 ex/s  0.5s"]
    assert "[tfx_hydra.hardware][WARNING]" in logged[1]


def test_a_long_line_is_never_folded_so_a_path_can_be_copied(job_logging, capsys):
    path = "/very/long/" + "folder/" * 40 + "model"
    logging.getLogger("tfx_hydra.export").info(f"export: {path}")
    assert capsys.readouterr().out == f"tfx_hydra export: {path}\n"


def test_the_summary_is_one_table_and_the_browse_command(job_logging, capsys):
    print_summary({"test_accuracy": 0.9512, "val_accuracy": 0.94}, "abc123", [], "cd /tmp && mlflow ui", "/tmp/out",
                  "f00d")
    shown = capsys.readouterr().out
    assert shown.splitlines()[0] == "tfx_hydra: run complete"
    assert "test_accuracy" in shown and "0.9512" in shown and "abc123" in shown
    assert shown.rstrip().endswith("browse: cd /tmp && mlflow ui")
    assert "0.9512" in job_logging.read_text()


def test_a_path_in_the_summary_is_one_piece_of_text_at_any_terminal_width(job_logging, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal, or a pipe (rich then assumes 80)
    path = "/outputs/2026-12-01/13-49-03-345436/" + "deep/" * 12 + "export/mlp/1"
    export = types.SimpleNamespace(kind="savedmodel", path=path)
    print_summary({"test_accuracy": 0.9}, "0123456789abcdef0123456789abcdef", [export], None, "/outputs/x", "f00d")
    rows = capsys.readouterr().out.splitlines()
    (row,) = [line for line in rows if "export (savedmodel)" in line]
    assert f"│ {path} │" in row  # whole, on the row that names it
    assert any(re.search(r"│ mlflow run\s+│ 0123456789abcdef0123456789abcdef\s+│", line) for line in rows)


def test_tensorflows_native_start_up_lines_go_to_the_job_log_and_not_the_terminal(job_logging, capfd):
    with native_lines_to_log():  # what TensorFlow's C++ side does: write to descriptor 2 itself
        os.write(2, b"I0000 00:00:1796132321.993220 23909 cudart_stub.cc:31] Could not find cuda drivers\n")
        os.write(2, b"E0000 00:00:1796132327.143408 23909 cuda_platform.cc:52] failed call to cuInit: (303)\n")
    shown = capfd.readouterr()
    assert "cuda" not in shown.out + shown.err
    logged = job_logging.read_text()
    assert "[tfx_hydra.native][INFO] - I0000 00:00:1796132321.993220 23909 cudart_stub.cc:31] Could not find" in logged
    assert "failed call to cuInit: (303)" in logged
    os.write(2, b"after\n")  # descriptor 2 is the terminal again
    assert capfd.readouterr().err == "after\n"


def test_tensorflows_lines_while_training_go_to_the_job_log_and_everything_else_still_reaches_the_terminal(
        job_logging, capfd):
    """Training's block: TensorFlow's own log lines (oneDNN's DT_BOOL note on a CPU without AVX-512, written
    mid-training as this test writes it) are the job log's; a user's tf.print (stderr) and a line the process
    dies on still reach descriptor 2 as written."""
    with native_lines_streamed():
        os.write(2, b"my layer sees 3.5\n")  # what tf.print writes
        os.write(2, b"E0000 00:00:1796421228.283298   31648 util.cc:131] oneDNN supports DT_BOOL only on platforms "
                    b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n"
                    b"  a line of the same message\n")  # one write: a message of several lines is TensorFlow's whole
        os.write(2, b"F0000 00:00:1796421228.300000   31648 some_op.cc:77] Check failed: planted\n")
    shown = capfd.readouterr()
    fatal = "F0000 00:00:1796421228.300000   31648 some_op.cc:77] Check failed: planted"
    assert shown.err == f"my layer sees 3.5\n{fatal}\n"
    assert "DT_BOOL" not in shown.out + shown.err
    logged = job_logging.read_text()
    assert "[tfx_hydra.native][INFO] - E0000 00:00:1796421228.283298   31648 util.cc:131] oneDNN supports " \
           "DT_BOOL" in logged
    assert "Check failed: planted" in logged and "my layer sees" not in logged
    assert "a line of the same message" in logged and "a line of the same message" not in shown.err
    os.write(2, b"after\n")  # descriptor 2 is the terminal again
    assert capfd.readouterr().err == "after\n"


def test_quiet_lines_show_when_the_user_asks_for_them(job_logging, capsys):
    native, tf_logger = logging.getLogger(NATIVE_LOGGER), logging.getLogger("tensorflow")
    retracing = "5 out of the last 5 calls to <function f> triggered tf.function retracing. Tracing is expensive"
    native.info("I0000 oneDNN custom operations are on.", extra=BARE)
    tf_logger.warning(retracing)
    tf_logger.warning("a real TensorFlow warning")
    assert capsys.readouterr().out.splitlines() == ["warning a real TensorFlow warning"]
    assert retracing in job_logging.read_text() and "oneDNN" in job_logging.read_text()
    native.setLevel(logging.DEBUG)  # what hydra.verbose=tfx_hydra.native does
    try:
        native.info("I0000 oneDNN custom operations are on.", extra=BARE)
        assert capsys.readouterr().out == "I0000 oneDNN custom operations are on.\n"
        logging.getLogger().setLevel(logging.DEBUG)  # hydra.verbose=true
        tf_logger.warning(retracing)
        assert capsys.readouterr().out == f"warning {retracing}\n"
    finally:
        native.setLevel(logging.NOTSET)
        logging.getLogger().setLevel(logging.INFO)


def test_library_notices_on_absl_go_to_the_job_log_only(job_logging, capsys):
    """TF Hub's cache line and keras.datasets' download lines (absl INFO); an absl warning still shows."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.INFO)  # as in a run; another test's library may have raised it
    try:
        absl.info("Using /tmp/tfhub_modules to cache modules.")
        absl.info("Downloading data from https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz")
        absl.warning("a real absl warning")
    finally:
        absl.setLevel(level)
    assert capsys.readouterr().out.splitlines() == ["warning a real absl warning"]
    logged = job_logging.read_text()
    assert "to cache modules." in logged and "Downloading data from https://storage" in logged


def test_a_parallel_sweep_job_labels_every_line_of_a_record():
    formatter = TerminalFormatter("[job 3] ")
    record = logging.LogRecord("tfx_hydra.run", logging.INFO, __file__, 1, "table\nrow", None, None)
    assert formatter.format(record) == "\\[job 3] [bold cyan]tfx_hydra[/] table\n\\[job 3] row"  # rich markup
    assert TerminalFormatter().format(record) == "[bold cyan]tfx_hydra[/] table\nrow"


def test_hydras_line_before_a_failed_jobs_error_is_held_back_until_asked_for(capsys):
    with held_job_error_line() as held:
        sys.stderr.write("Error executing job with overrides: ['a=1']\n")
        sys.stderr.write("another line\n")
    assert capsys.readouterr().err == "another line\n"
    held.release()  # a programming error: the line comes back, above its traceback
    assert capsys.readouterr().err == "Error executing job with overrides: ['a=1']\n"
