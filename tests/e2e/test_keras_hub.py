"""model=keras_hub end to end, offline: tiny presets the tests save with keras-hub itself (a BERT-shaped text encoder
with a WordPiece vocabulary of the reviews' words), fine-tuned from their folders through the real CLI -- the head
first, then the backbone -- recorded (the preset's digest, keras-hub's version, the tokenizer), served from raw
strings by a SavedModel loaded in a fresh process, evaluated from its export, refused by reproduce once the preset's
files change; and trained on two replicas under mixed precision. The served forms against raw files, over HTTP
too, are test_served_parity.py's keras_hub rows."""

from __future__ import annotations

import json
import subprocess
import sys

import keras_hub
import numpy as np
import pytest

from tests.helpers import cli_env, mlflow_runs, write_text_folder
from tests.helpers.in_process import run_cli_in_process, run_in_process
from tests.helpers.presets import save_tiny_text_preset
from tfx_hydra import reproduce
from tfx_hydra.models.presets import preset_digest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_keras_hub")]
REVIEWS = ["A great and lovely film, really warm.", "Awful, boring and dull: a sad plot."]


def text_run(tmp_path, *extra: str) -> list[str]:
    folder = write_text_folder(tmp_path / "reviews")
    preset = save_tiny_text_preset(tmp_path / "tiny_bert")
    return ["model=keras_hub", f"model.preset={preset}", "data=text_folder", f"data.directory={folder}",
            "data.num_classes=2", "trainer.tensorboard=false", *extra]


