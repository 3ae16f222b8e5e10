"""Preflight validation: every group option composes and validates; bad values get clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, compose
from tfx_hydra.errors import ConfigError
from tfx_hydra.settings.checked import validate

GROUPS = ["hardware", "precision", "strategy", "data", "model", "optimizer", "tracking", "export"]


def test_a_value_left_for_the_user_is_asked_for_by_name():
    with pytest.raises(ConfigError, match=r"data.directory, data.num_classes have no value \(image_folder needs "
                                          r"them\)") as caught:
        validate(compose(["data=image_folder"]))
    assert "Fix: data.directory=... data.num_classes=..." in str(caught.value)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


# what options with no default for a key (???) need from the user
REQUIRED = {
    ("data", "tfrecord"): ["data.train_files=/data/train-*.tfrecord", "data.input_shape=[8,8]", "data.num_classes=10"],
    ("data", "csv"): ["data.path=/data/table.csv", "data.input_shape=[4]", "data.num_classes=3"],
    ("data", "image_folder"): ["data.directory=/data/pets", "data.num_classes=2"],
    ("data", "text_folder"): ["data.directory=/data/reviews", "data.num_classes=2"],
    ("data", "text_table"): ["data.path=/data/texts.jsonl", "data.num_classes=2"],
    ("data", "text_corpus"): ["data.path=/data/corpus.txt", "task=causal_lm"],
    ("model", "hub"): ["model.handle=/models/feature_vector"],
    ("model", "keras_hub"): ["model.preset=/models/bert_tiny_en_uncased"],
}


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes_and_validates(group, option):
    cfg = compose([f"{group}={option}", *REQUIRED.get((group, option), [])])
    settings = validate(cfg)
    assert settings.trainer.epochs == 5
    if group == "precision":
        assert settings.precision.policy == {"fp32": "float32", "mixed": "mixed_float16", "bf16": "mixed_bfloat16",
                                             "auto": "auto"}[option]
    if group == "hardware":
        assert settings.hardware.name == option


def test_model_reads_the_data_spec_by_interpolation():
    cfg = compose(["data=synthetic", "data.input_shape=[4,6]", "data.num_classes=3"])
    assert list(cfg.model.input_shape) == [4, 6]
    assert cfg.model.num_classes == 3
    assert cfg.data.batch_size == cfg.trainer.batch_size


def test_seed_experiment_is_the_seed_recipe():
    cfg = compose(["experiment=seed_mnist_mlp"])
    assert (cfg.data._target_, cfg.data.name) == ("tfx_hydra.data.keras_dataset", "mnist")
    assert (cfg.model.units, cfg.model.dropout, cfg.model.layers) == (128, 0.2, 1)
    assert cfg.optimizer._target_ == "keras.optimizers.Adam"
    assert (cfg.trainer.epochs, cfg.trainer.batch_size) == (5, 32)


# what each preset leaves for the user (its first comment line's command says so)
PRESET_NEEDS = {
    ("experiment", "hub_transfer"): ["data.directory=/data/pets", "data.num_classes=2"],
    ("experiment", "tabular_regression"): ["data.path=/data/table.csv", "data.label_column=target",
                                           "data.input_shape=[10]"],
    ("experiment", "text_classification"): ["data.directory=/data/reviews", "data.num_classes=2"],
    ("experiment", "bert_text"): ["data.directory=/data/reviews", "data.num_classes=2"],
    ("experiment", "keras_hub_text"): ["model.preset=/data/bert_tiny_en_uncased", "data.directory=/data/reviews",
                                       "data.num_classes=2"],
    ("experiment", "multilabel_images"): ["data.directory=/data/images", "data.labels_csv=/data/tags.csv",
                                          "data.num_classes=5"],
    ("experiment", "tfrecord_multi_worker"): ["data.train_files=/data/train-*.tfrecord", "data.input_shape=[28,28]",
                                              "data.num_classes=10"],
}


@pytest.mark.parametrize("group,option", [(g, o) for g in ("experiment", "debug") for o in options(g)])
def test_every_preset_starts_with_its_command_and_validates(group, option):
    lines = (REPO / "conf" / group / f"{option}.yaml").read_text().splitlines()
    assert lines[0] == "# @package _global_"
    assert lines[1].startswith("# python -m tfx_hydra ") and f"{group}={option}" in lines[1], lines[1]
    for needed in PRESET_NEEDS.get((group, option), []):
        assert needed.split("=")[0] in lines[1]  # the command names what the user must give
    validate(compose([f"{group}={option}", *PRESET_NEEDS.get((group, option), [])]))


def test_the_debug_presets_set_what_they_promise():
    fast, overfit = compose(["debug=fast"]), compose(["debug=overfit"])
    assert (fast.trainer.epochs, fast.data.limit_batches, fast.tracking.enabled) == (1, 2, False)
    assert overfit.trainer.overfit_check and overfit.trainer.epochs == 100 and overfit.model.dropout == 0.0
    assert compose(["debug=numerics"]).trainer.check_numerics and compose(["debug=eager"]).trainer.run_eagerly
    assert compose(["debug=profile"]).trainer.tensorboard_profile_batches == [3, 5]
    assert compose(["debug=limit"]).data.limit_batches == 0.1


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "all"])
def test_a_bad_limit_batches_is_refused(value):
    with pytest.raises(ConfigError, match="data.limit_batches"):
        from tfx_hydra.data import digits

        digits([8, 8], 10, batch_size=32, seed=0, limit_batches=value)


def test_export_selects_none_one_or_several_exporters():
    settings = ["mlflow_model", "register_as", "source", "strict"]
    assert sorted(compose(["export=none"]).export) == settings
    assert sorted(compose().export) == sorted(["savedmodel", *settings])
    several = compose(["export=[savedmodel,tflite,onnx,keras]", "export.tflite.quantization=int8"]).export
    assert sorted(several) == sorted(["keras", "onnx", "savedmodel", "tflite", *settings])
    assert several.tflite.quantization == "int8" and several.onnx._target_ == "tfx_hydra.export.OnnxExport"


@pytest.mark.parametrize("override,key,fix", [
    ("trainer.epochs=abc", "trainer.epochs got 'abc'", "trainer.epochs=5"),
    ("trainer.epochs=-1", "trainer.epochs=-1 is out of range", "trainer.epochs=5"),
    ("trainer.batch_size=0", "trainer.batch_size=0 is out of range", "trainer.batch_size=32"),
    ("trainer.jit_compile=maybe", "trainer.jit_compile=maybe is not one of: auto, true, false",
     "trainer.jit_compile=auto"),
    ("trainer.steps_per_execution=1.5", "trainer.steps_per_execution=1.5 is not a positive integer or auto",
     "trainer.steps_per_execution=1"),
    ("hardware.strict=perhaps", "hardware.strict got 'perhaps'", "hardware.strict=false"),
    ("hardware.gpus=[a]", "hardware.gpus got 'a'", "hardware.gpus=[0]"),
    ("hardware.intra_op_threads=-2", "hardware.intra_op_threads=-2 is out of range", "hardware.intra_op_threads=0"),
    ("hardware.allocator=bfc", "hardware.allocator=bfc is not one of: null, cuda_malloc_async",
     "hardware.allocator=null"),
    ("precision.loss_scale=huge", "precision.loss_scale=huge is not one of: auto, dynamic, null, or a positive number",
     "precision.loss_scale=auto"),
    ("precision.loss_scale=-8", "precision.loss_scale=-8 is not one of", "precision.loss_scale=auto"),
    ("trainer.batch_size=big", "trainer.batch_size=big is not a positive integer or auto", "trainer.batch_size=32"),
    ("trainer.grad_accum_steps=0", "trainer.grad_accum_steps=0 is out of range", "trainer.grad_accum_steps=1"),
    ("trainer.backup_every=often", "trainer.backup_every=often is not an interval: expected a duration (90s, 5min, 1h)",
     "trainer.backup_every=10min"),
    ("trainer.tensorboard_profile_batches=[5,2]", "trainer.tensorboard_profile_batches=[5, 2]: expected [first, last]",
     "trainer.tensorboard_profile_batches=[10,20]"),
    ("hardware.precision=float64", "hardware.precision=float64 is not one of: float32, mixed_float16",
     "hardware.precision=float32"),
    ("sweep.direction=up", "sweep.direction=up is not one of: maximize, minimize", "sweep.direction=maximize"),
    ("seed=-3", "seed=-3 is out of range: expected 0 or more", "seed=42"),
    ("mode=serve", "mode=serve is not one of: train, evaluate", "mode=train"),
    ("tracking.connect_timeout=0", "tracking.connect_timeout=0.0 is out of range: expected a number > 0 (seconds)",
     "tracking.connect_timeout=5"),
])
def test_bad_values_name_the_key_and_the_fix(override, key, fix):
    extra = ["precision=mixed"] if override.startswith("precision.") else []
    with pytest.raises(ConfigError) as caught:
        validate(compose([*extra, override]))
    message = str(caught.value)
    assert key in message
    assert f"Fix: {fix}" in message


def test_an_unknown_key_added_with_plus_is_rejected_with_the_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'trainer.epoch'. Valid keys in 'trainer': epochs, "):
        validate(compose(["+trainer.epoch=3"]))


def test_validation_does_not_import_tensorflow_or_mlflow():
    code = ("import sys; from tests.helpers import compose; from tfx_hydra.settings.checked import validate; "
            "validate(compose(['trainer.epochs=3'])); "
            "print(sorted(m for m in ('tensorflow', 'keras', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- values preflight now judges before TensorFlow (each was training on nonsense or a library's traceback) --

@pytest.mark.parametrize("overrides, message", [
    (["optimizer.learning_rate=0"], r"optimizer.learning_rate=0 is out of range: expected a number > 0."),
    (["optimizer=sgd", "optimizer.momentum=-0.1"],
     r"optimizer.momentum=-0.1 is out of range: expected a number \[0, 1\]"),
    (["optimizer=sgd", "optimizer.nesterov=maybe"], r"optimizer.nesterov=maybe: expected true or false"),
    (["+optimizer.beta_1=1.0"], r"optimizer.beta_1=1.0 is out of range: expected a number \[0, 1\)"),
    (["trainer.loss=categorical_crossentropy"],
     r"trainer.loss=categorical_crossentropy does not fit task=classification: it expects targets shaped like"),
    (["trainer.early_stopping.enabled=true", "trainer.early_stopping.monitor=val_auc"],
     r"trainer.early_stopping.monitor=val_auc is not a metric logged every epoch"),
    (["tracking.uri=./mlruns"], r"tracking.uri=./mlruns is not a store URI MLflow takes"),
    (["tracking.uri=file:///tmp/mlruns"], r"tracking.uri=file:///tmp/mlruns is MLflow's retired file store"),
    (["export.mlflow_model=sometimes"], r"export.mlflow_model=sometimes: expected true or false"),
    (["export.register_as=' '"], r"export.register_as= : expected a name or null"),
])
def test_values_a_user_mistypes_fail_in_validation(overrides, message, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=message):
        validate(compose(overrides))


def test_the_values_around_those_limits_pass(monkeypatch):
    settings = validate(compose(["optimizer=sgd", "optimizer.momentum=0", "optimizer.learning_rate=1",
                                 "trainer.early_stopping.enabled=true", "trainer.early_stopping.monitor=accuracy",
                                 "tracking.uri=sqlite:///runs/mlflow.db", "export.register_as=digits"]))
    assert settings.trainer.early_stopping.monitor == "accuracy"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own opt-in to its file store
    assert validate(compose(["tracking.uri=file:///tmp/mlruns"])).tracking.uri == "file:///tmp/mlruns"
