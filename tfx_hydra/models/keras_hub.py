"""model=keras_hub: a keras-hub preset's backbone and its own preprocessor, under the task's head.

`model.preset` is a preset folder (keras-hub's `save_to_preset`) or a preset keras-hub has downloaded here
(presets.py finds it; a run never downloads). `model.task` picks what the preset is loaded for: a text
classifier (raw strings in: the preset's tokenizer and packer), an image classifier (pixels in: the preset's
image converter resizes and scales them). The model is built as tfx_hydra's other models are -- one functional
Keras model -- so the preprocessor is its first layer (layers.PresetPreprocessor) and every served form takes the
raw inputs a client has, which keras-hub's own export does not do. The backbone is the layer the fine-tuning
phase unfreezes (backbone.py); the head is the task's (heads.py): classification, binary, multi-label or
regression alike.
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.backbone import BACKBONE
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.models.presets import (
    TASKS,
    preset_digest,
    preset_folder,
    require_keras_hub,
    require_task_fits,
    resolve_task,
)
from tfx_hydra.settings.checks import require_positive_or_null, require_range


def keras_hub(name, preset, input_shape, num_classes, task=None, head="softmax", freeze_backbone=True,
              sequence_length=None, pixel_scale=255.0, dropout=0.1, lora_rank=None, max_length=64, sampler="greedy"):
    """The preset's backbone (`backbone`, frozen while `freeze_backbone`) behind its preprocessor for `task`
    (null: the data's kind), pooled to one vector (BERT's pooled output, a sequence's first token, an image's
    average), then `dropout` and the task's head. `sequence_length`: the tokenizer's packed length (null: the
    preset's). `pixel_scale`: what the model's image inputs are multiplied by to give 0-255 pixels (the image
    sources feed [0, 1]: 255), which the preset's converter then scales as it was trained."""
    import keras
    import tensorflow as tf

    from tfx_hydra.models.layers import PresetPreprocessor

    text = len(tuple(input_shape)) == 0
    kind = resolve_task(task, text)
    require_task_fits(kind, text, f"data with inputs {list(input_shape)}")  # a source of the user's: not preflighted
    require_range("model.dropout", dropout, 0.0, 1.0, 0.1, high_inclusive=False)
    require_positive_or_null("model.sequence_length", sequence_length, 128, "the preset's")
    folder = preset_folder(preset, kind)
    require_keras_hub()
    import keras_hub as hub
    preprocessor = load_preprocessor(hub, kind, folder, sequence_length)
    if kind == "causal_lm":
        return causal_lm(hub, preset, folder, preprocessor, lora_rank, max_length, sampler)
    backbone = hub.models.Backbone.from_preset(folder, dtype=keras.config.dtype_policy().name)
    backbone.name = BACKBONE
    backbone.trainable = not freeze_backbone

    if text:
        inputs = x = keras.Input(shape=(), dtype="string", name="inputs")
        example = tf.constant(["a"])
    else:
        from tfx_hydra.models.blocks import image_inputs

        inputs, x = image_inputs(input_shape, "keras_hub", channels=3)
        if pixel_scale != 1:
            x = keras.layers.Rescaling(float(pixel_scale), name="to_pixels")(x)
        example = tf.zeros((1, *x.shape[1:]), tf.float32)
    layer = PresetPreprocessor(preprocessor, preset=recorded(preset, folder, hub, preprocessor), name="preprocessor")
    layer.probe(example)
    features = backbone(layer(x), training=False) if freeze_backbone else backbone(layer(x))
    x = pooled(features)
    if dropout:
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


def load_preprocessor(hub, kind: str, folder: str, sequence_length: int | None):
    """`kind`'s preprocessor from the preset folder: its own (preprocessor.json), or the one keras-hub pairs with
    the backbone, built on the preset's tokenizer or image converter."""
    cls = getattr(hub.models, TASKS[kind][0])
    extra = {"sequence_length": sequence_length} if sequence_length else {}
    try:
        return cls.from_preset(folder, **extra)
    except Exception as err:  # a preset of another kind (an image backbone for text), a broken folder
        raise ConfigError(f"model.preset={folder} has no {TASKS[kind][0]} keras-hub can build "
                          f"({type(err).__name__}: {str(err).splitlines()[0][:200]}).",
                          fix="model.task=<the preset's kind>, or save the preprocessor into the preset folder "
                          f"(keras_hub.models.{TASKS[kind][0]}.from_preset(...).save_to_preset(folder))") from None


def recorded(preset: str, folder: str, hub, preprocessor) -> dict:
    """What the run records of its preset: the name given, the folder, a digest of its files, keras-hub's
    version, the tokenizer's vocabulary size and packed length (text) or the converter's image size."""
    tokenizer = getattr(preprocessor, "tokenizer", None)
    converter = getattr(preprocessor, "image_converter", None)
    facts = {"preset": str(preset), "folder": folder, "digest": preset_digest(folder), "keras_hub": hub.__version__}
    if tokenizer is not None:
        facts["vocabulary_size"] = int(tokenizer.vocabulary_size())
    if getattr(preprocessor, "sequence_length", None):
        facts["sequence_length"] = int(preprocessor.sequence_length)
    if converter is not None and getattr(converter, "image_size", None):
        facts["image_size"] = [int(side) for side in converter.image_size]
    return facts


def pooled(features):
    """One vector per example from what the backbone answers: BERT's `pooled_output`, a sequence's first token
    (a text encoder's [CLS], a vision transformer's class token), an image feature map's average."""
    import keras

    from tfx_hydra.models.layers import FirstToken

    if isinstance(features, dict):
        if "pooled_output" in features:
            return features["pooled_output"]
        features = features.get("sequence_output", next(iter(features.values())))
    if len(features.shape) == 4:
        return keras.layers.GlobalAveragePooling2D(name="pool")(features)
    if len(features.shape) == 3:
        return FirstToken(name="first_token")(features)
    return features


def causal_lm(hub, preset: str, folder: str, preprocessor, lora_rank: int | None, max_length: int, sampler: str):
    """keras-hub's causal LM of the preset with its preprocessor attached: it trains on raw strings (keras-hub's
    `fit` maps the preprocessor over the data: token ids, the next tokens, the padding as sample weights). With
    `lora_rank`, the backbone's attention is fine-tuned through low-rank adapters (keras-hub's `enable_lora`):
    its own weights stay frozen. `max_length` and `sampler` are what its served `generate` uses."""
    import keras

    from tfx_hydra.settings.checks import require_positive

    require_positive("model.max_length", max_length, 64)
    if lora_rank is not None:
        require_positive("model.lora_rank", lora_rank, 4)
    model = hub.models.CausalLM.from_preset(folder, preprocessor=preprocessor,
                                            dtype=keras.config.dtype_policy().name)
    if lora_rank:
        model.backbone.enable_lora(int(lora_rank))
    model.backbone.name = BACKBONE
    hub.samplers.get(sampler)  # a sampler keras-hub does not know: refused now, not at the export
    model.generation = {"max_length": int(max_length), "sampler": str(sampler)}
    model.preset = recorded(preset, folder, hub, preprocessor)
    return model
