"""task=causal_lm end to end, offline, through the how-to's own commands: tiny presets the tests save with keras-hub
itself -- a GPT-2-shaped one (a byte-level BPE) and a Llama-shaped one (a SentencePiece model trained here, the LM
pretrained here) -- fine-tuned on a text file through the real CLI: LoRA adapters only (the page's command), or every
weight; perplexity per epoch and on the test split (over the tokens, not the padding); served: the SavedModel's
generate loaded in a fresh process (the page's snippet), the MLflow model over HTTP (`mlflow models serve`, the page's
request) and through `mlflow.pyfunc` answer a prompt with its continuation; and the page's Optuna search over the LoRA
rank and the learning rate, with pruned trials."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cli_env, mlflow_client, mlflow_runs, serve_on_a_free_port, stop_server
from tests.helpers.in_process import run_cli_in_process
from tests.helpers.presets import save_pretrained_tiny_llama_preset, save_tiny_causal_lm_preset
from tests.helpers.search import PRUNE_EARLY, assert_pruned_trials_look_pruned, parent_and_children, study_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_keras_hub")]
SENTENCES = ["the cat sat on the mat", "a dog ran in the park"]
HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "causal-lm.md"


def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES * 100) + "\n")
    return path


def page_commands() -> list[list[str]]:
    """The how-to's commands, as its page gives them: each `python -m tfx_hydra` line's arguments."""
    blocks = [block.split("```", 1)[0] for block in HOW_TO.read_text().split("```bash")[1:]]
    lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [shlex.split(line)[3:] for line in lines if line.startswith("python -m tfx_hydra")]


def on_this_machine(args: list[str], preset: Path, text: Path) -> list[str]:
    """The page's placeholders made this test's files."""
    return [a.replace("/path/to/preset", str(preset)).replace("/path/to/corpus.txt", str(text)) for a in args]


def page_snippet(language: str, holding: str) -> str:
    """The page's code block in `language` that holds `holding`."""
    blocks = [block.split("```", 1)[0] for block in HOW_TO.read_text().split(f"```{language}\n")[1:]]
    (block,) = [block for block in blocks if holding in block]
    return block


