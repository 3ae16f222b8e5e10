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
        said = [line for line in done.stdout.splitlines() if line.startswith("tfx_hydra evaluate: ")]
        origin = f" (the export of MLflow run {run.info.run_id})" if source.startswith("runs:/") else ""
        assert said[0].startswith("tfx_hydra evaluate: the SavedModel at ") and said[0].endswith(origin), said
        assert said[1] == ("tfx_hydra evaluate: on the test split of data=digits: 360 examples, inputs (8, 8), "
                           "10 classes"), said
    assert [p.name for p in temp.iterdir() if p.name.startswith("tfx_hydra")] == []  # nothing left behind
    evaluations = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("mode") == "evaluate"]
    (downloaded,) = [r for r in evaluations if r.data.tags["export.source"].startswith("runs:/")]
    assert downloaded.data.tags["export.source.path"].startswith(downloaded.data.params["paths.output_dir"])
    assert sorted(r.data.tags["export.source"] for r in evaluations) == sorted([folder, f"runs:/{run.info.run_id}"])
    for evaluation in evaluations:
        assert evaluation.info.status == "FINISHED"
        assert evaluation.data.metrics["test_accuracy"] == pytest.approx(run.data.metrics["test_accuracy"], abs=1e-6)
        assert evaluation.data.metrics["test_loss"] == pytest.approx(run.data.metrics["test_loss"], abs=1e-4)

    # the same export on data it cannot take: one DataError naming both sides, before any batch, the run FAILED
    for data, message in ((["data=synthetic", "data.input_shape=[16,16]"],
                           f"DataError: the model at {folder} takes inputs of shape [8, 8], but data=synthetic gives "
                           "examples of shape [16, 16]."),
                          (["data=synthetic", "data.num_classes=3"],
                           f"DataError: the model at {folder} predicts 10 classes, but data=synthetic has 3 classes.")):
        done = run_cli_in_process(["mode=evaluate", f"export.source={folder}", *data], cwd=tmp_path)
        assert done.returncode == 1 and message in done.stderr, done.stderr[-3000:]
        assert "Fix: evaluate it on the data it was trained on" in done.stderr and "Traceback" not in done.stderr
    failed = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("mode") == "evaluate" and r.info.status != "FINISHED"]
    assert [r.info.status for r in failed] == ["FAILED", "FAILED"]


@pytest.mark.parametrize("source,message", [
    ("/nonexistent/export", "ExportError: export.source=/nonexistent/export holds no SavedModel"),
    ("runs:/0123456789abcdef", "ExportError: export.source=runs:/0123456789abcdef: Run with id=0123456789abcdef "
                               "not found"),
])
def test_a_source_without_a_savedmodel_is_a_clear_error(tmp_path, source, message):
    done = run_cli_in_process(["mode=evaluate", f"export.source={source}"], cwd=tmp_path)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FAILED"]


def test_a_model_trained_in_bfloat16_is_exported_in_float32_to_every_format(tmp_path):
    """precision=bf16 (what precision=auto picks for images of 4,096 values or more on a CPU with AMX-BF16): TFLite
    and ONNX Runtime have no bfloat16 kernels for a convolution, and a bfloat16 graph answers 2e-4 away from the
    eager model it is checked against. Every export is written from the trained weights computing in float32."""
    done = run_cli_in_process(["data=digits", "model=cnn", "model.filters=[8]", "precision=bf16", "trainer.epochs=1",
                               "data.limit=300", "trainer.tensorboard=false", "export=[savedmodel,keras,tflite,onnx]",
                               "export.strict=true", "export.savedmodel.warmup_requests=0"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["precision.policy"] == "mixed_bfloat16"
    for kind in ("savedmodel", "tflite", "onnx"):
        assert float(run.data.tags[f"export.{kind}.max_abs_diff"]) <= 1e-5, kind
    import keras

    from tfx_hydra.export.keras import register_keras_classes

    register_keras_classes()
    saved = keras.models.load_model(run.data.tags["export.keras.path"], compile=False)
    assert {layer.dtype_policy.name for layer in saved.layers} <= {"float32"}
