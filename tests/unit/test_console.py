"""console: what the user sees goes through logging: on the terminal (rich) and in the job's log file."""

from __future__ import annotations

import logging
import logging.config

import pytest
from omegaconf import OmegaConf

from tfx_hydra.console import epoch_line, print_summary
from tests.helpers import REPO


@pytest.fixture
def job_logging(tmp_path):
    """conf/hydra/job_logging/rich.yaml applied as Hydra applies it, the log file in tmp_path."""
    config = OmegaConf.load(REPO / "conf" / "hydra" / "job_logging" / "rich.yaml")
    config.handlers.file.filename = str(tmp_path / "__main__.log")
    before = logging.getLogger().handlers[:]
    logging.config.dictConfig(OmegaConf.to_container(config))
    yield tmp_path / "__main__.log"
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
