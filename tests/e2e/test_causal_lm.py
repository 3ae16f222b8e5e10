"""task=causal_lm end to end, offline: tiny presets the tests save with keras-hub itself -- a GPT-2-shaped one (a
byte-level BPE) and a Llama-shaped one (a SentencePiece model trained here, the LM pretrained here) -- fine-tuned on a
text file through the real CLI: every weight, or LoRA adapters only; perplexity per epoch and on the test split (over
the tokens, not the padding); served: the SavedModel's generate loaded in a fresh process, the MLflow model over HTTP
(`mlflow models serve`) and through `mlflow.pyfunc` answer a prompt with its continuation; and the Optuna search over
the LoRA rank and the learning rate."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cli_env, mlflow_client, mlflow_runs, serve_on_a_free_port, stop_server
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.presets import save_pretrained_tiny_llama_preset, save_tiny_causal_lm_preset

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_keras_hub")]
SENTENCES = ["the cat sat on the mat", "a dog ran in the park"]
HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "causal-lm.md"


def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES * 100) + "\n")
    return path


def page_command() -> list[str]:
    """The how-to's fine-tuning command, as its page gives it: its overrides."""
    lines = HOW_TO.read_text().split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ").splitlines()
    (command,) = [line.strip() for line in lines if line.strip().startswith("python -m tfx_hydra")]
    return command.split()[3:]


def test_a_causal_lm_is_fine_tuned_on_a_text_file_reports_perplexity_and_generates_where_served(tmp_path):
    preset = save_tiny_causal_lm_preset(tmp_path / "tiny_gpt2")
    text = corpus(tmp_path)
    overrides = [o.replace("/path/to/tiny_gpt2", str(preset)).replace("/path/to/corpus.txt", str(text))
                 for o in page_command()]
    assert "model.lora_rank=null" not in overrides
    done = run_cli_in_process([*overrides, "model.lora_rank=null", "trainer.epochs=8", "optimizer.learning_rate=0.02",
                               "trainer.tensorboard=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    metrics, tags = run.data.metrics, run.data.tags
    curve = [m.value for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/val_perplexity")]
    assert len(curve) == 8 and curve[-1] < curve[0] / 3  # it learns the two sentences
    # over the tokens, not the padding: the loss and the perplexity both (batches of unequal tokens: not exact)
    assert metrics["test_perplexity"] == pytest.approx(math.exp(metrics["test_loss"]), rel=0.02)
    assert "perplexity" in done.stdout and tags["model.preset.folder"] == str(preset)

    served = tags["export.savedmodel.path"]
    assert tags["export.savedmodel.same_text"] == "1"
    fresh = subprocess.run([sys.executable, "-c", (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "generate = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "texts = generate(prompts=tf.constant(['the cat', 'a dog']))['text'].numpy()\n"
        "print(json.dumps([t.decode() for t in texts]))"), served], capture_output=True, text=True, env=cli_env())
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout.splitlines()[-1]) == SENTENCES  # the prompt, and the rest of its sentence

    env = cli_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
                       "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    server, port = serve_on_a_free_port(
        lambda port: [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
                      f"runs:/{run.info.run_id}/model", "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        tmp_path, env, tmp_path / "serve.log", "mlflow models serve", timeout=180)
    try:
        answers = [ask(port, body) for body in ('{"inputs": ["the cat", "a dog"]}',
                                                 '{"dataframe_split": {"columns": ["prompt"], "data": [["a dog"]]}}')]
    finally:
        stop_server(server)
    assert answers[0]["predictions"]["text"] == SENTENCES
    assert answers[1]["predictions"]["text"] == SENTENCES[1:]


def ask(port: int, body: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def test_lora_on_a_pretrained_llama_shaped_preset_trains_the_adapters_only_and_serves_its_generate(tmp_path):
    """model.lora_rank on a Llama-shaped preset (a SentencePiece tokenizer) the test pretrained: keras-hub's low-rank
    adapters are all that trains (the preset's weights frozen), the perplexity falls, and the SavedModel loaded in a
    fresh process and the MLflow model answer the same text, the prompt continued."""
    import keras_hub
    import mlflow

    preset = save_pretrained_tiny_llama_preset(tmp_path / "tiny_llama", SENTENCES)
    done = run_cli_in_process(["model=keras_hub", f"model.preset={preset}", "model.task=causal_lm", "task=causal_lm",
                               "model.lora_rank=2", "model.max_length=24", "data=text_corpus",
                               f"data.path={corpus(tmp_path)}", "trainer.epochs=2", "trainer.batch_size=16",
                               "optimizer.learning_rate=0.01", "trainer.tensorboard=false", "export=savedmodel"],
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    expected = keras_hub.models.CausalLM.from_preset(str(preset))
    expected.backbone.enable_lora(2)
    adapters = sum(int(np.prod(w.shape)) for w in expected.trainable_weights)
    assert 0 < adapters < expected.count_params() / 3
    assert run.data.tags["model.params.trainable"] == str(adapters)
    assert run.data.params["model.lora_rank"] == "2"
    curve = [m.value for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/perplexity")]
    assert curve[-1] < curve[0]

    fresh = subprocess.run([sys.executable, "-c", (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "generate = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "texts = generate(prompts=tf.constant(['the cat', 'a dog']))['text'].numpy()\n"
        "print(json.dumps([t.decode() for t in texts]))"), run.data.tags["export.savedmodel.path"]],
        capture_output=True, text=True, env=cli_env())
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    served = json.loads(fresh.stdout.splitlines()[-1])
    assert [text.split()[:3] for text in served] == [s.split()[:3] for s in SENTENCES]  # the prompt, continued
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")  # put back after the test (global_state)
    logged = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    assert list(logged.predict(np.asarray(["the cat", "a dog"], dtype=object))["text"]) == served


def test_the_optuna_search_tunes_the_lora_rank_and_the_learning_rate_by_val_perplexity(tmp_path):
    preset = save_tiny_causal_lm_preset(tmp_path / "tiny_gpt2")
    done = run_cli_in_process(["hparams_search=optuna", "hparams_search.n_trials=3", "model=keras_hub",
                               f"model.preset={preset}", "model.task=causal_lm", "task=causal_lm",
                               "model.lora_rank=choice(2,4)", "data=text_corpus", f"data.path={corpus(tmp_path)}",
                               "trainer.epochs=2", "trainer.tensorboard=false", "export=none",
                               "export.mlflow_model=false"], cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "searching optimizer.learning_rate" in done.stdout and "model.lora_rank" in done.stdout
    runs = mlflow_runs(tmp_path)
    trials = [r for r in runs if r.info.run_name.startswith("trial ")]
    assert len(trials) == 3 and len(runs) == 4  # the search's parent and one child per trial
    assert {r.data.params["model.lora_rank"] for r in trials} <= {"2", "4"}
    for trial in trials:  # each ranked by its own perplexity, minimised
        assert trial.data.metrics["objective"] == trial.data.metrics["val_perplexity"]
