"""presets: where a keras-hub preset is on this machine, what it is, and how to get one -- without TensorFlow.

A preset is data, like the data set: a folder keras-hub writes with `save_to_preset` (config.json, the weights,
the preprocessor's and tokenizer's files). `model.preset` names a folder, or a keras-hub preset name
(`bert_tiny_en_uncased`) or handle (`kaggle://keras/bert/keras/bert_tiny_en_uncased/2`, `hf://owner/name`) that
keras-hub has already downloaded into its cache here. A run never downloads one: a download without the
internet hangs until its timeout, and a run that fetched its own model could not say what it trained from. A
preset that is not here is one ConfigError in preflight with the command that fetches and saves it where the
internet is.

The run records the preset's folder and a digest of its files (`preset_digest`); `reproduce` compares it with
the folder today.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os

from tfx_hydra.errors import ConfigError

# model.task -> the keras-hub preprocessor class the preset is loaded with, and whether its inputs are text
TASKS = {
    "text_classifier": ("TextClassifierPreprocessor", True),
    "image_classifier": ("ImageClassifierPreprocessor", False),
    "causal_lm": ("CausalLMPreprocessor", True),  # a decoder preset (GPT-2, Gemma, Llama): task=causal_lm
}
MARKER = "config.json"  # the backbone's config: every preset folder has one
BUILDER = "tfx_hydra.models.keras_hub"
INSTALL = 'pip install "tfx_hydra[keras-hub]" (keras-hub and TensorFlow Text, matching TensorFlow)'


def require_preset_here(model, data) -> None:
    """model=keras_hub before any run exists: keras-hub installed, the preset on this machine (a folder, or a
    download keras-hub cached), the task one the data's inputs fit."""
    language_model = data.get("task") == "causal_lm"
    if str(model.get("_target_", "")) != BUILDER:
        if language_model:
            raise ConfigError("task=causal_lm trains a keras-hub decoder preset's language model.",
                              fix="model=keras_hub model.task=causal_lm model.preset=<a GPT-2, Gemma or Llama preset>")
        return
    kind = resolve_task(model.get("task"), data.get("inputs") == "text")
    if (kind == "causal_lm") != language_model:
        raise ConfigError(f"model.task={kind} and task={data.get('task')} do not go together: a causal LM learns its "
                          "text's next tokens (task=causal_lm), a classifier its labels.",
                          fix="model.task=causal_lm task=causal_lm data=text_corpus" if language_model or
                          kind == "causal_lm" else "model.task=null")
    require_keras_hub()
    preset_folder(model.get("preset"), kind)


def require_keras_hub() -> None:
    """keras-hub is installed (found without importing it: that would import TensorFlow)."""
    if importlib.util.find_spec("keras_hub") is None:
        raise ConfigError("model=keras_hub needs keras-hub, which is not installed.", fix=INSTALL)


def require_task_fits(task: str, text_data: bool, data_said: str) -> None:
    """A preset loaded for text on images, or for images on text, is refused naming both (`data_said`: the data
    option, or its inputs)."""
    text_task = TASKS[task][1]
    if text_task != text_data:
        raise ConfigError(f"model.task={task} takes {'raw text' if text_task else 'images'}, but {data_said} gives "
                          f"{'raw text' if text_data else 'numbers'}.",
                          fix="model.task=null (the classifier for the data's inputs)")


def resolve_task(task: str | None, text_data: bool) -> str:
    """`model.task`, or (null) the classifier for the data's inputs."""
    from tfx_hydra.settings.checks import require_choice

    if task is None:
        return "text_classifier" if text_data else "image_classifier"
    require_choice("model.task", task, tuple(TASKS), fix="null")  # null: the classifier for the data's inputs
    return task


def preset_folder(preset: str, task: str = "text_classifier") -> str:
    """The folder `preset` names on this machine: itself, or keras-hub's cached download of that name or
    handle; else the ConfigError that says how to fetch it (for `task`'s preprocessor)."""
    if not isinstance(preset, str) or not preset:
        raise ConfigError("model=keras_hub needs model.preset: a keras-hub preset folder (or a preset already "
                          "downloaded on this machine).", fix="model.preset=/abs/path/to/preset_folder")
    path = os.path.abspath(os.path.expanduser(preset))
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, MARKER)):
            raise ConfigError(f"model.preset={preset}: {path} is a folder but not a keras-hub preset (it has no "
                              f"{MARKER}).", fix="point model.preset at the folder save_to_preset wrote")
        return path
    if looks_like_a_path(preset):
        raise ConfigError(f"model.preset={preset} does not exist.", fix="model.preset=/abs/path/to/preset_folder")
    cached = cached_preset(preset)
    if cached:
        return cached
    raise ConfigError(
        f"model.preset={preset} is not on this machine: keras-hub would download it, and a run never does "
        "(without the internet a download hangs until it times out).",
        fix=f"where the internet is, run {fetch_command(preset, task)} , copy the folder here and pass "
        f"model.preset=/abs/path/{folder_name(preset)}")


