"""The CLI end to end: `python -m tfx_hydra` in a subprocess, then the MLflow store read back."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import QUICK, artifact_paths, cli_env, mlflow_client, mlflow_runs, tensorboard_runs
from tests.helpers.in_process import run_cli_in_process

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_cli")]


# the default's MLflow model too; system metrics every second (the default 10 s outlasts a quick run)
DEFAULT_RUN = [*QUICK, "export.mlflow_model=true", "tracking.system_metrics.interval=1"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """One quick default run shared by the assertions below (a real run takes ~15 s here)."""
    launch = tmp_path_factory.mktemp("default")
    done = run_cli_in_process(DEFAULT_RUN, cwd=launch)
    assert done.returncode == 0, done.stderr[-3000:]
    return launch, done


def test_default_run_prints_a_summary(default_run):
    launch, done = default_run
    (run,) = mlflow_runs(launch)
    assert "tfx_hydra: run complete" in done.stdout
    assert run.info.run_id in done.stdout
    assert f"cd {launch} && mlflow ui" in done.stdout
    assert re.search(r"epoch 2/2 .* val_accuracy \d\.\d{4} .* [\d,]+ ex/s", done.stdout)


def test_hydras_job_log_holds_every_line_the_terminal_showed(default_run):
    launch, done = default_run
    (run,) = mlflow_runs(launch)
    (log,) = Path(run.data.tags["resume.backup_dir"]).parent.glob("*.log")  # <output dir>/tfx_hydra.log
    assert log.name == "tfx_hydra.log"  # named after the app
    logged = log.read_text()
    for line in done.stdout.splitlines():  # the epoch lines, the summary table, the browse command
        if line.strip():
            assert line.removeprefix("tfx_hydra ").removeprefix("warning ") in logged, line
    assert re.search(r"\]\[tfx_hydra\]\[INFO\] - epoch 2/2 .* val_accuracy \d\.\d{4}", logged)
    assert re.search(r"\]\[tfx_hydra\]\[INFO\] - tfx_hydra: run complete\n.*test_accuracy", logged, re.DOTALL)
    assert f"browse: cd {launch} && mlflow ui" in logged


def test_default_run_is_recorded_in_mlflow(default_run):
    launch, _ = default_run
    (run,) = mlflow_runs(launch)
    client = mlflow_client(launch)
    assert run.info.status == "FINISHED"
    assert re.fullmatch(r"mlp-digits \d\d:\d\d:\d\d", run.info.run_name)  # the UI's list tells runs apart
    params = run.data.params
    assert params["trainer.epochs"] == "2" and params["data.limit"] == "300"
    assert params["model._target_"] == "tfx_hydra.models.mlp" and params["model.input_shape"] == "[8, 8]"
    assert "hydra.run.dir" not in params
    # the settings a user can set, not null placeholders of what is unset (the whole config: config_resolved.yaml)
    assert "tracking.uri" not in params and "None" not in params.values() and len(params) < 120, len(params)
    tags = run.data.tags
    assert tags["hydra.overrides"] == " ".join(DEFAULT_RUN)
    assert tags["command"] == "python -m tfx_hydra " + " ".join(DEFAULT_RUN)
    assert tags["env.tensorflow"] == tf.__version__ and tags["env.keras"].startswith("3.")
    assert tags["hardware.requested"] == "auto" and tags["hardware.profile"] == "cpu"
    assert tags["hardware.profile_reason"] == "no GPU is visible" and tags["strategy.replicas"] == "1"
    assert tags["precision.policy"] == "float32" and tags["git.commit"].startswith("none")
    val_accuracy = client.get_metric_history(run.info.run_id, "epoch/val_accuracy")
    assert [m.step for m in val_accuracy] == [0, 1]
    assert 0.1 < run.data.metrics["test_accuracy"] <= 1.0
    assert run.data.metrics["examples_per_sec"] > 0
    artifacts = artifact_paths(client, run.info.run_id)
    assert {".hydra/config.yaml", ".hydra/overrides.yaml", ".hydra/hydra.yaml", "config_resolved.yaml",
            "environment/packages.txt", "export/mlp/1/saved_model.pb"} <= artifacts
    assert run.data.tags["mlflow.model_uri"] == f"runs:/{run.info.run_id}/model"
    # MLflow 3's conventions: a logged model output by the run, its final metrics linked to it and
    # to the split each was measured on; MLflow's own system tags; a model-training experiment
    (output,) = run.outputs.model_outputs
    logged = client.get_logged_model(output.model_id)
    assert str(logged.status) == "READY" and logged.source_run_id == run.info.run_id
    linked = {m.key: m for m in logged.metrics}
    assert linked["test_accuracy"].value == run.data.metrics["test_accuracy"]
    assert linked["test_accuracy"].dataset_name == "digits-test"
    assert linked["val_loss"].dataset_name == "digits-validation"
    assert not [k for k in linked if k.startswith("system/") or k.endswith("_seconds")]
    assert "MLmodel" in {a.path for a in client.list_logged_model_artifacts(output.model_id)}
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"]
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


def test_every_epoch_says_its_flop_rate_and_mfu_against_the_peak_and_mlflow_keeps_both(default_run):
    """The default MLP (digits' 8x8 inputs, 128 hidden units, 10 classes): its step counted from XLA's HLO as the
    analytic count says; each epoch's line and MLflow's per-epoch `tflops`/`mfu` follow from its examples/s and the
    measured CPU peak; the summary says the run's rate with the peak's source."""
    launch, done = default_run
    (run,) = mlflow_runs(launch)
    tags, client = run.data.tags, mlflow_client(launch)
    forward = 2 * (64 * 128 + 128 * 10)  # per example: the two layers' matmuls
    training = 2 * forward + 2 * 128 * 10  # + each layer's weight gradient, + the second layer's input gradient
    assert float(tags["model.flops_per_example.forward"]) == forward
    assert float(tags["model.flops_per_example.training"]) == training
    assert tags["model.flops.counted"] == "XLA's optimized HLO: dot and convolution ops"
    assert tags["peak.source"] == "measured: a 2048x2048 float32 matmul on this CPU" and tags["peak.dtype"] == "fp32"
    peak = float(tags["peak.flops_per_second"])
    assert peak == pytest.approx(2 * 2048**3 / float(tags["peak.measured_seconds"]), rel=2e-3)  # its matmul's time
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", tags["peak.measured_at"])
    history = {name: [m.value for m in sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)]
               for name in ("examples_per_sec", "tflops", "mfu")}
    assert len(history["mfu"]) == 2
    for rate, tflops, mfu in zip(history["examples_per_sec"], history["tflops"], history["mfu"]):
        assert tflops == pytest.approx(training * rate / 1e12, rel=1e-6)
        assert mfu == pytest.approx(tflops * 1e12 / peak, rel=1e-3)
    lines = re.findall(r"epoch \d/2 .* ex/s .*  ([\d.]+) GFLOP/s  mfu ([\d.]+)%", done.stdout)
    assert len(lines) == 2, done.stdout[-3000:]
    assert float(lines[1][1]) == pytest.approx(history["mfu"][1] * 100, rel=0.05)
    assert re.search(r"│ compute +│ [\d.]+ GFLOP/s, mfu [\d.]+% of [\d.]+ [GT]FLOP/s fp32 \(measured: a 2048x2048 "
                     r"float32 matmul on this CPU\)", done.stdout), done.stdout[-3000:]


def test_default_run_logs_its_plots_and_objective(default_run):
    launch, _ = default_run
    (run,) = mlflow_runs(launch)
    client = mlflow_client(launch)
    assert run.data.metrics["objective"] == run.data.metrics["val_accuracy"]  # sweep.metric's final value
    assert {"plots/training_curves.png", "plots/confusion_matrix.png", "plots/confusion_matrix.csv"} <= \
        artifact_paths(client, run.info.run_id)
    folder = Path(client.download_artifacts(run.info.run_id, "plots", str(launch / "downloaded")))
    assert (folder / "training_curves.png").read_bytes()[:4] == b"\x89PNG"
    matrix = np.loadtxt(folder / "confusion_matrix.csv", delimiter=",", dtype=int, skiprows=1,
                        usecols=range(1, 11))  # a header of the predicted classes' names, the true one's first
    assert matrix.shape == (10, 10)  # digits: 10 classes
    assert np.trace(matrix) / matrix.sum() == pytest.approx(run.data.metrics["test_accuracy"], abs=1e-6)


def test_default_run_exports_in_tf_serving_layout(default_run):
    launch, _ = default_run
    (run,) = mlflow_runs(launch)
    export_path = Path(run.data.tags["export.savedmodel.path"])
    assert export_path.parent.name == "mlp" and export_path.name == "1"
    assert export_path.parent.parent.name == "export" and (export_path / "saved_model.pb").is_file()
    assert export_path.is_relative_to(launch / "outputs")
    loaded = tf.saved_model.load(str(export_path))
    assert "serving_default" in loaded.signatures


def test_default_run_records_system_metrics_and_the_data_it_read(default_run):
    launch, _ = default_run
    (run,) = mlflow_runs(launch)
    client = mlflow_client(launch)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= set(run.data.metrics)
    cpu = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert len(cpu) >= 3 and [m.step for m in cpu] == list(range(len(cpu)))
    gaps = np.diff(sorted(m.timestamp for m in cpu)) / 1000
    assert 0.5 < float(np.median(gaps)) < 3.0, gaps  # tracking.system_metrics.interval=1 honoured
    inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"training", "validation", "test"}
    assert inputs["training"].name == "digits-train" and len(inputs["training"].digest) == 16
    assert '"num_examples": 300' in inputs["training"].profile  # data.limit=300: what was read


def test_one_tensorboard_command_shows_single_runs(default_run):
    launch, _ = default_run
    runs = tensorboard_runs(launch)  # the README's command, as TensorBoard reads it
    assert any(re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/[\d-]+/tensorboard/(train|validation)", r) for r in runs), runs


def test_headline_command_on_a_machine_without_an_a100(tmp_path):
    # also: tracking.system_metrics.enabled=false records no system metric
    done = run_cli_in_process(["hardware=a100", "precision=mixed", *QUICK, "tracking.system_metrics.enabled=false",
                    "tracking.system_metrics.interval=1"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hardware=a100 expects 1 GPU matching 'A100' with at least 39 GiB; found no GPU (CPU only)" in done.stdout
    assert "Carrying on with the a100 profile's settings" in done.stdout
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.tags["hardware.mismatch"].startswith("hardware=a100 expects 1 GPU")
    assert run.data.tags["precision.policy"] == "mixed_float16"
    assert not [k for k in run.data.metrics if k.startswith("system/")]


def test_seed_experiment_on_a_local_mnist_file(tmp_path, mnist_npz):
    done = run_cli_in_process(["experiment=seed_mnist_mlp", f"data.path={mnist_npz}", "trainer.epochs=1"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert (run.data.params["data._target_"], run.data.params["data.name"]) == ("tfx_hydra.data.keras_dataset", "mnist")
    assert run.info.run_name.startswith("mlp-mnist ")  # named by the options the experiment preset chose
    assert run.data.params["model.input_shape"] == "[28, 28]"
    assert run.data.metrics["test_accuracy"] > 0.5  # the bars are learnable in one epoch


@pytest.mark.fresh_store
def test_cnn_and_tracking_none(tmp_path):
    done = run_cli_in_process(["model=cnn", "tracking=none", "export=none", *QUICK], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not tracked (tracking=none" in done.stdout
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_console_script_runs_like_the_module(tmp_path):
    script = Path(sys.executable).parent / "tfx-hydra"
    done = subprocess.run([str(script), "trainer.epochs=7", "--cfg", "job"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "epochs: 7" in done.stdout


# SIGTERM here; Ctrl-C (SIGINT) takes the same path, tested in a sweep by tests/e2e/test_faults.py.
@pytest.mark.parametrize("signum,reason", [(signal.SIGTERM, "SIGTERM")])
def test_ctrl_c_or_sigterm_during_training_ends_the_run_killed_with_its_backup(tmp_path, signum, reason):
    command = [sys.executable, "-m", "tfx_hydra", "data=synthetic", "data.num_examples=20000",
               "trainer.epochs=500", "export=none"]
    process = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:  # wait until epoch 1 is over and logged
        if line.startswith("epoch 2/500"):
            break
    process.send_signal(signum)
    rest = process.stdout.read()
    process.wait(timeout=60)
    assert process.returncode == 128 + signum  # the shell's convention: 143 for SIGTERM, 130 for Ctrl-C
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"
    assert run.data.tags["error"] == f"interrupted ({reason})"
    assert len(mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/loss")) >= 1
    backup = run.data.tags["resume.backup_dir"]
    assert Path(backup).is_dir()  # kept: the same command resumes it
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest  # an interrupt, not a crash
    assert rest.rstrip().splitlines()[-1] == (
        f"tfx_hydra: interrupted ({reason}): MLflow run {run.info.run_id} is KILLED, its last completed epoch backed "
        f"up in {backup}; resume it with: python -m tfx_hydra {' '.join(command[3:])}")


def test_several_exports_are_verified_and_logged(tmp_path):
    done = run_cli_in_process(["export=[savedmodel,tflite,onnx,keras]", "export.tflite.quantization=float16", *QUICK],
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    figures = {k: float(v) for k, v in run.data.tags.items() if k.split(".")[-1] in (
        "max_abs_diff", "accuracy", "keras_accuracy", "size_bytes", "version")}  # what the files are: tags
    assert figures["export.onnx.max_abs_diff"] < 1e-5 and figures["export.keras.max_abs_diff"] < 1e-5
    assert abs(figures["export.tflite.accuracy"] - figures["export.tflite.keras_accuracy"]) < 0.05
    assert figures["export.tflite.size_bytes"] > 0 and figures["export.savedmodel.version"] == 1
    assert not [k for k in run.data.metrics if k.startswith("export.")]  # never charted beside the epochs
    assert run.data.tags["export.failed"] == "0"
    artifacts = artifact_paths(mlflow_client(tmp_path), run.info.run_id)
    assert {"export/mlp.tflite", "export/mlp.onnx", "export/mlp.keras",  # as on disk, under export/
            "export/mlp/1/saved_model.pb"} <= artifacts
    output_dir = Path(run.data.params["paths.output_dir"])
    assert all((output_dir / path).exists() for path in ("export/mlp.tflite", "export/mlp.onnx", "export/mlp.keras"))
    assert "FutureWarning" not in done.stderr  # tf2onnx's np.object notice: in the job log, not the terminal


def test_the_runs_table_and_the_logged_model_show_the_kept_weights_figures_and_the_epochs_keep_their_curves(tmp_path):
    """Early stopping keeps epoch 1's weights (mode=max on a falling val_loss: epoch 2 never improves on it; its
    restore puts epoch 1 back). The runs table's val_* (what a search and a comparison sort by) and the logged
    model's linked metrics are the summary's, those weights', not the last epoch's; the epochs' own figures are
    the epoch/<name> curves."""
    done = run_cli_in_process(["trainer.epochs=2", "trainer.early_stopping.enabled=true",
                               "trainer.early_stopping.mode=max", "trainer.early_stopping.patience=0",
                               "export=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "weights: kept epoch 1 of 2 (best val_loss" in done.stdout
    summary = {row.split("│")[1].strip(): row.split("│")[2].strip() for row in done.stdout.splitlines()
               if row.startswith("│")}
    client = mlflow_client(tmp_path)
    (run,) = client.search_runs([client.get_experiment_by_name("tfx_hydra").experiment_id])  # the runs table
    curve = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "epoch/val_loss")}
    assert sorted(curve) == [0, 1] and curve[0] > curve[1]  # each epoch's, under its own name
    for name in ("val_loss", "val_accuracy", "test_loss", "test_accuracy"):
        assert f"{run.data.metrics[name]:.4f}" == summary[name], name
    assert run.data.metrics["val_loss"] == pytest.approx(curve[0], abs=1e-6)  # epoch 1's: the weights kept
    model = client.get_logged_model(run.data.tags["mlflow.logged_model_id"])
    linked = {m.key: m.value for m in model.metrics}
    assert {k: linked[k] for k in summary if k in linked} == {k: run.data.metrics[k] for k in summary if k in linked}
    assert {"val_loss", "val_accuracy", "test_loss"} <= set(linked) and not any(k.startswith("epoch/") for k in linked)
