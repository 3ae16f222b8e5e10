"""model=keras_hub's presets, before TensorFlow: found on this machine (a folder, keras-hub's Kaggle or Hugging Face
cache) or refused with the command that fetches one, digested, and compared by reproduce. The folders here are
laid out as keras-hub and kagglehub write them; nothing is downloaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import cli_env
from tfx_hydra.errors import ConfigError
from tfx_hydra.models.presets import (
    fetch_command,
    preset_changed,
    preset_digest,
    preset_folder,
    preset_tags,
    require_task_fits,
    resolve_task,
)


def a_preset(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"class_name": "BertBackbone"}')
    (folder / "assets" / "tokenizer").mkdir(parents=True)
    (folder / "assets" / "tokenizer" / "vocabulary.txt").write_text("[PAD]\n[UNK]\ngood\n")
    return folder


def test_a_folder_is_its_own_preset_and_a_folder_without_a_config_is_refused(tmp_path):
    assert preset_folder(str(a_preset(tmp_path / "tiny"))) == str(tmp_path / "tiny")
    (tmp_path / "photos").mkdir()
    with pytest.raises(ConfigError, match=r"photos is a folder but not a keras-hub preset \(it has no config.json\)"):
        preset_folder(str(tmp_path / "photos"))
    with pytest.raises(ConfigError, match="model.preset=./nowhere does not exist"):
        preset_folder("./nowhere")


def test_a_name_is_found_in_keras_hubs_kaggle_cache_at_its_highest_version(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path))
    for version in ("1", "2"):
        a_preset(tmp_path / "models" / "keras" / "bert" / "keras" / "bert_tiny_en_uncased" / version)
    found = tmp_path / "models" / "keras" / "bert" / "keras" / "bert_tiny_en_uncased"
    assert preset_folder("bert_tiny_en_uncased") == str(found / "2")
    assert preset_folder("kaggle://keras/bert/keras/bert_tiny_en_uncased/1") == str(found / "1")


def test_a_hugging_face_handle_is_found_in_its_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = a_preset(tmp_path / "models--someone--tiny-bert" / "snapshots" / "abc123")
    assert preset_folder("hf://someone/tiny-bert") == str(snapshot)


def test_a_preset_not_here_is_refused_with_the_command_that_fetches_and_saves_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as refused:
        preset_folder("vit_base_patch16_224_imagenet", "image_classifier")
    said = str(refused.value)
    assert "a run never does" in said
    assert fetch_command("vit_base_patch16_224_imagenet", "image_classifier") in said
    assert "h.models.ImageClassifierPreprocessor.from_preset('vit_base_patch16_224_imagenet')" in said
    assert "model.preset=/abs/path/vit_base_patch16_224_imagenet" in said


def test_the_fetch_command_is_python_that_parses():
    command = fetch_command("kaggle://keras/bert/keras/bert_tiny_en_uncased/2")
    code = command.split('python -c "', 1)[1].rstrip('"')
    compile(code, "fetch", "exec")
    assert ".save_to_preset('bert_tiny_en_uncased')" in code


def test_the_task_follows_the_data_unless_given():
    assert resolve_task(None, text_data=True) == "text_classifier"
    assert resolve_task(None, text_data=False) == "image_classifier"
    with pytest.raises(ConfigError, match="model.task=segmenter"):
        resolve_task("segmenter", True)
    assert resolve_task("causal_lm", True) == "causal_lm"  # a decoder preset's language model (task=causal_lm)
    require_task_fits("image_classifier", False, "data=image_folder")
    with pytest.raises(ConfigError, match=r"model.task=image_classifier takes images, but data=text_folder gives raw "
                                          r"text.\n  Fix: model.task=null"):
        require_task_fits("image_classifier", True, "data=text_folder")


def test_the_digest_changes_with_any_byte_or_file_and_reproduce_names_the_change(tmp_path):
    folder = a_preset(tmp_path / "tiny")
    before = preset_digest(str(folder))
    assert preset_digest(str(folder)) == before
    tags = preset_tags({"preset": "tiny", "folder": str(folder), "digest": before, "keras_hub": "0.32.0",
                        "vocabulary_size": 3, "sequence_length": 16})
    assert tags["model.preset.digest"] == before and tags["model.vocabulary_size"] == "3"
    assert preset_changed(tags) is None
    (folder / "assets" / "tokenizer" / "vocabulary.txt").write_text("[PAD]\n[UNK]\nbad\n")
    assert "changed since the run" in preset_changed(tags)
    (folder / "extra.txt").write_text("")
    assert preset_digest(str(folder)) != before
    (folder / "config.json").unlink()
    assert "is not on this machine any more" in preset_changed(tags)
    assert preset_changed({}) is None  # a run of another model


def test_a_missing_preset_fails_in_preflight_before_any_run_or_store_exists(tmp_path):
    (tmp_path / "work").mkdir()
    done = subprocess.run([sys.executable, "-m", "tfx_hydra", "model=keras_hub", "model.preset=bert_tiny_en_uncased",
                           "data=text_folder", f"data.directory={tmp_path}", "data.num_classes=2"],
                          cwd=tmp_path / "work", env=cli_env() | {"KAGGLEHUB_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "ConfigError: model.preset=bert_tiny_en_uncased is not on this machine" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "work" / "mlflow.db").exists()  # no store, so no run: Hydra's job folder is all there is