def looks_like_a_path(preset: str) -> bool:
    return preset.startswith((".", "/", "~")) or (os.sep in preset and "://" not in preset)


def folder_name(preset: str) -> str:
    """The folder the fetch command writes: the preset's last word (`bert_tiny_en_uncased`)."""
    parts = [part for part in preset.split("://")[-1].split("/") if part and not part.isdigit()]
    return parts[-1] if parts else "preset"


def fetch_command(preset: str, task: str = "text_classifier") -> str:
    """The shell command that downloads `preset` and saves its backbone and `task`'s preprocessor into one
    folder (keras-hub's save_to_preset), ready for model.preset."""
    preprocessor = TASKS[task][0]
    folder = folder_name(preset)
    return (f"python -c \"import keras_hub as h; h.models.Backbone.from_preset('{preset}').save_to_preset('{folder}'); "
            f"h.models.{preprocessor}.from_preset('{preset}').save_to_preset('{folder}')\"")


def cached_preset(preset: str) -> str | None:
    """keras-hub's download of `preset` on this machine: Kaggle's cache (a name: any model's variation of that
    name, its highest version; a kaggle:// handle: that one) or Hugging Face's (hf://owner/name)."""
    if preset.startswith("hf://"):
        home = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
        pattern = os.path.join(home, "models--" + preset[len("hf://"):].replace("/", "--"), "snapshots", "*")
    else:
        home = os.environ.get("KAGGLEHUB_CACHE", os.path.expanduser("~/.cache/kagglehub"))
        handle = preset[len("kaggle://"):] if preset.startswith("kaggle://") else None
        pattern = os.path.join(home, "models", *(handle.split("/") if handle else ["*", "*", "keras", preset]))
        if handle is None or len(handle.split("/")) == 4:  # no version given: any, the highest wins
            pattern = os.path.join(pattern, "*")
    found = [os.path.dirname(p) for p in glob.glob(os.path.join(pattern, MARKER))]
    return max(found, key=_version_key) if found else None


def _version_key(path: str):
    last = os.path.basename(path)
    return (int(last) if last.isdigit() else -1, path)


def preset_digest(folder: str) -> str:
    """sha256 of the preset's files (their paths within the folder and their bytes, in name order): what the run
    fine-tuned from, compared by reproduce."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode() + b"\0")
            with open(path, "rb") as content:
                for block in iter(lambda: content.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def preset_record(model) -> tuple[str, dict[str, str]]:
    """The model line's words for the keras-hub preset a built model holds ('; preset ...') and its tags, from
    what its PresetPreprocessor recorded of itself; ("", {}) for a model without one."""
    for layer in model._flatten_layers():
        facts = getattr(layer, "preset", None)
        if isinstance(facts, dict) and facts:
            return f"; {preset_said(facts)}", preset_tags(facts)
    return "", {}


def preset_tags(facts: dict) -> dict[str, str]:
    """A PresetPreprocessor's record (keras_hub.recorded) as the run's tags: what reproduce compares."""
    names = {"preset": "model.preset", "folder": "model.preset.folder", "digest": "model.preset.digest",
             "keras_hub": "keras_hub.version", "vocabulary_size": "model.vocabulary_size",
             "sequence_length": "model.sequence_length", "image_size": "model.image_size"}
    return {names[key]: str(value) for key, value in facts.items() if key in names}


def preset_said(facts: dict) -> str:
    """The model line's words for a preset: 'preset bert_tiny (digest 1a2b3c4d5e6f, keras-hub 0.32.0), vocabulary
    30,522, sequences of 128'."""
    said = f"preset {facts['preset']} (digest {facts['digest'][:12]}, keras-hub {facts['keras_hub']})"
    if "vocabulary_size" in facts:
        said += f", vocabulary {facts['vocabulary_size']:,}"
    if "sequence_length" in facts:
        said += f", sequences of {facts['sequence_length']}"
    if "image_size" in facts:
        said += f", images resized to {'x'.join(map(str, facts['image_size']))}"
    return said


def preset_changed(tags: dict[str, str]) -> str | None:
    """For reproduce: None when the run fine-tuned no preset or its folder holds the same files today, else
    what changed (the reason the re-run is refused)."""
    folder, then = tags.get("model.preset.folder"), tags.get("model.preset.digest")
    if not folder or not then:
        return None
    if not os.path.isfile(os.path.join(folder, MARKER)):
        return f"the keras-hub preset the run fine-tuned, {folder}, is not on this machine any more"
    now = preset_digest(folder)
    if now != then:
        return (f"the keras-hub preset folder {folder} changed since the run (digest {then[:12]} then, {now[:12]} "
                "now): the re-run would fine-tune another model")
    return None