def test_the_pages_lora_command_on_a_pretrained_llama_shaped_preset_trains_the_adapters_and_answers_over_http(
        tmp_path):
    """The how-to's command as it stands, on a Llama-shaped preset (a SentencePiece tokenizer) the test pretrained:
    keras-hub's low-rank adapters are all that trains (the preset's weights frozen) and the perplexity falls; the
    page's Python snippet loads the SavedModel in a fresh process, and the MLflow model answers the page's request
    over HTTP (`mlflow models serve`), the prompt continued the same way."""
    import keras_hub

    preset = save_pretrained_tiny_llama_preset(tmp_path / "tiny_llama", SENTENCES)
    fine_tune, _ = page_commands()
    assert "model.lora_rank=4" in fine_tune
    done = run_cli_in_process(on_this_machine(fine_tune, preset, corpus(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    expected = keras_hub.models.CausalLM.from_preset(str(preset))
    expected.backbone.enable_lora(4)
    adapters = sum(int(np.prod(w.shape)) for w in expected.trainable_weights)
    assert 0 < adapters < expected.count_params() / 3
    assert run.data.tags["model.params.trainable"] == str(adapters)
    assert run.data.params["model.lora_rank"] == "4"
    curve = [m.value for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/perplexity")]
    assert curve[-1] < curve[0]

    savedmodel = run.data.tags["export.savedmodel.path"]
    snippet = page_snippet("python", "tf.saved_model.load").replace("outputs/.../export/keras_hub/1", savedmodel)
    assert savedmodel in snippet
    fresh = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=cli_env())
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    continued = re.search(r"\[b'([^']*)'\]", fresh.stdout).group(1)  # tf.Tensor([b'the cat ...'], ...)
    assert continued.split()[:3] == SENTENCES[0].split()[:3]  # the prompt, continued

    serving = page_snippet("text", "mlflow models serve").splitlines()
    serve, request = [line for line in serving if line.startswith(("mlflow", "curl"))]
    assert "-d '{\"inputs\": [\"the cat\"]}'" in request
    env = cli_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
                       "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    server, port = serve_on_a_free_port(
        lambda port: [str(Path(sys.executable).parent / "mlflow"),
                      *shlex.split(serve.replace("<run id>", run.info.run_id))[1:-2], "-h", "127.0.0.1", "-p",
                      str(port)], tmp_path, env, tmp_path / "serve.log", "mlflow models serve", timeout=180)
    try:
        answers = [ask(port, body) for body in (shlex.split(request)[-1],
                                                 '{"dataframe_split": {"columns": ["prompt"], "data": [["a dog"]]}}')]
    finally:
        stop_server(server)
    assert answers[0]["predictions"]["text"] == [continued]  # what the SavedModel answered
    assert answers[1]["predictions"]["text"][0].split()[:3] == SENTENCES[1].split()[:3]


def test_every_weight_of_a_gpt2_shaped_preset_fine_tuned_reports_perplexity_and_generates_the_sentences(tmp_path):
    """The page's command with every weight trained (model.lora_rank=null) on a GPT-2-shaped preset (a byte-level
    BPE) never pretrained: it learns the two sentences; the loss and the perplexity over the tokens, not the padding;
    the SavedModel in a fresh process and the MLflow model through `mlflow.pyfunc` write each sentence from its
    first two words."""
    import mlflow

    preset = save_tiny_causal_lm_preset(tmp_path / "tiny_gpt2")
    fine_tune, _ = page_commands()
    done = run_cli_in_process([*on_this_machine(fine_tune, preset, corpus(tmp_path)), "model.lora_rank=null",
                               "trainer.epochs=8", "optimizer.learning_rate=0.02", "trainer.tensorboard=false"],
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    metrics, tags = run.data.metrics, run.data.tags
    curve = [m.value for m in mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch/val_perplexity")]
    assert len(curve) == 8 and curve[-1] < curve[0] / 3  # it learns the two sentences
    # over the tokens, not the padding: the loss and the perplexity both (batches of unequal tokens: not exact)
    assert metrics["test_perplexity"] == pytest.approx(math.exp(metrics["test_loss"]), rel=0.02)
    assert "perplexity" in done.stdout and tags["model.preset.folder"] == str(preset)

    assert tags["export.savedmodel.same_text"] == "1"
    fresh = subprocess.run([sys.executable, "-c", (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "generate = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "texts = generate(prompts=tf.constant(['the cat', 'a dog']))['text'].numpy()\n"
        "print(json.dumps([t.decode() for t in texts]))"), tags["export.savedmodel.path"]],
        capture_output=True, text=True, env=cli_env())
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout.splitlines()[-1]) == SENTENCES  # the prompt, and the rest of its sentence
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")  # put back after the test (global_state)
    logged = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    assert list(logged.predict(np.asarray(["the cat", "a dog"], dtype=object))["text"]) == SENTENCES


def ask(port: int, body: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def test_the_pages_search_tunes_the_lora_rank_and_the_learning_rate_by_val_perplexity_and_prunes(tmp_path):
    """The how-to's search command, cut to 4 trials of 2 epochs, the learning rate narrowed to one that learns and
    one that cannot, the pruner told to judge from the first trial on: trials ranked by their own perplexity, and
    those behind at an epoch pruned there."""
    preset = save_tiny_causal_lm_preset(tmp_path / "tiny_gpt2")
    _, search = page_commands()
    done = run_cli_in_process([*on_this_machine(search, preset, corpus(tmp_path)), "hparams_search.n_trials=4",
                               "trainer.epochs=2", "optimizer.learning_rate=choice(0.0000001,0.02)",
                               *PRUNE_EARLY, "trainer.tensorboard=false", "export.mlflow_model=false"],
                              cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model.lora_rank" in done.stdout
    client, parent, trials = parent_and_children(tmp_path)
    assert len(trials) == 4
    assert {r.data.params["model.lora_rank"] for r in trials} <= {"2", "4", "8"}
    study = study_of(tmp_path, parent.data.tags["optuna.study"])
    assert assert_pruned_trials_look_pruned(study, client, trials, epochs=2, metric="val_perplexity",
                                            tested="test_perplexity") >= 1
    for trial in trials:  # each ranked by its own perplexity, minimised
        if trial.data.tags["optuna.state"] == "COMPLETE":
            assert trial.data.metrics["objective"] == trial.data.metrics["val_perplexity"]
