"""Tasks beyond classification through the real CLI (in process): binary, multilabel and regression runs
train, log their metrics and reports, export, are evaluated from their export, and their MLflow models
answer `mlflow models serve` with the task's outputs; a regression sweep minimises untold and a search
prunes on val_mae; a bad label is one error naming its row, the run FAILED."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import cli_env, mlflow_client, mlflow_runs, serve_on_a_free_port, stop_server
from tests.helpers.in_process import run_cli_in_process, run_in_process
from tests.helpers.search import parent_and_children, study_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_tasks")]

SMALL = ["data=synthetic", "data.input_shape=[6]", "data.num_examples=600", "trainer.epochs=5", "trainer.batch_size=16",
         "optimizer.learning_rate=0.01",
         "trainer.tensorboard=false", "model.units=32"]
TASKS = {  # task: (its overrides, the data line's labels, the metrics it logs, its reports)
    "binary": ([], "binary labels (0/1)", ("test_accuracy", "test_auc", "test_precision", "test_recall"),
               ("roc_curve.png", "precision_recall_curve.png", "binary_report.json")),
    "multilabel": (["data.num_classes=4"], "4 labels", ("test_accuracy", "test_f1_micro", "test_f1_macro", "test_auc"),
                   ("per_label_report.txt",)),
    "regression": (["data.num_classes=2"], "2 targets", ("test_loss", "test_mae", "test_rmse", "test_r2"),
                   ("predicted_vs_true.png", "residuals.png", "regression_report.json")),
}


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """One launch dir with a run of each task (its SavedModel, TFLite file and MLflow model)."""
    folder = tmp_path_factory.mktemp("tasks")
    for task, (overrides, *_) in TASKS.items():
        done = run_cli_in_process([f"task={task}", *SMALL, *overrides, "export=[savedmodel,tflite]",
                                   f"tracking.run_name={task}"], cwd=folder)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{TASKS[task][1]}; cache: memory, " in done.stdout, done.stdout  # the data step names the labels
    return folder


def run_of(launch, task):
    return next(r for r in mlflow_runs(launch) if r.info.run_name == task)


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_trains_logs_its_metrics_and_reports_and_exports(launch, task):
    run = run_of(launch, task)
    _, _, metrics, reports = TASKS[task]
    assert run.info.status == "FINISHED" and run.data.tags["task"] == task
    assert set(metrics) <= set(run.data.metrics), sorted(run.data.metrics)
    plots = {a.path for a in mlflow_client(launch).list_artifacts(run.info.run_id, "plots")}
    assert {f"plots/{name}" for name in reports} <= plots and "plots/confusion_matrix.png" not in plots
    assert run.data.metrics["objective"] == run.data.metrics[{"binary": "val_auc", "multilabel": "val_f1_macro",
                                                              "regression": "val_loss"}[task]]
    if task == "regression":  # learned: targets are ~50 +- 10, so a model that learned nothing errs by ~8
        assert run.data.metrics["test_mae"] < 6 and "export.tflite.neg_mae" in run.data.tags
    else:
        assert run.data.metrics["test_accuracy"] > 0.7 and "export.tflite.accuracy" in run.data.tags


@pytest.mark.parametrize("task", list(TASKS))
def test_evaluating_each_tasks_export_gives_the_runs_test_metrics(launch, task):
    run = run_of(launch, task)
    done = run_cli_in_process(["mode=evaluate", f"task={task}", *SMALL, *TASKS[task][0],
                               f"export.source={run.data.tags['export.savedmodel.path']}",
                               f"tracking.run_name=evaluate-{task}"], cwd=launch)
    assert done.returncode == 0, done.stderr[-3000:]
    evaluated = run_of(launch, f"evaluate-{task}").data.metrics
    for name in ("test_loss", "test_mae") if task == "regression" else ("test_loss", "test_accuracy"):
        assert evaluated[name] == pytest.approx(run.data.metrics[name], rel=1e-4, abs=1e-5), name


def test_mlflow_models_serve_answers_with_each_tasks_outputs(launch, tmp_path):
    env = cli_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{launch / 'mlflow.db'}"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]  # uvicorn, for --env-manager local
    inputs = np.random.default_rng(1).normal(size=(5, 6)).astype("float32")
    servers, answers = [], {}
    try:
        for task in TASKS:
            run_id = run_of(launch, task).info.run_id
            servers.append(serve_on_a_free_port(
                lambda port, run_id=run_id: [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
                                             f"runs:/{run_id}/model", "--env-manager", "local", "-h", "127.0.0.1",
                                             "-p", str(port)],
                tmp_path, env, tmp_path / f"serve-{task}.log", f"mlflow models serve ({task})"))
            request = urllib.request.Request(f"http://127.0.0.1:{servers[-1][1]}/invocations",
                                             data=json.dumps({"inputs": inputs.tolist()}).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request) as response:
                answers[task] = json.loads(response.read())["predictions"]
    finally:
        for server, _ in servers:
            stop_server(server)
    saved = {task: tf.saved_model.load(run_of(launch, task).data.tags["export.savedmodel.path"])
             .signatures["serving_default"](inputs=tf.constant(inputs)) for task in TASKS}
    binary = answers["binary"]  # the probability, the 0/1 decision at task.threshold, and its name
    np.testing.assert_allclose(binary["probabilities"], saved["binary"]["probabilities"].numpy(), atol=1e-5)
    decided = (np.asarray(binary["probabilities"]) >= 0.5).astype(int)
    assert np.array_equal(np.asarray(binary["class_index"]), decided)
    assert np.array_equal(np.asarray(binary["class"]), decided.astype(str))  # as text: "0", "1" (numbered)
    tags = answers["multilabel"]  # a score per label, the labels that apply, and their names
    assert np.asarray(tags["probabilities"]).shape == (5, 4)
    assert np.array_equal(np.asarray(tags["labels"]), saved["multilabel"]["labels"].numpy())
    assert tags["tags"] == saved["multilabel"]["tags"].numpy().astype(str).tolist()
    numbers = np.asarray(answers["regression"]["predictions"])  # in the targets' units (about 50), as the SavedModel
    np.testing.assert_allclose(numbers, saved["regression"]["predictions"].numpy(), rtol=1e-5)
    assert numbers.shape == (5, 2) and 20 < numbers.mean() < 80



@pytest.mark.parametrize("task", list(TASKS))
def test_tf_serving_s_rest_and_grpc_requests_are_answered_through_each_tasks_export(launch, task):
    """TF Serving's REST bodies (row and columnar, with signature_name, batch 1 and 5) and a gRPC PredictRequest
    (by version label), sent through JSON and protobuf as a client sends them and bound by name as the server
    binds them: each answers what the signature answers when called directly."""
    from tensorflow_serving.apis import predict_pb2

    from tfx_hydra.export.requests import answer_grpc, answer_rest, predict_request, rest_body, signature_of

    path = run_of(launch, task).data.tags["export.savedmodel.path"]
    signature = signature_of(path)
    assert list(signature.inputs) == ["inputs"] and signature.inputs["inputs"].shape == (None, 6)
    inputs = np.random.default_rng(2).normal(size=(5, 6)).astype("float32")
    for examples in (inputs[:1], inputs):
        direct = {name: value.numpy() for name, value in tf.saved_model.load(path).signatures["serving_default"](
            inputs=tf.constant(examples)).items()}
        row = answer_rest(path, json.loads(json.dumps(rest_body(signature, examples))))
        columnar = answer_rest(path, json.loads(json.dumps(rest_body(signature, examples, columnar=True))))
        if len(direct) == 1:  # one output: its values alone, as TF Serving answers
            (value,) = direct.values()
            np.testing.assert_allclose(row["predictions"], value, rtol=1e-5)
            np.testing.assert_allclose(columnar["outputs"], value, rtol=1e-5)
        else:  # several: each example's outputs by name (row), each output's batch by name (columnar)
            assert [set(p) for p in row["predictions"]] == [set(direct)] * len(examples)
            for name, value in direct.items():
                same(value, [p[name] for p in row["predictions"]])
                same(value, columnar["outputs"][name])
        request = predict_pb2.PredictRequest.FromString(
            predict_request(signature, examples, "mlp", version_label="stable").SerializeToString())
        assert request.model_spec.version_label == "stable" and request.model_spec.signature_name == "serving_default"
        response = answer_grpc(path, request)
        assert set(response.outputs) == set(direct)
        for name, value in direct.items():
            same(value, tf.make_ndarray(response.outputs[name]))


def same(expected: np.ndarray, answered) -> None:
    """An answer equal to the signature's own: numbers within float32's last digits, names exactly (as text)."""
    if expected.dtype.kind in "OSU":
        answered = np.asarray(answered)
        assert np.array_equal(answered.astype(str) if answered.dtype.kind != "O" else np.vectorize(
            lambda v: v.decode() if isinstance(v, bytes) else str(v))(answered), expected.astype(str))
    else:
        np.testing.assert_allclose(answered, expected, rtol=1e-5)

def test_a_regression_sweep_minimises_untold_and_a_search_prunes_on_val_mae(tmp_path):
    grid = run_cli_in_process(["task=regression", *SMALL, "trainer.epochs=2", "model.units=4,32", "export=none",
                               "export.mlflow_model=false"], cwd=tmp_path, multirun=True)
    assert grid.returncode == 0, grid.stderr[-3000:]
    runs = mlflow_runs(tmp_path)
    (parent,) = [r for r in runs if "sweep.dir" in r.data.tags]
    children = [r for r in runs if r is not parent]
    best = min(children, key=lambda c: c.data.metrics["val_loss"])
    assert parent.data.tags["sweep.best_run_id"] == best.info.run_id  # the lowest val_loss, not the highest
    assert parent.data.metrics["best_val_loss"] == best.data.metrics["val_loss"]
    assert "best val_loss" in grid.stdout  # the sweep's table names the task's objective

    search = tmp_path / "search"
    search.mkdir()
    done = run_cli_in_process(["hparams_search=optuna", "hparams_search.n_trials=4", "task=regression", *SMALL,
                               "sweep.metric=val_mae", "optimizer.learning_rate=choice(0.00001,0.01)",
                               "hparams_search.pruner_args={n_startup_trials:1,n_warmup_steps:0}",
                               "export=none", "export.mlflow_model=false", "trainer.backup=false"],
                              cwd=search, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    study = study_of(search, "mlp-synthetic")
    assert study.direction.name == "MINIMIZE"
    client, parent, children = parent_and_children(search)
    for trial in study.trials:  # each epoch's val_mae reported to the pruner
        run = next(c for c in children if c.data.tags["optuna.trial"] == str(trial.number))
        history = [m.value for m in client.get_metric_history(run.info.run_id, "epoch/val_mae")]
        assert list(trial.intermediate_values.values()) == pytest.approx(history)
    assert parent.data.tags["optuna.best_trial"] == str(min(
        (t for t in study.trials if t.value is not None), key=lambda t: t.value).number)


def test_a_bad_label_is_one_error_naming_its_row_and_the_run_fails(tmp_path):
    rows = "".join(f"{i / 10},{(i * 7) % 5 / 4},{i % 2}\n" for i in range(40))
    table = tmp_path / "t.csv"
    table.write_text("a,b,churned\n" + rows.replace("0.3,0.25,1", "0.3,0.25,3"))
    done = run_cli_in_process(["task=binary", "data=csv", f"data.path={table}", "data.label_column=churned",
                               "data.input_shape=[2]", "trainer.epochs=1"], cwd=tmp_path)
    assert done.returncode == 1
    assert f"DataError: task=binary: {table}, row 5, has label 3, not 0 or 1." in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert [r.info.status for r in mlflow_runs(tmp_path)] == ["FAILED"]


def write_tagged_images(folder: Path, count: int = 120, seed: int = 0) -> Path:
    """folder/images/<n>.png, 16x16 RGB, and folder/tags.csv: each image shows what its tags say (red: a red
    tint; bar: a bright horizontal bar; dot: a bright square), any of them or none."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True)
    rows = ["file,tags"]
    for n in range(count):
        tags = [t for t in ("bar", "dot", "red") if rng.random() < 0.5]
        image = rng.integers(0, 60, size=(16, 16, 3)).astype("uint8")
        if "red" in tags:
            image[..., 0] = 220
        if "bar" in tags:
            image[7:9, :, :] = 255
        if "dot" in tags:
            image[2:5, 11:14, :] = 255
        Image.fromarray(image).save(folder / "images" / f"{n:03d}.png")
        rows.append(f"{n:03d}.png,{';'.join(tags)}")
    (folder / "tags.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_the_multilabel_images_recipe_tags_images_from_a_csv(tmp_path):
    data = write_tagged_images(tmp_path / "data")
    done = run_cli_in_process(["experiment=multilabel_images", f"data.directory={data / 'images'}",
                               f"data.labels_csv={data / 'tags.csv'}", "data.num_classes=3",
                               "data.input_shape=[16,16,3]", "data.augmentation.flip=null",
                               "optimizer.learning_rate=0.01", "trainer.tensorboard=false",
                               "export.mlflow_model=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"data: image_folder, .* examples; inputs \(16, 16, 3\), 3 labels; cache: memory", done.stdout)
    (run,) = mlflow_runs(tmp_path)
    assert run.data.tags["task"] == "multilabel" and run.data.metrics["test_f1_macro"] > 0.8
    serve = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    assert set(serve.structured_outputs) == {"probabilities", "labels", "tags"}
    assert run.data.tags["data.class_names"] == '["bar", "dot", "red"]'  # the tags of labels_csv, sorted


def test_a_regression_run_is_reproduced_from_its_id_with_its_task(tmp_path):
    from tfx_hydra import reproduce

    done = run_cli_in_process(["task=regression", *SMALL, "data.num_classes=2", "trainer.deterministic=true",
                               "export=none", "export.mlflow_model=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (original,) = mlflow_runs(tmp_path)
    again = run_in_process(reproduce.main, ["tfx-hydra-reproduce", original.info.run_id], cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    (copy,) = [r for r in mlflow_runs(tmp_path) if r.info.run_id != original.info.run_id]
    assert copy.data.tags["reproduced_from"] == original.info.run_id and copy.data.tags["task"] == "regression"
    for key in ("val_loss", "test_mae", "test_rmse", "test_r2"):  # the same task, data and seed: the same numbers
        assert copy.data.metrics[key] == pytest.approx(original.data.metrics[key], rel=1e-5), key
