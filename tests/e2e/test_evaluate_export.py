"""mode=evaluate: an exported SavedModel, from its folder or from its MLflow run, scores the test split
exactly as the trained model did."""

from __future__ import annotations

import pytest

from tests.helpers import QUICK, mlflow_runs
from tests.helpers.in_process import run_cli_in_process

pytestmark = pytest.mark.slow


def test_evaluating_the_export_reproduces_the_runs_test_metrics(tmp_path):
    trained = run_cli_in_process(QUICK, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    folder = run.data.tags["export.savedmodel.path"]
    temp = tmp_path / "system-temp"  # the system's temp folder, as this run sees it
    temp.mkdir()
    for source in (folder, f"runs:/{run.info.run_id}"):
        done = run_cli_in_process(["mode=evaluate", f"export.source={source}"], cwd=tmp_path, env={"TMPDIR": str(temp)})
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Downloading artifacts" not in done.stdout + done.stderr  # MLflow's progress bars stay quiet
    assert [p.name for p in temp.iterdir() if p.name.startswith("tfx_hydra")] == []  # nothing left behind
    evaluations = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("mode") == "evaluate"]
    (downloaded,) = [r for r in evaluations if r.data.tags["export.source"].startswith("runs:/")]
    assert downloaded.data.tags["export.source.path"].startswith(downloaded.data.params["paths.output_dir"])
    assert sorted(r.data.tags["export.source"] for r in evaluations) == sorted([folder, f"runs:/{run.info.run_id}"])
    for evaluation in evaluations:
        assert evaluation.info.status == "FINISHED"
        assert evaluation.data.metrics["test_accuracy"] == pytest.approx(run.data.metrics["test_accuracy"], abs=1e-6)
        assert evaluation.data.metrics["test_loss"] == pytest.approx(run.data.metrics["test_loss"], abs=1e-4)


@pytest.mark.parametrize("source,message", [
    ("/nonexistent/export", "ExportError: export.source=/nonexistent/export holds no SavedModel"),
    ("runs:/0123456789abcdef", "ExportError: export.source=runs:/0123456789abcdef: Run with id=0123456789abcdef "
                               "not found"),
])
def test_a_source_without_a_savedmodel_is_a_clear_error(tmp_path, source, message):
    done = run_cli_in_process(["mode=evaluate", f"export.source={source}"], cwd=tmp_path)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FAILED"]