def test_a_text_preset_is_fine_tuned_in_two_phases_recorded_served_from_raw_strings_and_guarded(tmp_path):
    overrides = text_run(tmp_path, "trainer.epochs=2", "trainer.finetune_epochs=4", "trainer.finetune_lr=0.01",
                         "optimizer.learning_rate=0.01", "trainer.batch_size=8", "export=[savedmodel,keras]")
    done = run_cli_in_process(overrides, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (first,) = mlflow_runs(tmp_path)
    tags, preset = first.data.tags, tmp_path / "tiny_bert"
    assert first.info.status == "FINISHED"
    vocabulary = (preset / "assets" / "tokenizer" / "vocabulary.txt").read_text().splitlines()
    assert tags["model.preset.digest"] == preset_digest(str(preset))
    assert (tags["model.preset.folder"], tags["keras_hub.version"]) == (str(preset), keras_hub.__version__)
    assert (tags["model.vocabulary_size"], tags["model.sequence_length"]) == (str(len(vocabulary)), "16")
    assert f"vocabulary {len(vocabulary)}, sequences of 16" in done.stdout
    assert first.data.metrics["test_accuracy"] >= 0.8  # the words say the class, once the backbone trains too
    assert "fine-tuning: backbone unfrozen" in done.stdout

    # the second phase trained the backbone itself: its weights left the preset's
    import keras

    from tfx_hydra.export.keras import register_keras_classes

    register_keras_classes()
    trained = keras.models.load_model(tags["export.keras.path"], compile=False)
    start = keras_hub.models.Backbone.from_preset(str(preset))
    embedding = trained.get_layer("backbone").get_layer("token_embedding").get_weights()[0]
    assert not np.allclose(embedding, start.get_layer("token_embedding").get_weights()[0])
    assert list(trained.predict(np.asarray(REVIEWS, dtype=object), verbose=0).argmax(axis=1)) == [1, 0]

    # the SavedModel, in a fresh process as a serving one is: raw strings in, names out (TensorFlow Text's ops load)
    code = ("import sys, json, tensorflow as tf; from tfx_hydra.export.served import load_saved_model; "
            "serve = load_saved_model(sys.argv[1]).signatures['serving_default']; "
            "print(json.dumps([c.decode() for c in serve(inputs=tf.constant(sys.argv[2:]))['class'].numpy()]))")
    fresh = subprocess.run([sys.executable, "-c", code, tags["export.savedmodel.path"], *REVIEWS], env=cli_env(),
                           capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout.strip().splitlines()[-1]) == ["pos", "neg"]

    evaluated = run_cli_in_process([*overrides, "mode=evaluate", f"export.source={tags['export.savedmodel.path']}",
                                    "tracking.run_name=evaluate"], cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (evaluation,) = [r for r in mlflow_runs(tmp_path) if r.info.run_name == "evaluate"]
    assert evaluation.data.metrics["test_accuracy"] == pytest.approx(first.data.metrics["test_accuracy"], abs=1e-6)

    # reproduce re-runs from the same preset files only
    same = run_in_process(reproduce.main, ["tfx-hydra-reproduce", first.info.run_id, "--dry-run"], cwd=tmp_path)
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    (preset / "assets" / "tokenizer" / "vocabulary.txt").write_text("\n".join([*vocabulary, "extra"]) + "\n")
    changed = run_in_process(reproduce.main, ["tfx-hydra-reproduce", first.info.run_id, "--dry-run"], cwd=tmp_path)
    assert changed.returncode == 1
    said = changed.stdout + changed.stderr
    assert f"ReproduceError: run {first.info.run_id} cannot be reproduced: the keras-hub preset folder {preset} " \
           "changed since the run" in said.replace("\n", " ")
    assert tags["model.preset.digest"][:12] in said


# Two logical CPUs, set before TensorFlow starts, then the CLI: in a process of its own, since collective ops of a
# strategy that ended leave state in the process that a later test's MirroredStrategy would collide with.
TWO_REPLICAS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tfx_hydra.__main__ import main
sys.argv = ["tfx-hydra", *sys.argv[1:]]
main()
"""


def test_a_text_preset_trains_on_two_replicas_under_mixed_precision(tmp_path):
    overrides = text_run(tmp_path, "strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:1]", "precision=bf16",
                         "trainer.epochs=2", "model.freeze_backbone=false", "export=none")
    done = subprocess.run([sys.executable, "-c", TWO_REPLICAS, *overrides], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = mlflow_runs(tmp_path)
    tags = record.data.tags
    assert record.info.status == "FINISHED"
    assert (tags["strategy"], tags["strategy.replicas"], tags["precision.policy"]) == \
        ("MirroredStrategy", "2", "mixed_bfloat16")
    assert np.isfinite(record.data.metrics["test_loss"])


def tickets(folder, rows: int = 120):
    """A table of raw texts whose words say every label: a 0/1 flag (urgent), tags (billing, urgent), a score."""
    rng = np.random.default_rng(3)
    lines = []
    for _ in range(rows):
        urgent, billing = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        words = ["now asap"] * urgent + ["invoice refund"] * billing + ["hello there"]
        tags = [tag for tag, on in (("billing", billing), ("urgent", urgent)) if on]
        lines.append({"text": " ".join(words), "urgent": int(urgent), "tags": ";".join(tags),
                      "score": 1.0 + 2.0 * urgent + 1.0 * billing})
    path = folder / "tickets.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("task, label, outputs", [
    ("binary", ["data.label_column=urgent"], {"probabilities", "class_index", "class"}),
    ("multilabel", ["data.label_column=tags", "data.label_delimiter=';'"], {"probabilities", "labels", "tags"}),
    ("regression", ["data.label_column=score"], {"predictions"}),
])
def test_a_text_preset_under_each_task_trains_with_the_tasks_head_and_serves_raw_strings(tmp_path, task, label,
                                                                                         outputs):
    """The preset's backbone under tfx_hydra's head for the task (one sigmoid, a sigmoid per tag, a linear output),
    fine-tuned through the CLI on a table of raw texts: it learns what the words say, and its SavedModel answers raw
    strings with the task's outputs."""
    import tensorflow as tf

    preset = save_tiny_text_preset(tmp_path / "tiny_bert", words=["now", "asap", "invoice", "refund", "hello", "there"],
                                   hidden_dim=16)  # two words' features at once (hidden 8 learns one tag)
    done = run_cli_in_process(["model=keras_hub", f"model.preset={preset}", "model.freeze_backbone=false",
                               "data=text_table", f"data.path={tickets(tmp_path)}", f"task={task}", *label,
                               "trainer.epochs=8", "optimizer.learning_rate=0.01", "trainer.batch_size=16",
                               "trainer.tensorboard=false", "export=savedmodel", "export.mlflow_model=false"],
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["task"] == task
    served = tf.saved_model.load(run.data.tags["export.savedmodel.path"]).signatures["serving_default"]
    assert set(served.structured_outputs) == outputs
    answer = served(inputs=tf.constant(["now asap invoice refund hello there", "hello there"]))
    if task == "binary":
        assert run.data.metrics["test_accuracy"] >= 0.9
        assert answer["class_index"].numpy().ravel().tolist() == [1, 0]
    elif task == "multilabel":
        assert run.data.metrics["test_f1_macro"] >= 0.9 and run.data.tags["data.class_names"] == \
            '["billing", "urgent"]'
        tags = [[tag.decode() for tag in row if tag] for row in answer["tags"].numpy()]  # "" pads a row's tags
        assert tags == [["billing", "urgent"], []]
    else:  # scores 1 to 4, said by the words
        assert run.data.metrics["test_r2"] > 0.6 and run.data.metrics["test_mae"] < 0.6
        urgent_billing, neither = answer["predictions"].numpy().ravel()
        assert urgent_billing - neither > 1.5  # 4 and 1: in the targets' units
