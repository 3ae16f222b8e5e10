"""data=text_corpus and task=causal_lm's guards: a file's lines or a folder's files as a language model's examples
(each its own label), and the combinations that cannot train refused before any run exists."""

from __future__ import annotations

import pytest

from tests.helpers.in_process import run_cli_in_process
from tfx_hydra.data import text_corpus
from tfx_hydra.errors import DataError


def test_a_files_lines_are_the_examples_and_each_is_its_own_label(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"line number {i}\n\n" for i in range(100)))  # empty lines between: skipped
    data = text_corpus(str(path), batch_size=8, seed=0, validation_split=0.1, test_split=0.2)
    assert (data.num_train, data.num_validation, data.num_test) == (72, 8, 20)
    texts, labels = next(iter(data.train.unbatch().batch(1000)))
    assert [t.decode() for t in texts.numpy()] == [t.decode() for t in labels.numpy()]
    assert all(t.decode().startswith("line number ") for t in texts.numpy())
    assert data.spec.task.name == "causal_lm" and data.spec.input_dtype == "string"


def test_a_folders_files_are_one_example_each_and_an_empty_corpus_is_said(tmp_path):
    for i in range(12):
        (tmp_path / f"{i:02d}.txt").write_text(f"a story {i}\nin two lines\n")
    (tmp_path / "notes.md").write_text("not a .txt file")
    data = text_corpus(str(tmp_path), batch_size=2, seed=0, unit="file", validation_split=0.25, test_split=0.25)
    assert data.num_train + data.num_validation + data.num_test == 12
    texts, _ = next(iter(data.test.unbatch().batch(100)))
    assert all(t.decode().endswith("in two lines\n") for t in texts.numpy())

    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(DataError, match="holds no text"):
        text_corpus(str(empty), batch_size=2, seed=0)


@pytest.mark.fresh_store  # no store copied in: one made would say a run began
@pytest.mark.parametrize("args, said, fix", [
    (["task=causal_lm"], "data=digits and task=causal_lm do not go together", "task=causal_lm data=text_corpus"),
    (["data=text_corpus", "data.path=CORPUS", "model=text_baseline"], "data=text_corpus and task=classification",
     "task=causal_lm data=text_corpus"),
    (["task=causal_lm", "data=text_corpus", "data.path=CORPUS", "model=text_baseline"],
     "task=causal_lm trains a keras-hub decoder preset", "model=keras_hub model.task=causal_lm"),
    (["task=causal_lm", "data=text_corpus", "data.path=CORPUS", "model=keras_hub", "model.preset=PRESET",
      "model.task=causal_lm", "export=onnx"], "export=onnx: a causal LM", "export=savedmodel"),
    (["mode=evaluate", "export.source=PRESET", "task=causal_lm", "data=text_corpus", "data.path=CORPUS",
      "model=keras_hub", "model.preset=PRESET", "model.task=causal_lm"], "a causal LM answers generated text",
     "mode=train"),
])
def test_what_cannot_train_a_language_model_is_refused_before_any_run(tmp_path, args, said, fix):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\n" * 20)
    preset = tmp_path / "preset"
    preset.mkdir()
    (preset / "config.json").write_text("{}")  # a folder that looks like a preset: the refusal comes first
    done = run_cli_in_process([a.replace("CORPUS", str(corpus)).replace("PRESET", str(preset)) for a in args],
                              cwd=tmp_path)
    assert done.returncode == 1 and said in done.stderr and f"Fix: {fix}" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "mlflow.db").exists()  # before any run
