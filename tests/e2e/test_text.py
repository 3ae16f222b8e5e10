"""Raw text through the real CLI (in process): a folder of .txt files into the TextVectorization baseline
(its vocabulary from the training split alone), a JSON Lines table of tagged texts, a BERT-shaped TF Hub
pair frozen then fine-tuned; every export takes raw strings, and the exports that cannot carry string ops
are refused before any work."""

from __future__ import annotations

import json
import re

import keras
import mlflow.pyfunc
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import mlflow_client, mlflow_runs, save_tiny_text_hub_models, write_text_folder
from tests.helpers.in_process import run_cli_in_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_text")]
REVIEWS = ["A great and lovely film, really warm.", "Awful, boring and dull: a sad plot."]


def only_run(launch):
    (run,) = mlflow_runs(launch)
    assert run.info.status == "FINISHED", run.data.tags.get("error")
    return run


def test_the_text_recipe_learns_a_folder_of_texts_and_its_exports_take_raw_strings(tmp_path, monkeypatch):
    folder = write_text_folder(tmp_path / "reviews")
    done = run_cli_in_process(["experiment=text_classification", f"data.directory={folder}", "data.num_classes=2",
                               "export=[savedmodel,keras]", "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "data: text_folder, 57 train / 7 validation / 16 test examples; inputs (), 2 classes" in done.stdout
    run = only_run(tmp_path)
    assert run.data.metrics["test_accuracy"] >= 0.85

    # the vocabulary is the training split's words, and only theirs (validation and test stay unseen)
    from tfx_hydra.data import text_folder

    train = text_folder(str(folder), 2, batch_size=8, seed=42).train
    words = {w for text, _ in train.unbatch().as_numpy_iterator()
             for w in re.sub(r"[^\w\s]", "", text.decode().lower()).split()}
    model = keras.models.load_model(run.data.tags["export.keras.path"])
    assert set(model.get_layer("vectorize").get_vocabulary()[2:]) == words

    serve = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    served = serve(inputs=tf.constant(REVIEWS))  # raw strings in, TF Serving's way
    assert served["class_index"].numpy().tolist() == [1, 0]  # pos, neg (class folders in sorted order)
    assert served["class"].numpy().tolist() == [b"pos", b"neg"]  # by the folders' names
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    logged = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")  # the MLflow model takes strings too
    answered = logged.predict(np.asarray(REVIEWS, dtype=object))
    np.testing.assert_allclose(answered["probabilities"], served["probabilities"].numpy(), atol=1e-5)
    assert list(answered["class"]) == ["pos", "neg"]  # as text, beside the indices

    # TF Serving's requests of raw strings (a JSON body, a gRPC PredictRequest) bind to the string input
    from tfx_hydra.export.requests import answer_grpc, answer_rest, predict_request, rest_body, signature_of

    path = run.data.tags["export.savedmodel.path"]
    signature = signature_of(path)
    assert signature.inputs["inputs"].shown() == "string of shape [None]"
    body = json.loads(json.dumps(rest_body(signature, REVIEWS)))
    assert body["instances"] == list(REVIEWS)
    assert [(p["class"], p["class_index"]) for p in answer_rest(path, body)["predictions"]] == [("pos", 1), ("neg", 0)]
    response = answer_grpc(path, predict_request(signature, REVIEWS, "text"))
    assert tf.make_ndarray(response.outputs["class"]).tolist() == [b"pos", b"neg"]


def test_a_jsonl_table_of_tagged_texts_trains_a_multilabel_baseline(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(90):
        tags = sorted({t for t in ("sport", "money", "food") if rng.random() < 0.45})
        words = [w for t in tags for w in {"sport": ["goal", "match"], "money": ["bank", "price"],
                                           "food": ["bread", "soup"]}[t]] + ["today", "news"]
        lines.append(json.dumps({"id": len(lines), "body": " ".join(rng.permutation(words)), "tags": ";".join(tags)}))
    table = tmp_path / "news.jsonl"
    table.write_text("\n".join(lines) + "\n")
    done = run_cli_in_process(["task=multilabel", "data=text_table", f"data.path={table}", "data.text_column=body",
                               "data.label_column=tags", "data.label_delimiter=';'", "data.num_classes=3",
                               "model=text_baseline", "trainer.epochs=30", "optimizer.learning_rate=0.01",
                               "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run(tmp_path)
    assert run.data.metrics["test_f1_macro"] > 0.8
    plots = {a.path for a in mlflow_client(tmp_path).list_artifacts(run.info.run_id, "plots")}
    assert "plots/per_label_report.txt" in plots


def test_a_hub_text_encoder_is_trained_frozen_then_fine_tuned_and_serves_raw_text(tmp_path):
    folder = write_text_folder(tmp_path / "reviews")
    preprocess, encoder = save_tiny_text_hub_models(tmp_path)
    done = run_cli_in_process(["experiment=bert_text", f"data.directory={folder}", "data.num_classes=2",
                               f"model.handle={encoder}", f"model.preprocess_handle={preprocess}",
                               "optimizer.learning_rate=0.05", "trainer.finetune_lr=0.01", "trainer.batch_size=8",
                               "export=[savedmodel,keras]", "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fine-tuning: backbone unfrozen (5 trainable weights)" in done.stdout
    run = only_run(tmp_path)
    assert len(mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/val_loss")) == 4  # 2 frozen + 2 tuned
    import tfx_hydra.models.layers  # noqa: F401  (registers HubLayer for loading)

    model = keras.models.load_model(run.data.tags["export.keras.path"])
    original = tf.saved_model.load(encoder).embedding.numpy()
    tuned = next(w for w in model.get_layer("backbone").weights if "embeddings" in w.name).numpy()
    assert not np.allclose(tuned, original)  # the encoder itself was fine-tuned
    serve = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    probabilities = serve(inputs=tf.constant(REVIEWS))["probabilities"].numpy()
    assert probabilities.shape == (2, 2) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)


def test_a_text_model_with_an_export_that_cannot_carry_strings_is_refused_before_any_work(tmp_path):
    folder = write_text_folder(tmp_path / "reviews", per_class=4)
    done = run_cli_in_process(["experiment=text_classification", f"data.directory={folder}", "data.num_classes=2",
                               "export=[savedmodel,tflite]"], cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "ConfigError: export=tflite cannot carry a text model" in done.stderr
    assert "tfx_hydra hardware:" not in done.stdout  # before TensorFlow's first step
    assert mlflow_runs(tmp_path) == []  # a preflight error: no run was started
